-- Each kernel in one run's block, with its stage by its place: the QKV GEMMs, the kernels between, the output GEMM and its all-reduce.
--
-- A block spans at most qkv_gemms + pre_reach + post_reach + 2 kernels beside its run: its positions, listed,
-- join the sequence on equality (a range join would pair every run of a stream with every kernel of it).
-- The places: the run itself (its attention kernels merge into the run's first call); qkv (a GEMM from the
-- run's first projection to qkv_k); pre (the other kernels before the run); post (after it, before the
-- output GEMM); out (the output GEMM); reduce (a collective right after it: out_proj here, tp_comm once
-- attribution/gpu_op_stage_decisions sees it is communication). Between, a kernel takes its kernel rule's
-- stage where the rule names one that is not positional, a norm kernel before the core is qk_norm, anything
-- else layout. Blocks are disjoint by construction (each side bounded
-- by its neighbours'): a kernel taken twice is an internal error, checked here.
--
-- @param source TEXT        The source of a place's decision (kernel_blocks.SOURCE).
-- @param positional LIST    Kernel-rule stages that say only what a kernel computes (kernel_blocks.POSITIONAL).
-- @reads _kb_runs, _kb_extended, _kb_sequence
-- @creates _kblock          Filled: the GPU ops the blocks take in.
INSERT INTO _kblock
WITH spans AS (
    SELECT *, unnest(range(coalesce(qkv_lo, k0), coalesce(out_k + 1, k1) + 1)) AS at_k
    FROM (SELECT r.*, coalesce(e.ext_k0, r.qkv_k0) AS qkv_lo FROM _kb_runs r LEFT JOIN _kb_extended e USING (run_id))
),
placed AS (
    SELECT q.*, r.call_id AS run_call,
           CASE WHEN q.k BETWEEN r.k0 AND r.k1 THEN CASE WHEN NOT r.g THEN 'run' END
                WHEN q.k BETWEEN r.qkv_lo AND r.qkv_k THEN CASE WHEN q.gemm THEN 'qkv' ELSE 'pre' END
                WHEN q.k > r.qkv_k AND q.k < r.k0 THEN 'pre'
                WHEN q.k > r.k1 AND q.k < r.out_k THEN 'post'
                WHEN q.k = r.out_k THEN 'out'
                WHEN q.k = r.out_k + 1 AND q.reduction THEN 'reduce'
           END AS place
    FROM spans r JOIN _kb_sequence q
      ON {{include attribution/kernel_stream_at kernel=q span=r at=at_k}}
),
named AS (
    SELECT *, km.stage IS NOT NULL AND km.stage NOT IN {{positional}} AS by_rule FROM placed
    WHERE place IS NOT NULL AND (place <> 'run' OR id <> run_call)
)
SELECT id, run_call,
       CASE WHEN place = 'run' THEN NULL
            WHEN place = 'qkv' THEN 'qkv_proj'
            WHEN place IN ('out', 'reduce') THEN 'out_proj'
            WHEN by_rule THEN km.stage
            WHEN place = 'pre' AND (norm OR km.stage = 'norm') THEN 'qk_norm'
            ELSE 'layout' END,
       CASE WHEN place = 'run' OR by_rule THEN 'kernel' ELSE {{source}} END,
       CASE WHEN place = 'run' THEN NULL WHEN by_rule THEN km.rule ELSE {{source}} || ':' || place END,
       CASE WHEN place = 'run' THEN NULL WHEN by_rule THEN coalesce(km.attention, false) ELSE false END
FROM named;

SELECT CASE WHEN count(*) > count(DISTINCT id) THEN error('internal: a kernel in two attention blocks') END
FROM _kblock;
