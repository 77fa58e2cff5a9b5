-- Every GPU op's decision from its launch, a GPU annotation or its kernel rule, before the kernel-order blocks.
--
-- A GPU op takes the decision of the CPU slice that launched it when a CPU layer decided it (cpu_sources);
-- else its GPU annotation's label; else its kernel rule, when the rule's context is any or the op is in a
-- call; else other/none. Only a launch inside a call needs its position (no call: no anchors to compare
-- with). Kernel-decided positions join the call's anchors (inductor launches its GEMMs with no op), and a
-- kernel rule's matmul/proj/norm is resolved by the launch's position in its call. An attention kernel found
-- by name outside any call is a call of its own, unless its rule calls it a helper (the kernel-order runs
-- take helpers into the adjacent call: attribution/kernel_block_runs). An attention kernel is one a rule
-- names one (in context), or any kernel of a kernel-level stage that is not decided by its kernel rule.
--
-- @param cpu_sources LIST   The sources of CPU decisions (label, module, op and backward.SOURCE).
-- @param kernel_level LIST  The stages whose kernels count as attention kernels (assign.KERNEL_LEVEL_STAGES).
-- @param core LIST          The core's stages: matmul and assign.CORE_STAGES.
-- @param products LIST      The core's products (assign.PRODUCTS).
-- @param rope_ops LIST      The stages a plain-op rotary embedding is made of (assign.ROPE_OPS).
-- @reads gpu_ops, cpu_stage_decisions, _cpu, _gpu_label, _kernel_match, _call_anchors
-- @creates _gpu_decisions   Every GPU op: id, trace_id, stage, source, call_id, rule, attention_kernel, kernel_impl.
CREATE OR REPLACE TEMP TABLE _gpu_decisions AS
WITH k AS (
    SELECT g.id, g.trace_id, g.kind, g.name, g.dur_ns, g.orphan, c.stage AS cpu_stage, c.source AS cpu_source,
           c.call_id, c.rule AS cpu_rule, gl.d AS gpu_label, km.m AS km, p.pos::DOUBLE AS launch_pos
    FROM gpu_ops g
    LEFT JOIN cpu_stage_decisions c ON c.id = g.launch_id
    -- Only a launch inside a call needs its position (no call: no anchors to compare with).
    LEFT JOIN (SELECT id, pos FROM _cpu
               WHERE id IN (SELECT id FROM cpu_stage_decisions WHERE call_id IS NOT NULL)) p
           ON p.id = g.launch_id
    LEFT JOIN _gpu_label gl ON gl.id = g.id
    LEFT JOIN _kernel_match km ON km.name = g.name
),
d AS (
    SELECT *,
           CASE WHEN cpu_source IN {{cpu_sources}} THEN cpu_source
                WHEN gpu_label.stage IS NOT NULL THEN 'gpu_annotation'
                WHEN km.stage IS NOT NULL AND (km.context = 'any' OR call_id IS NOT NULL) THEN 'kernel'
                ELSE 'none' END AS source
    FROM k
),
-- Kernel-decided positions join the call's anchors (inductor launches its GEMMs with no op).
ka AS (
    SELECT call_id, {{include attribution/anchors stage=km.stage pos=launch_pos low_rank=false core=core products=products}}
    FROM d WHERE source = 'kernel' AND call_id IS NOT NULL GROUP BY call_id
),
a AS (
    SELECT coalesce(c.call_id, k.call_id) AS call_id,
           least(c.softmax_pos, k.softmax_pos) AS softmax_pos,
           least(c.first_matmul_pos, k.first_matmul_pos) AS first_matmul_pos,
           least(c.core_pos, k.core_pos) AS core_pos,
           greatest(c.core_end_pos, k.core_end_pos) AS core_end_pos,
           least(c.first_proj_pos, k.first_proj_pos) AS first_proj_pos,
           least(c.product_pos, k.product_pos) AS product_pos,
           least(c.rotate_pos, k.rotate_pos) AS rotate_pos,
           c.rope_lo, c.rope_hi, c.rope_end_pos
    FROM _call_anchors c FULL OUTER JOIN ka k ON k.call_id = c.call_id
),
s AS (
    SELECT d.*,
           CASE WHEN cpu_source IN {{cpu_sources}} THEN cpu_stage
                WHEN source = 'gpu_annotation' THEN gpu_label.stage
                -- A kernel rule's matmul/proj/norm is resolved by the launch's position in its call.
                WHEN source = 'kernel' THEN {{include attribution/resolved_stage stage=km.stage pos=launch_pos anchor=a positional=true nested=false low_rank=false appends=false rope_ops=rope_ops}}
                ELSE 'other' END AS stage
    FROM d LEFT JOIN a ON a.call_id = d.call_id
)
SELECT * FROM (
    SELECT id, trace_id, stage, source,
           -- An attention kernel found by name outside any call is a call of its own (a helper joins one later).
           coalesce(call_id, CASE WHEN source = 'kernel' AND km.stage = 'fused_attention' AND NOT km.helper THEN id END)
               AS call_id,
           CASE WHEN cpu_source IN {{cpu_sources}} THEN cpu_rule
                WHEN source = 'gpu_annotation' THEN gpu_label.rule WHEN source = 'kernel' THEN km.rule END
               AS rule,
           kind = 'kernel' AND (coalesce(km.attention, false) AND (km.context = 'any' OR call_id IS NOT NULL)
                                OR (source <> 'kernel' AND stage IN {{kernel_level}}))
               AS attention_kernel,
           km.impl AS kernel_impl
    FROM s
);

DROP TABLE _gpu_label;
