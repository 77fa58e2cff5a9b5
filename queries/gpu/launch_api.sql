-- GPU work per launch API: how many calls, how many GPU ops, CPU and GPU time.
--
-- One row per trace and launch API (runtime_calls.api): cudaLaunchKernel,
-- cudaLaunchKernelExC, cuLaunchKernel / cuLaunchKernelEx (driver), cudaGraphLaunch,
-- cudaMemcpyAsync, cudaMemsetAsync and their HIP twins (hipLaunchKernel,
-- hipExtModuleLaunchKernel, hipModuleLaunchKernel, hipGraphLaunch, ...), each
-- as its own row. launches counts the calls that launched at least one GPU
-- op (a memset call that launched nothing is not one); a graph launch is one
-- launch of many GPU ops (ops_per_launch). cpu_ns sums the calls' own CPU
-- durations, gpu_ns the durations of the GPU ops they launched. GPU ops
-- with no launch in the trace form one row with api '(no launch in trace)',
-- 0 launches and NULL CPU time: those without a correlation id always,
-- orphans (launched before the trace began) only with include_orphans=true.
--
-- @param include_orphans BOOLEAN = false   Add a row for GPU ops launched before the trace began.
-- @column trace VARCHAR           Trace label.
-- @column api VARCHAR             Launch API as written, or '(no launch in trace)' for orphans.
-- @column launches BIGINT         Calls of this API that launched at least one GPU op.
-- @column gpu_ops BIGINT          GPU ops (kernels, memcpys, memsets) they launched.
-- @column ops_per_launch DOUBLE   gpu_ops / launches (above 1 for graph launches; NULL for orphans).
-- @column cpu_ns BIGINT           Summed CPU duration of those calls, nanoseconds (NULL for orphans).
-- @column cpu_ns_avg DOUBLE       Mean CPU duration of one call, nanoseconds.
-- @column gpu_ns BIGINT           Summed duration of the GPU ops launched, nanoseconds.
-- @column gpu_share_pct DOUBLE    100 * gpu_ns / summed duration of all counted GPU ops of the trace.
WITH per_launch AS (
    SELECT trace_id, launch_id, count(*) AS gpu_ops, sum(dur_ns) AS gpu_ns
    FROM gpu_ops
    WHERE $include_orphans OR NOT orphan
    GROUP BY trace_id, launch_id
),
per_api AS (
    SELECT p.trace_id, coalesce(r.api, '(no launch in trace)') AS api,
           count(r.id) AS launches, sum(p.gpu_ops)::BIGINT AS gpu_ops,
           sum(r.dur_ns)::BIGINT AS cpu_ns, avg(r.dur_ns) AS cpu_ns_avg,
           sum(p.gpu_ns)::BIGINT AS gpu_ns
    FROM per_launch p
    LEFT JOIN runtime_calls r ON r.id = p.launch_id
    GROUP BY p.trace_id, coalesce(r.api, '(no launch in trace)')
)
SELECT t.trace, a.api, a.launches, a.gpu_ops,
       CASE WHEN a.launches > 0 THEN round(a.gpu_ops / a.launches, 3) END AS ops_per_launch,
       a.cpu_ns, round(a.cpu_ns_avg, 3) AS cpu_ns_avg, a.gpu_ns,
       round(100.0 * a.gpu_ns / sum(a.gpu_ns) OVER (PARTITION BY a.trace_id), 3) AS gpu_share_pct
FROM per_api a
JOIN traces t USING (trace_id)
ORDER BY t.trace, a.gpu_ns DESC, a.api;
