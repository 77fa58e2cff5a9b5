-- How much further back each run's QKV projections reach when other kernels keep them apart.
--
-- Inductor fuses a projection's bias add into the next q/k-norm kernel, so FLUX's q, k and v GEMMs alternate
-- with norm kernels. Before the adjacent group of GEMMs, the walk goes on over at most ext_reach kernels to
-- earlier GEMMs of the group's own kernel names (q, k and v of one width run the same GEMM kernel), stopping
-- at a norm kernel (the layer's input norm), a GEMM of another name, a closed kernel or the previous block.
--
-- @param ext_reach INT      Kernels before the adjacent group that may hold its earlier projections (kernel_blocks.EXT_REACH).
-- @reads _kb_runs, _kb_sequence
-- @creates _kb_extended     Per run that reaches further: run_id, ext_k0 (its first projection).
CREATE OR REPLACE TEMP TABLE _kb_extended AS
WITH look AS (
    SELECT run_id, trace_id, device, stream, g, qkv_k0, qkv_k, greatest(prev_k1, prev_out) AS floor_k,
           unnest(range(greatest(qkv_k0 - {{ext_reach}}, 1), qkv_k + 1)) AS at_k
    FROM _kb_runs WHERE qkv_k IS NOT NULL
),
j AS (
    SELECT l.run_id, l.qkv_k0, l.floor_k, q.k, q.name_id, q.norm,
           CASE WHEN l.g THEN q.gopen ELSE q.open END AS is_open,
           CASE WHEN l.g THEN q.gfree_gemm ELSE q.free_gemm END AS is_gemm
    FROM look l JOIN _kb_sequence q
      ON {{include attribution/kernel_stream_at kernel=q span=l at=at_k}}
),
named AS (
    SELECT j.*, n.names FROM j
    JOIN (SELECT run_id, list(DISTINCT name_id) AS names FROM j WHERE k >= qkv_k0 GROUP BY run_id) n USING (run_id)
),
stops AS (
    SELECT run_id, coalesce(max(k) FILTER (WHERE k <= floor_k OR NOT is_open OR norm
                                              OR (is_gemm AND NOT list_contains(names, name_id))), 0) AS stop_k
    FROM named WHERE k < qkv_k0 GROUP BY run_id
)
SELECT n.run_id, min(n.k) AS ext_k0
FROM named n JOIN stops s USING (run_id)
WHERE n.k < n.qkv_k0 AND n.k > s.stop_k AND n.is_gemm
GROUP BY n.run_id;
