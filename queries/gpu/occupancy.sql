-- Occupancy per kernel: what CUPTI reported and what the launch configuration allows.
--
-- One row per trace, kernel name, device and launch configuration (block
-- size, registers per thread, shared memory per block: a name launched with
-- several configurations gets one row each). reported_occupancy_pct averages
-- the "est. achieved occupancy %" Kineto writes: min(grid blocks / SMs,
-- resident blocks) x threads per block / max threads per SM, with resident
-- blocks from cuda_occupancy.h without the shared-memory opt-in, so a kernel
-- using more than sharedMemPerBlock (48 KiB) of shared memory gets 0 (the
-- cuDNN / CUTLASS kernels launched with cuLaunchKernelEx that the post
-- meets), as does a grid far smaller than the GPU. occupancy_pct is the
-- reported value, or the theoretical one when the reported is missing or is 0
-- because of that shared-memory limit (occupancy_source says which).
-- Theoretical occupancy follows CUDA's occupancy calculator (cuda_occupancy.h)
-- with the device's properties from the trace (devices, joined on trace and
-- device; when a trace lists a single device whose index differs from the
-- GPU ops', as in ROCm traces, that device is used). warps per block =
-- ceil(threads / warp size). Registers: regs_per_warp = registers per thread
-- x warp size rounded up to 256; the register file (regsPerMultiprocessor,
-- else regsPerBlock) is split into 4 sub-partitions (2 on compute capability
-- 6.0), each holding floor(file / 4 / regs_per_warp) warps, and blocks =
-- floor(4 x that / warps per block), which is floor(file / (regs_per_warp x
-- warps per block)) unless rounding within a quarter loses warps (40
-- registers x 96 threads: 16 blocks, not 17).
-- Shared memory: each block takes its static + dynamic shared memory plus 1
-- KiB reserved by the driver on compute capability 8.0 and later, rounded up
-- to 128 bytes (256 before 8.0); blocks = floor(sharedMemPerMultiprocessor /
-- that), assuming the default carveout (the largest shared memory
-- configuration). Threads: blocks = floor(max warps per SM / warps per
-- block). Blocks: the resident-block limit of the architecture, 16 on 3.x,
-- 7.5, 8.6 and 8.7, 24 on 8.9, 32 otherwise. The smallest limit gives the
-- theoretical blocks per SM; occupancy = blocks x warps per block / (max
-- threads per SM / warp size). limiter names the smallest limit (on a tie,
-- the first of registers, shared_memory, threads, blocks). The post's
-- checks on an A100: flash_fwd (128 threads, 255 registers) -> 2 blocks, 8 of
-- 64 warps = 12.5 %; cuDNN SDPA (256 threads, 240 registers) -> 1 block =
-- 12.5 %.
-- Limits: the calculator ignores a launch's grid (too few blocks to fill the
-- GPU lowers achieved occupancy; CUPTI's estimate accounts for it) and the
-- carveout the driver really chose. AMD is not modelled: a CDNA compute unit
-- allocates VGPRs per SIMD lane in granules of 8 (512 per lane), runs up to 8
-- waves of 64 per SIMD and shares 64 KiB of LDS, which the NVIDIA formula
-- does not capture, and ROCm traces report neither registers nor shared
-- memory per kernel; theoretical columns are NULL on AMD devices, as they are
-- for kernels without a reported configuration or a trace without device
-- properties. By default kernels with no launch in the trace (orphans) are
-- left out.
--
-- @param include_orphans BOOLEAN = false   Also count kernels launched before the trace began.
-- @column trace VARCHAR                       Trace label.
-- @column name VARCHAR                        Kernel name as written.
-- @column device INTEGER                      GPU index of the kernels (gpu_ops.device).
-- @column device_name VARCHAR                 Name of the device whose properties were used (NULL: none in the trace).
-- @column launches BIGINT                     Kernels with this name and configuration.
-- @column total_ns BIGINT                     Their summed duration, nanoseconds.
-- @column block_threads INTEGER               Threads per block (block x * y * z).
-- @column warps_per_block INTEGER             ceil(block_threads / warp size).
-- @column registers_per_thread INTEGER        Registers per thread as reported.
-- @column shared_memory_bytes BIGINT          Static + dynamic shared memory per block, bytes.
-- @column reported_occupancy_pct DOUBLE       Mean of Kineto's est. achieved occupancy % (0 above 48 KiB of shared memory or for a tiny grid).
-- @column theoretical_blocks_per_sm BIGINT    Resident blocks per SM the configuration allows.
-- @column theoretical_warps_per_sm BIGINT     theoretical_blocks_per_sm x warps_per_block.
-- @column max_warps_per_sm INTEGER            max threads per SM / warp size.
-- @column theoretical_occupancy_pct DOUBLE    100 * theoretical_warps_per_sm / max_warps_per_sm.
-- @column limiter VARCHAR                     registers, shared_memory, threads or blocks: the limit that binds.
-- @column blocks_limit_registers BIGINT       Blocks per SM the register file allows (NULL: no registers used).
-- @column blocks_limit_shared_memory BIGINT   Blocks per SM shared memory allows (NULL: none used).
-- @column blocks_limit_threads BIGINT         Blocks per SM the warp slots allow.
-- @column blocks_limit_blocks BIGINT          The architecture's resident-block limit.
-- @column occupancy_pct DOUBLE                reported_occupancy_pct, or theoretical_occupancy_pct where that is missing or 0 for shared memory.
-- @column occupancy_source VARCHAR            reported or theoretical: where occupancy_pct came from.
WITH configs AS (
    SELECT trace_id, device, name, block_threads(block) AS block_threads,
           registers_per_thread, shared_memory_bytes,
           count(*) AS launches, sum(dur_ns)::BIGINT AS total_ns,
           avg(est_occupancy_pct) AS reported_occupancy_pct
    FROM gpu_ops
    WHERE kind = 'kernel' AND ($include_orphans OR NOT orphan)
    GROUP BY trace_id, device, name, block_threads, registers_per_thread, shared_memory_bytes
),
device_candidates AS (
    SELECT k.trace_id, k.device, d.name AS device_name, d.warp_size, d.max_threads_per_sm,
           coalesce(d.regs_per_sm, d.regs_per_block) AS regs_per_sm, d.shared_mem_per_sm_bytes,
           d.shared_mem_per_block_bytes,
           TRY_CAST(split_part(d.compute_capability, '.', 1) AS INTEGER) AS cc_major,
           TRY_CAST(split_part(d.compute_capability, '.', 2) AS INTEGER) AS cc_minor,
           d.warp_size = 64 OR d.name ILIKE '%AMD%' OR d.name ILIKE '%Radeon%' OR d.name ILIKE '%Instinct%' AS amd,
           d.device = k.device AS exact,
           count(*) OVER (PARTITION BY k.trace_id, k.device) AS candidates
    FROM (SELECT DISTINCT trace_id, device FROM configs) k
    JOIN devices d ON d.trace_id = k.trace_id
),
device_props AS (
    SELECT * FROM device_candidates WHERE exact OR candidates = 1
),
modelled AS (
    SELECT c.*, p.device_name,
           (c.block_threads + p.warp_size - 1) // p.warp_size AS warps_per_block,
           p.max_threads_per_sm // p.warp_size AS max_warps_per_sm,
           coalesce(NOT p.amd AND c.block_threads > 0 AND c.registers_per_thread IS NOT NULL
                    AND p.warp_size > 0 AND p.max_threads_per_sm > 0 AND p.regs_per_sm > 0, false) AS modelled,
           p.regs_per_sm, p.shared_mem_per_sm_bytes, p.shared_mem_per_block_bytes, p.cc_major, p.cc_minor,
           CASE WHEN p.cc_major = 6 AND p.cc_minor = 0 THEN 2 ELSE 4 END AS sub_partitions,
           (c.registers_per_thread * p.warp_size + 255) // 256 * 256 AS regs_per_warp,
           CASE WHEN p.cc_major >= 8 THEN 128 ELSE 256 END AS smem_granularity,
           CASE WHEN p.cc_major >= 8 THEN 1024 ELSE 0 END AS smem_reserved
    FROM configs c
    LEFT JOIN device_props p ON p.trace_id = c.trace_id AND p.device = c.device
),
sized AS (
    SELECT *,
           -- shared memory a block takes: its own plus the driver's reserve, in allocation units
           (coalesce(shared_memory_bytes, 0) + smem_reserved + smem_granularity - 1)
               // smem_granularity * smem_granularity AS smem_per_block
    FROM modelled
),
limits AS (
    SELECT *,
           CASE WHEN modelled AND registers_per_thread > 0
                THEN (regs_per_sm // sub_partitions // regs_per_warp) * sub_partitions // warps_per_block
           END::BIGINT AS blocks_limit_registers,
           CASE WHEN modelled AND smem_per_block > 0 THEN shared_mem_per_sm_bytes // smem_per_block
           END::BIGINT AS blocks_limit_shared_memory,
           CASE WHEN modelled THEN max_warps_per_sm // warps_per_block END::BIGINT AS blocks_limit_threads,
           CASE WHEN NOT modelled THEN NULL
                WHEN cc_major = 3 OR (cc_major = 7 AND cc_minor = 5) OR (cc_major = 8 AND cc_minor IN (6, 7)) THEN 16
                WHEN cc_major = 8 AND cc_minor = 9 THEN 24
                ELSE 32
           END::BIGINT AS blocks_limit_blocks
    FROM sized
),
theory AS (
    SELECT *,
           least(blocks_limit_registers, blocks_limit_shared_memory, blocks_limit_threads,
                 blocks_limit_blocks) AS theoretical_blocks_per_sm
    FROM limits
),
result AS (
    SELECT *,
           CASE WHEN modelled THEN round(100.0 * theoretical_blocks_per_sm * warps_per_block / max_warps_per_sm, 3)
           END AS theoretical_occupancy_pct,
           CASE WHEN NOT modelled THEN NULL
                WHEN theoretical_blocks_per_sm = blocks_limit_registers THEN 'registers'
                WHEN theoretical_blocks_per_sm = blocks_limit_shared_memory THEN 'shared_memory'
                WHEN theoretical_blocks_per_sm = blocks_limit_threads THEN 'threads'
                ELSE 'blocks'
           END AS limiter,
           -- Kineto's estimate is 0, not missing, unless the block needs more than
           -- sharedMemPerBlock (Kineto asks cuda_occupancy.h without the opt-in).
           reported_occupancy_pct > 0 OR (reported_occupancy_pct = 0 AND NOT coalesce(
               modelled AND smem_per_block > shared_mem_per_block_bytes + smem_reserved, false)) AS use_reported
    FROM theory
)
SELECT t.trace, r.name, r.device, r.device_name, r.launches, r.total_ns, r.block_threads,
       CASE WHEN r.modelled THEN r.warps_per_block END::INTEGER AS warps_per_block,
       r.registers_per_thread, r.shared_memory_bytes,
       round(r.reported_occupancy_pct, 3) AS reported_occupancy_pct,
       r.theoretical_blocks_per_sm,
       (r.theoretical_blocks_per_sm * r.warps_per_block)::BIGINT AS theoretical_warps_per_sm,
       CASE WHEN r.modelled THEN r.max_warps_per_sm END::INTEGER AS max_warps_per_sm,
       r.theoretical_occupancy_pct, r.limiter,
       r.blocks_limit_registers, r.blocks_limit_shared_memory, r.blocks_limit_threads, r.blocks_limit_blocks,
       CASE WHEN r.use_reported THEN round(r.reported_occupancy_pct, 3)
            ELSE r.theoretical_occupancy_pct END AS occupancy_pct,
       CASE WHEN r.use_reported THEN 'reported'
            WHEN r.theoretical_occupancy_pct IS NOT NULL THEN 'theoretical' END AS occupancy_source
FROM result r
JOIN traces t USING (trace_id)
ORDER BY t.trace, r.total_ns DESC, r.name, r.device, r.block_threads NULLS LAST,
         r.registers_per_thread NULLS LAST, r.shared_memory_bytes NULLS LAST;
