-- The kernel sequence of each stream to read: every GPU op numbered in stream order, with what the walk needs of it.
--
-- A GEMM is a kernel whose rule_op_categories kernel category is GEMM (the first matching rule, a user
-- folder's rows first). Names are classified per distinct name, not per kernel (a regex over hundreds of
-- thousands of long kernel names is slow). The order is numbered over narrow rows (id, stream, time) and the
-- rest joined by id: a window that carries kernel names sorts them too. A kernel is open (a block may take
-- it in) when it is an attention kernel's own call or free (undecided, a kernel that gpu_op_category calls
-- computation, which a user's kernel rule may still call communication or memcpy); gopen and gfree_gemm are the same for a CPU call's block, which takes in only graph replays'
-- kernels. The last statement counts the CPU calls a block may widen.
--
-- @param decisions IDENT        The GPU op decisions so far: id, source, call_id, kernel_impl.
-- @param backward_kernel TEXT   A backward attention kernel's name (kernel_blocks.BACKWARD_KERNEL).
-- @reads gpu_ops, rule_op_categories, _kernel_match, _kb_streams, _kb_cpu_calls
-- @creates _kb_categories       Per kernel name on those streams: m, its first rule_op_categories kernel rule (category, rule).
-- @creates _kb_names            Per kernel name: name_id, category, reduction (a collective: is_collective_kernel or a communication category rule), backward.
-- @creates _kb_sequence         Every GPU op of the streams: k (its number on the stream), own, impl, free, gemm, norm, reduction, backward, name_id, km (its kernel rule), dcall (its call), via_graph, helper (an attention helper kernel with no call yet), open, free_gemm, gopen, gfree_gemm.
CREATE OR REPLACE TEMP TABLE _kb_categories AS
WITH n AS MATERIALIZED (
    SELECT n.*, n.name AS _subject
    FROM (SELECT DISTINCT name FROM gpu_ops JOIN _kb_streams USING (trace_id, device, stream)) n
),
h AS ({{pattern_hits rule_op_categories n _subject}})
SELECT name, arg_min(m, o) AS m FROM (
    SELECT n.name, r.rule_order AS o, struct_pack(category := r.category, rule := r.pattern) AS m
    FROM n JOIN h USING (_subject) JOIN rule_op_categories r ON r.pattern = h.pattern AND r.applies_to = 'kernel'
) GROUP BY name;

CREATE OR REPLACE TEMP TABLE _kb_names AS
SELECT n.name, row_number() OVER () AS name_id, c.m.category AS category,
       is_collective_kernel(n.name) OR coalesce(c.m.category = 'communication', false) AS reduction,
       regexp_matches(n.name, {{backward_kernel}}) AS backward
FROM (SELECT DISTINCT name FROM gpu_ops JOIN _kb_streams USING (trace_id, device, stream)) n
LEFT JOIN _kb_categories c USING (name);

CREATE OR REPLACE TEMP TABLE _kb_sequence AS
WITH o AS (
    SELECT g.id, g.trace_id, g.device, g.stream,
           row_number() OVER (PARTITION BY g.trace_id, g.device, g.stream ORDER BY g.ts_ns, g.id) AS k
    FROM gpu_ops g JOIN _kb_streams USING (trace_id, device, stream)
),
s AS (
    SELECT o.*,
           d.source = 'kernel' AND d.call_id = d.id AS own, d.kernel_impl AS impl,
           d.source IN ('none', 'kernel') AND d.call_id IS NULL
               AND g.kind = 'kernel' AND gpu_op_category(g.kind, g.name) = 'computation'
               AND coalesce(c.category, '') NOT IN ('communication', 'memcpy') AS free,
           coalesce(c.category = 'GEMM', false) AS gemm,
           coalesce(c.category = 'norm', false) AS norm,
           g.kind = 'kernel' AND c.reduction AND d.source = 'none' AND d.call_id IS NULL AS reduction,
           c.backward, c.name_id, km.m AS km, d.call_id AS dcall, g.via_graph,
           d.source = 'kernel' AND d.call_id IS NULL AND coalesce(km.m.helper, false) AS helper
    FROM o JOIN gpu_ops g USING (id)
    JOIN {{decisions}} d USING (id)
    JOIN _kb_names c ON c.name = g.name
    LEFT JOIN _kernel_match km ON km.name = g.name
)
SELECT *, own OR free AS open, free AND gemm AS free_gemm,
       own OR (free AND via_graph) AS gopen, free AND gemm AND via_graph AS gfree_gemm FROM s;

SELECT count(*) FROM _kb_cpu_calls;
