-- CUPTI range-profiler traces: each profiled kernel (range) with its counters, FLOPs and DRAM bytes, and its op.
--
-- A trace recorded with the CUPTI range profiler (activity cuda_profiler_range,
-- which Kineto runs alone) has no kernel events, so gpu_ops is empty and the
-- time-based queries answer nothing. Its ranges carry the counters instead; in
-- per-kernel (auto range) mode one range per kernel, named by the kernel, and
-- their times are not the kernels' (Kineto splits the profiling span evenly
-- among them), so no duration is given here. flops sums the SASS
-- floating-point instruction counters (FMA counted twice) as HTA does;
-- dram_bytes is dram__bytes_read.sum + dram__bytes_write.sum when recorded.
-- The n-th range of a device is matched to the trace's n-th kernel launch call
-- (as HTA does), which gives the op that launched it; when the counts differ
-- no op is given.
--
-- @column trace VARCHAR          Trace label.
-- @column device VARCHAR         Device (the range's pid).
-- @column range_index BIGINT     Position of the range on its device, from 1.
-- @column name VARCHAR           Kernel (auto range) or range name.
-- @column cpu_op_name VARCHAR    Innermost CPU op around the matched launch (NULL when unmatched).
-- @column flops DOUBLE           Floating-point operations from the SASS counters (NULL when not recorded).
-- @column dram_bytes DOUBLE      DRAM bytes read and written (NULL when not recorded).
-- @column tensor_insts DOUBLE    sm__inst_executed_pipe_tensor.sum (NULL when not recorded).
-- @column counters JSON          Every counter of the range as written.
WITH ranges AS (
    SELECT trace_id, pid AS device, name, args, id,
           row_number() OVER (PARTITION BY trace_id, pid ORDER BY ts_ns, id) AS range_index,
           count(*) OVER (PARTITION BY trace_id, pid) AS n
    FROM slices
    WHERE cat = 'cuda_profiler_range'
),
launches AS (
    SELECT trace_id, cpu_op_name, row_number() OVER (PARTITION BY trace_id ORDER BY ts_ns, id) AS launch_index,
           count(*) OVER (PARTITION BY trace_id) AS n
    FROM runtime_calls
    WHERE regexp_matches(api, '(?i)launchkernel')
),
counted AS (
    SELECT r.*,
           (SELECT sum(coalesce(TRY_CAST(json_extract(r.args, '$."smsp__sass_thread_inst_executed_op_' || op
                                                    || '_pred_on.sum"') AS DOUBLE), 0)
                       * CASE WHEN op LIKE '%fma' THEN 2 ELSE 1 END)
            FROM (VALUES ('ffma'), ('fmul'), ('fadd'), ('hfma'), ('hmul'), ('hadd'), ('dfma'), ('dmul'), ('dadd')) v(op)
           ) AS flops_all,
           json_keys(r.args) AS keys
    FROM ranges r
)
SELECT t.trace, c.device, c.range_index, c.name, l.cpu_op_name,
       CASE WHEN list_has_any(c.keys, ['smsp__sass_thread_inst_executed_op_ffma_pred_on.sum',
                                      'smsp__sass_thread_inst_executed_op_hfma_pred_on.sum',
                                      'smsp__sass_thread_inst_executed_op_dfma_pred_on.sum'])
            THEN c.flops_all END AS flops,
       TRY_CAST(json_extract(c.args, '$."dram__bytes_read.sum"') AS DOUBLE)
           + TRY_CAST(json_extract(c.args, '$."dram__bytes_write.sum"') AS DOUBLE) AS dram_bytes,
       TRY_CAST(json_extract(c.args, '$."sm__inst_executed_pipe_tensor.sum"') AS DOUBLE) AS tensor_insts,
       c.args AS counters
FROM counted c
JOIN traces t USING (trace_id)
LEFT JOIN launches l ON l.trace_id = c.trace_id AND l.launch_index = c.range_index AND l.n = c.n
ORDER BY t.trace, c.device, c.range_index;
