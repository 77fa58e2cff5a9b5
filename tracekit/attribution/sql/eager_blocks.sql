-- Each core's block on the axis, and the eager patterns widened to theirs.
--
-- A block never reaches into the one before it on its thread. Its span is its first sibling's start to its
-- last's end; widened when it holds more than the core. Without shapes (or with an einsum, whose head dim is
-- not read) an eager pattern stays product to product and a call op itself.
--
-- @reads _eager_ends, _eager_block_cores, _eager_siblings
-- @creates _eager_blocks   Per core (qk_id): widened, pos (its first sibling's), k0, k1, ts_ns, end_ns (its span).
-- @creates _eager_found    Replaced: each pattern's qk_pos, k0, k1, ts_ns and end_ns are its block's.
CREATE OR REPLACE TEMP TABLE _eager_blocks AS
WITH w AS (
    SELECT w.qk_id, f.qk_i, f.pv_i, f.lane, f.parent_id, w.end_i,
           greatest(w.start_i, coalesce(w.prev_end, -1) + 1) AS start_i
    FROM _eager_ends w JOIN _eager_block_cores f USING (qk_id)
)
SELECT w.qk_id, w.start_i < w.qk_i OR w.end_i > w.pv_i AS widened,
       a.pos, a.k0, z.k1, a.ts_ns, z.end_ns
FROM w
JOIN _eager_siblings a ON a.lane = w.lane AND coalesce(a.parent_id, -1) = coalesce(w.parent_id, -1)
                      AND a.i = w.start_i
JOIN _eager_siblings z ON z.lane = w.lane AND coalesce(z.parent_id, -1) = coalesce(w.parent_id, -1)
                      AND z.i = w.end_i;

CREATE OR REPLACE TEMP TABLE _eager_found AS
SELECT f.* REPLACE (w.pos AS qk_pos, w.k0 AS k0, w.k1 AS k1, w.ts_ns AS ts_ns, w.end_ns AS end_ns)
FROM _eager_found f JOIN _eager_blocks w USING (qk_id);
