-- The runs of attention kernels and how far each one's block reaches back to its QKV GEMMs and on to its output GEMM.
--
-- A run is adjacent attention kernels of one implementation that are calls of their own (a paged kernel and
-- its split-KV reduction are one call), with the helper kernels right after and before them (a helper joins
-- the run right before it, else the one right after it: a split-KV combine follows its kernel, FA3's
-- scheduler precedes it), or the kernels of a CPU call a block may widen (g: it takes in only graph replays' kernels). Going
-- forward: at most post_reach kernels up to the next free GEMM (out_k), not past a closed kernel or the next
-- run. Going back: at most pre_reach kernels up to the nearest free GEMM
-- (qkv_k), not past a closed kernel, the previous run or its output GEMM; then that GEMM and the free GEMMs
-- right before it, at most qkv_gemms (from qkv_k0). A CPU call's run widens only on a side its ops left without
-- a projection (open_before, open_after). A backward run (backward runs the layer in reverse) is not
-- widened. The graph bounds are the graph_nearest fragment the caller chose: windows, or NULLs when no CPU
-- call may use them.
--
-- @param pre_reach INT      Non-GEMM kernels allowed between the QKV GEMM and the run (kernel_blocks.PRE_REACH).
-- @param post_reach INT     Kernels allowed between the run and the output GEMM (kernel_blocks.POST_REACH).
-- @param qkv_gemms INT      Consecutive GEMMs before the run that are its projections (kernel_blocks.QKV_GEMMS).
-- @param graph_nearest KEYWORD(attribution/graph_nearest_kernels|attribution/no_graph_nearest_kernels)  The graph bounds: computed, or NULL.
-- @reads _kb_sequence, _kb_cpu_calls
-- @creates _kb_runs         Per run: run_id, trace_id, device, stream, k0 and k1 (its first and last kernel), call_id, backward, g, open_before, open_after, closed_before, gemm_before, closed_after, gemm_after, prev_k1, next_k0, out_k, prev_out, qkv_k, qkv_k0.
CREATE OR REPLACE TEMP TABLE _kb_runs AS
-- g: a CPU call's kernels, which take in only kernels of graph replays.
WITH own_runs AS (
    SELECT trace_id, device, stream, min(k) AS k0, max(k) AS k1, arg_min(id, k) AS call_id,
           bool_or(backward) AS backward
    FROM (SELECT *, k - row_number() OVER (PARTITION BY trace_id, device, stream, impl ORDER BY k) AS grp
          FROM _kb_sequence WHERE own)
    GROUP BY trace_id, device, stream, impl, grp
),
-- Per kernel: the nearest closed kernel and free GEMM on each side (closed: not open), and the nearest kernel
-- on each side that is no helper (how far the helpers beside a run reach).
w AS (
    SELECT trace_id, device, stream, k,
           {{include attribution/nearest_kernels prefix=kernel open=open gemm=free_gemm}},
           {{include graph_nearest}},
           max(CASE WHEN NOT helper THEN k END) OVER up AS not_helper_before,
           min(CASE WHEN NOT helper THEN k END) OVER down AS not_helper_after,
           max(k) OVER (PARTITION BY trace_id, device, stream) AS last_k
    FROM _kb_sequence
    WINDOW up AS (PARTITION BY trace_id, device, stream ORDER BY k ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING),
           down AS (PARTITION BY trace_id, device, stream ORDER BY k ROWS BETWEEN 1 FOLLOWING AND UNBOUNDED FOLLOWING)
),
-- The helpers right after a run are its (a split-KV combine); those right before it are its back to the previous run's.
helped AS (
    SELECT r.trace_id, r.device, r.stream, coalesce(a.not_helper_before, 0) + 1 AS k0_reach,
           coalesce(b.not_helper_after - 1, b.last_k) AS k1, r.call_id, r.backward
    FROM own_runs r
    JOIN w a ON {{include attribution/kernel_stream_at kernel=a span=r at=k0}}
    JOIN w b ON {{include attribution/kernel_stream_at kernel=b span=r at=k1}}
),
runs AS (
    SELECT trace_id, device, stream,
           greatest(k0_reach, lag(k1 + 1, 1, k0_reach) OVER (PARTITION BY trace_id, device, stream ORDER BY k1)) AS k0,
           k1, call_id, backward, false AS g, true AS open_before, true AS open_after
    FROM helped
    UNION ALL
    SELECT s.trace_id, s.device, s.stream, min(s.k), max(s.k), s.dcall, bool_or(s.backward), true,
           any_value(c.open_before), any_value(c.open_after)
    FROM _kb_sequence s JOIN _kb_cpu_calls c ON c.call_id = s.dcall
    GROUP BY s.trace_id, s.device, s.stream, s.dcall
),
bounded AS (
    SELECT r.*,
           CASE WHEN r.g THEN a.graph_closed_before ELSE a.kernel_closed_before END AS closed_before,
           CASE WHEN r.g THEN a.graph_gemm_before ELSE a.kernel_gemm_before END AS gemm_before,
           CASE WHEN r.g THEN b.graph_closed_after ELSE b.kernel_closed_after END AS closed_after,
           CASE WHEN r.g THEN b.graph_gemm_after ELSE b.kernel_gemm_after END AS gemm_after,
           lag(r.k1, 1, 0) OVER s AS prev_k1, lead(r.k0, 1, 9e18::BIGINT) OVER s AS next_k0
    FROM runs r
    JOIN w a ON {{include attribution/kernel_stream_at kernel=a span=r at=k0}}
    JOIN w b ON {{include attribution/kernel_stream_at kernel=b span=r at=k1}}
    WINDOW s AS (PARTITION BY r.trace_id, r.device, r.stream ORDER BY r.k0)
),
post AS (
    SELECT *, CASE WHEN NOT backward AND open_after AND gemm_after < coalesce(closed_after, 9e18) AND gemm_after < next_k0
                        AND gemm_after - k1 - 1 <= {{post_reach}} THEN gemm_after END AS out_k
    FROM bounded
),
pre AS (
    SELECT *, CASE WHEN NOT backward AND open_before AND gemm_before > greatest(coalesce(closed_before, 0), prev_k1, prev_out)
                        AND k0 - gemm_before - 1 <= {{pre_reach}} THEN gemm_before END AS qkv_k
    FROM (SELECT *, coalesce(lag(out_k) OVER s, 0) AS prev_out FROM post
          WINDOW s AS (PARTITION BY trace_id, device, stream ORDER BY k0))
)
SELECT row_number() OVER () AS run_id, p.*,
       greatest(coalesce(CASE WHEN p.g THEN w.graph_not_gemm_before ELSE w.kernel_not_gemm_before END, 0),
                p.prev_k1, p.prev_out, p.qkv_k - {{qkv_gemms}}) + 1 AS qkv_k0
FROM pre p
LEFT JOIN w ON {{include attribution/kernel_stream_at kernel=w span=p at=qkv_k}};
