-- Launch APIs whose kernels all report 0 % occupancy.
--
-- CUPTI's "est. achieved occupancy %" is 0 for every kernel launched with
-- cuLaunchKernelEx (the post's cuDNN SDPA kernel), because those kernels ask
-- for more shared memory than the default per-block limit; the kernel did not
-- run at 0 %. A single tiny kernel can also read 0 (a grid far smaller than the
-- GPU), so this looks at a whole launch API: it lists the kernels of every
-- (trace, launch API) whose kernels all report exactly 0. The occupancy query
-- gives their theoretical occupancy from registers, threads and shared memory.
-- One row per trace, launch API and kernel name; orphans (no launch API known)
-- are left out.
--
-- @column trace VARCHAR                  Trace label.
-- @column launch_api VARCHAR             Launch API, e.g. cuLaunchKernelEx.
-- @column name VARCHAR                   Kernel name as written.
-- @column launches BIGINT                Kernels of this name launched with the API.
-- @column total_ns BIGINT                Their summed duration, nanoseconds.
-- @column block_threads BIGINT           Threads per block (largest seen).
-- @column registers_per_thread INTEGER   Registers per thread (largest seen).
-- @column shared_memory_bytes BIGINT     Shared memory per block, bytes (largest seen).
WITH kernels AS (
    SELECT trace_id, launch_api, name, dur_ns, est_occupancy_pct, registers_per_thread, shared_memory_bytes,
           block_threads(block) AS block_threads
    FROM gpu_ops
    WHERE kind = 'kernel' AND NOT orphan AND launch_api IS NOT NULL
),
zero_apis AS (
    SELECT trace_id, launch_api
    FROM kernels
    GROUP BY trace_id, launch_api
    HAVING count(est_occupancy_pct) > 0 AND max(est_occupancy_pct) = 0 AND count(*) = count(est_occupancy_pct)
)
SELECT t.trace, k.launch_api, k.name, count(*) AS launches, sum(k.dur_ns)::BIGINT AS total_ns,
       max(k.block_threads)::BIGINT AS block_threads, max(k.registers_per_thread) AS registers_per_thread,
       max(k.shared_memory_bytes) AS shared_memory_bytes
FROM kernels k
JOIN zero_apis z USING (trace_id, launch_api)
JOIN traces t USING (trace_id)
GROUP BY t.trace, k.launch_api, k.name
ORDER BY t.trace, k.launch_api, total_ns DESC, k.name;
