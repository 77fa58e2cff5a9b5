-- Work that looks like attention but was not attributed to it.
--
-- One row per trace, reason and name; each names the likely cause in words (cause). Reasons:
--
-- softmax_between_matmuls: a softmax op (aten::softmax, _softmax, _safe_softmax, _masked_softmax)
-- outside every call whose nearest sibling product before it (bmm, matmul, baddbmm, einsum; at most 32
-- sibling ops back) and after it (at most 8 ahead) on its thread, both outside every call, has no
-- projection, softmax, loss or op of a call between: eager attention the op-order pattern could not
-- confirm (no recorded shapes and more than three ops between, one of them no score op, or shapes that do
-- not read as QK^T and PV); or, with no CPU op of its own (graph replays, compiled regions), a softmax kernel outside every
-- call with a GEMM kernel outside every call at most 8 kernels before it and 4 after it on its stream.
-- Its GPU time is the pattern's: the GPU ops from the first product to the second left other. A
-- classifier's or LM head's softmax (a linear before it, no product after it) and log_softmax,
-- cross_entropy and nll_loss never count.
--
-- unknown_attention_op: a CPU op outside every call named like attention (attn, attention, fmha, flash,
-- mha, sdpa, paged, xqa, sage_fwd, sageattn) that no op rule made a call, with GPU ops under it left
-- other.
--
-- unknown_attention_kernel: a kernel outside every call named like attention (the words above and
-- fwd_kernel; in the kernel's name up to its first argument list, so a wrapper template's inner kernel
-- counts; FlashInfer's library name alone does not) that no rule made an attention kernel, and not
-- under such an op.
--
-- block_without_projections: a forward call with attention kernels and no qkv_proj or out_proj GPU op
-- whose stream holds GEMM kernels outside every call at most 4 kernels before or after them (the
-- nearest after; the nearest before and at most 2 more right before it: separate q, k and v): the
-- block's projections, left other.
--
-- call_without_core: a forward call with no attention kernel at all whose GPU ops include ones left
-- other (a module call around an op and kernel no rule knows): the core is among them.
--
-- A GPU op counts in one row: one under an unknown attention op is that op's alone. CPU recordings (no
-- GPU op) are checked for the softmax pattern only, on CPU time. The finding fires for a trace when its
-- rows hold at least min_share_pct of its GPU op time (of its CPU op time, the top-level ops' summed
-- duration, in a trace with no GPU op): a few stray kernels are no finding. Orphan GPU ops are left
-- out. docs/attribution.md ("When attention may have been missed") says what to do for each.
--
-- @param min_share_pct DOUBLE = 1.0  Fire for a trace when its rows hold at least this share of its GPU (or CPU) op time.
-- @column trace VARCHAR          Trace label.
-- @column reason VARCHAR         softmax_between_matmuls, unknown_attention_op, unknown_attention_kernel, block_without_projections or call_without_core.
-- @column name VARCHAR           What looks like attention: the pattern's three ops (QK^T > softmax > PV) or its softmax kernel, the op, the kernel, or the call's op.
-- @column cpu_op_name VARCHAR    Innermost CPU op of a launch of its GPU ops (one of them; NULL: none, a graph replay).
-- @column occurrences BIGINT     Patterns, ops, kernels or calls of this name and reason.
-- @column gpu_ops BIGINT         GPU ops left other that they stand for (outside every call: the pattern's, the op's, the kernels, the GEMMs beside the calls; inside: a coreless call's).
-- @column total_ns BIGINT        Their summed duration, nanoseconds.
-- @column share_pct DOUBLE       100 * total_ns / GPU op time of the trace (0 in a trace with no GPU op).
-- @column cpu_ns BIGINT          CPU time of the patterns (first product's start to second product's end) or ops, nanoseconds; 0 for kernels and calls.
-- @column cpu_share_pct DOUBLE   100 * cpu_ns / the trace's CPU op time (its top-level ops' summed duration).
-- @column cause VARCHAR          The likely cause, and what to do.
WITH gpu AS MATERIALIZED (
    SELECT g.id, g.trace_id, g.kind, g.name, g.device, g.stream, g.ts_ns, g.dur_ns, g.launch_id, g.cpu_op_name,
           s.stage, s.source, s.call_id, s.rule, s.attention_kernel
    FROM gpu_ops g JOIN gpu_op_stages s USING (id)
    WHERE NOT g.orphan
),
totals AS (
    SELECT t.trace_id, coalesce(gt.gpu_ns, 0) AS gpu_ns, coalesce(ct.cpu_ns, 0) AS cpu_ns
    FROM traces t
    LEFT JOIN (SELECT trace_id, sum(dur_ns) AS gpu_ns FROM gpu GROUP BY trace_id) gt USING (trace_id)
    LEFT JOIN (SELECT trace_id, sum(dur_ns) AS cpu_ns FROM cpu_slices WHERE kind = 'cpu_op' AND op_id IS NULL
               GROUP BY trace_id) ct USING (trace_id)
),
-- GPU ops outside every call that no rule gave a stage: where missed attention lies.
free AS (
    SELECT g.*, l.pid AS launch_pid, l.tid AS launch_tid, l.ts_ns AS launch_ts_ns
    FROM gpu g LEFT JOIN runtime_calls l ON l.id = g.launch_id
    WHERE g.call_id IS NULL AND g.stage = 'other'
),
-- Per distinct kernel name (a regex over every kernel is slow): what it looks like. look is the name up to its
-- first argument list or second template argument (a wrapper template's inner kernel: cutlass::device_kernel<
-- flash::FlashAttnFwdSm90<...), without FlashInfer's library name (its norm, sampling and activation kernels).
kernel_names AS (
    SELECT name, look,
           (regexp_matches(look, '(?i)softmax') AND NOT regexp_matches(look, '(?i)log_?softmax'))
               OR regexp_matches(look, '^triton_[a-z]+_fused_\w*(amax_\w*exp|exp_\w*amax)') AS softmax_kernel,
           regexp_matches(look, '(?i)attn|attention|fmha|flash|(^|[^a-z])mha|sdpa|paged|xqa|fwd_kernel|(^|[^a-z])sage_?(attn|fwd|bwd)') AS attention_like
    FROM (SELECT name, regexp_replace(regexp_extract(replace(name, '(anonymous namespace)', 'anonymous_namespace'),
                                                     '^[^(,>]*'), '(?i)flashinfer', '', 'g') AS look
          FROM (SELECT DISTINCT name FROM gpu WHERE kind = 'kernel'))
),
gemm_names AS (
    SELECT d.name, arg_min(r.category, r.rule_order) = 'GEMM' AS gemm
    FROM (SELECT DISTINCT name FROM gpu WHERE kind = 'kernel') d
    JOIN rule_op_categories r ON r.applies_to = 'kernel' AND regexp_matches(d.name, r.pattern)
    GROUP BY d.name
),
-- Every GPU op numbered in its stream's order.
seq AS MATERIALIZED (
    SELECT g.id, g.trace_id, g.device, g.stream, g.call_id, g.stage, g.launch_id,
           row_number() OVER (PARTITION BY g.trace_id, g.device, g.stream ORDER BY g.ts_ns, g.id) AS k,
           coalesce(m.gemm, false) AND g.call_id IS NULL AND g.stage = 'other' AS free_gemm
    FROM gpu g LEFT JOIN gemm_names m USING (name)
),
-- (c) Ops named like attention that no op rule made a call, with GPU ops under them left other. Their GPU ops are
-- theirs alone: the other reasons leave them out (the op rule is the fix).
op_names AS (
    SELECT name FROM (SELECT DISTINCT name FROM cpu_slices WHERE kind = 'cpu_op')
    WHERE regexp_matches(regexp_replace(name, '(?i)flashinfer', '', 'g'), '(?i)attn|attention|fmha|flash|(^|[^a-z])mha|sdpa|paged|xqa|(^|[^a-z])sage_?(attn|fwd|bwd)')
),
attention_ops AS (
    SELECT s.id, s.trace_id, s.pid, s.tid, s.name, s.ts_ns, s.end_ns, s.dur_ns
    FROM cpu_slices s JOIN cpu_stages c USING (id)
    WHERE s.kind = 'cpu_op' AND c.call_id IS NULL AND c.stage = 'other' AND s.name IN (SELECT name FROM op_names)
      AND NOT EXISTS (SELECT 1 FROM cpu_slices p WHERE p.id = s.op_id AND p.name IN (SELECT name FROM op_names))
),
attention_op_gpu AS MATERIALIZED (
    SELECT o.id AS op_id, f.id, f.dur_ns, f.cpu_op_name
    FROM attention_ops o JOIN free f
      ON f.launch_pid = o.pid AND f.launch_tid = o.tid AND f.trace_id = o.trace_id
     AND f.launch_ts_ns >= o.ts_ns AND f.launch_ts_ns <= o.end_ns
),
-- (a) Softmax ops outside every call (the outermost of nested ones) and their siblings on the thread.
softmax_ops AS (
    SELECT s.id, s.trace_id, s.pid, s.tid, s.parent_id, s.name
    FROM cpu_slices s JOIN cpu_stages c USING (id)
    WHERE s.kind = 'cpu_op' AND c.call_id IS NULL
      AND regexp_matches(s.name, '^aten::(_?softmax|_safe_softmax|_masked_softmax)$')
      AND NOT EXISTS (SELECT 1 FROM cpu_slices p WHERE p.id = s.op_id
                      AND regexp_matches(p.name, '^aten::(_?softmax|_safe_softmax|_masked_softmax)$'))
),
siblings AS (
    SELECT *,
           -- The nearest product or blocker before and after each sibling.
           max(CASE WHEN product OR blocker THEN i END) OVER (w ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS i_before,
           min(CASE WHEN product OR blocker THEN i END) OVER (w ROWS BETWEEN 1 FOLLOWING AND UNBOUNDED FOLLOWING) AS i_after
    FROM (
        SELECT x.id, x.trace_id, x.pid, x.tid, x.parent_id, x.name, x.ts_ns, x.end_ns,
               row_number() OVER (PARTITION BY x.trace_id, x.pid, x.tid, x.parent_id ORDER BY x.ts_ns, x.id) AS i,
               c.call_id IS NULL AND regexp_matches(x.name, '^aten::(bmm|matmul|baddbmm|einsum)$') AS product,
               -- A projection, a softmax, a loss or a call's op between: not the two products of one attention core.
               c.call_id IS NOT NULL
                   OR regexp_matches(x.name, '^aten::(linear|addmm|mm|_scaled_mm|addmv|mv|_?softmax|_safe_softmax|_masked_softmax|_?log_softmax|cross_entropy_loss|nll_loss\w*)$')
                   AS blocker
        FROM cpu_slices x JOIN cpu_stages c USING (id)
        SEMI JOIN (SELECT DISTINCT trace_id, pid, tid, parent_id FROM softmax_ops) p
            ON p.trace_id = x.trace_id AND p.pid = x.pid AND p.tid = x.tid AND p.parent_id IS NOT DISTINCT FROM x.parent_id
        WHERE x.kind = 'cpu_op'
    )
    WINDOW w AS (PARTITION BY trace_id, pid, tid, parent_id ORDER BY i)
),
op_patterns AS (
    SELECT sm.trace_id, sm.pid, sm.tid, sm.id AS sm_id, qk.name || ' > ' || sm.name || ' > ' || pv.name AS name,
           qk.ts_ns, pv.end_ns, s.input_dims IS NOT NULL AS shaped, greatest(sm.i - qk.i, pv.i - sm.i) - 1 AS between_ops
    FROM softmax_ops o JOIN siblings sm USING (id)
    JOIN siblings qk ON qk.trace_id = sm.trace_id AND qk.pid = sm.pid AND qk.tid = sm.tid
     AND qk.parent_id IS NOT DISTINCT FROM sm.parent_id AND qk.i = sm.i_before
    JOIN siblings pv ON pv.trace_id = sm.trace_id AND pv.pid = sm.pid AND pv.tid = sm.tid
     AND pv.parent_id IS NOT DISTINCT FROM sm.parent_id AND pv.i = sm.i_after
    JOIN cpu_slices s ON s.id = sm.id
    WHERE qk.product AND pv.product AND sm.i - qk.i <= 33 AND pv.i - sm.i <= 9
),
-- Each GPU op counted once (patterns may share a product).
op_pattern_gpu AS (
    SELECT DISTINCT ON (f.id) p.sm_id, f.id, f.dur_ns, f.cpu_op_name
    FROM op_patterns p JOIN free f
      ON f.launch_pid = p.pid AND f.launch_tid = p.tid AND f.trace_id = p.trace_id
     AND f.launch_ts_ns >= p.ts_ns AND f.launch_ts_ns <= p.end_ns
    WHERE f.id NOT IN (SELECT id FROM attention_op_gpu)
    ORDER BY f.id, p.sm_id
),
softmax_op_rows AS (
    SELECT p.trace_id, 'softmax_between_matmuls' AS reason, p.name, min(g.cpu_op_name) AS cpu_op_name,
           count(*) AS occurrences, coalesce(sum(g.gpu_ops), 0) AS gpu_ops,
           coalesce(sum(g.total_ns), 0) AS total_ns, sum(p.end_ns - p.ts_ns) AS cpu_ns,
           CASE WHEN bool_or(p.shaped)
                THEN 'a softmax between two products outside every call whose recorded shapes do not read as QK^T and PV: eager attention the op-order pattern could not confirm; a label or module rule (module_stages.csv) marks it'
                ELSE 'a softmax between two products outside every call, with up to ' || max(p.between_ops) || ' ops between it and a product, recorded without shapes: eager attention the op-order pattern confirms only 3 ops apart without shapes, unless every op between only scales, masks or casts the scores; record with record_shapes=True, or a label or module rule (module_stages.csv) marks it'
           END AS cause
    FROM op_patterns p
    LEFT JOIN (SELECT sm_id, count(*) AS gpu_ops, sum(dur_ns) AS total_ns, min(cpu_op_name) AS cpu_op_name
               FROM op_pattern_gpu GROUP BY sm_id) g USING (sm_id)
    GROUP BY p.trace_id, p.name
),
-- (a) Softmax kernels that no softmax op launched (graph replays, compiled regions), between two free GEMMs (of
-- the same replay: a sampler's softmax at the end of one is not attention with the next one's first GEMM).
softmax_kernels AS (
    SELECT f.id, f.trace_id, f.name, f.cpu_op_name, q.device, q.stream, q.k, f.launch_id, g.via_graph
    FROM free f JOIN gpu_ops g USING (id) JOIN kernel_names n ON n.name = f.name JOIN seq q ON q.id = f.id
    WHERE n.softmax_kernel AND NOT coalesce(regexp_matches(f.cpu_op_name, '(?i)softmax|cross_entropy|nll_loss'), false)
),
kernel_patterns AS (
    SELECT s.id AS sm_id, s.trace_id, s.name, s.cpu_op_name, s.device, s.stream,
           (SELECT max(k) FROM seq b WHERE b.trace_id = s.trace_id AND b.device = s.device AND b.stream = s.stream
              AND b.free_gemm AND b.k < s.k AND b.k >= s.k - 8
              AND (NOT s.via_graph OR b.launch_id = s.launch_id)) AS k0,
           (SELECT min(k) FROM seq b WHERE b.trace_id = s.trace_id AND b.device = s.device AND b.stream = s.stream
              AND b.free_gemm AND b.k > s.k AND b.k <= s.k + 4
              AND (NOT s.via_graph OR b.launch_id = s.launch_id)) AS k1
    FROM softmax_kernels s
),
kernel_pattern_gpu AS (
    SELECT DISTINCT ON (f.id) p.sm_id, p.trace_id, p.name, p.cpu_op_name, f.id, f.dur_ns
    FROM kernel_patterns p
    JOIN seq q ON q.trace_id = p.trace_id AND q.device = p.device AND q.stream = p.stream AND q.k BETWEEN p.k0 AND p.k1
    JOIN free f ON f.id = q.id
    WHERE f.id NOT IN (SELECT id FROM attention_op_gpu)
    ORDER BY f.id, p.sm_id
),
softmax_kernel_rows AS (
    SELECT trace_id, 'softmax_between_matmuls' AS reason, name, min(cpu_op_name) AS cpu_op_name,
           count(DISTINCT sm_id) AS occurrences, count(*) AS gpu_ops, sum(dur_ns) AS total_ns, 0 AS cpu_ns,
           'a softmax kernel between two GEMM kernels on its stream outside every call, with no softmax op: attention in a graph replay or compiled region whose kernels no rule names; add kernel_stages.csv rules for them' AS cause
    FROM kernel_pattern_gpu
    GROUP BY trace_id, name
),
attention_op_rows AS (
    SELECT o.trace_id, 'unknown_attention_op' AS reason, o.name, min(g.cpu_op_name) AS cpu_op_name,
           count(DISTINCT o.id) AS occurrences, count(g.id) AS gpu_ops, sum(g.dur_ns) AS total_ns,
           (SELECT sum(x.dur_ns) FROM attention_ops x WHERE x.trace_id = o.trace_id AND x.name = o.name) AS cpu_ns,
           'an op named like attention that no op rule makes a call: add a row to op_stages.csv (call yes, stage fused_attention for a fused kernel)' AS cause
    FROM attention_ops o JOIN attention_op_gpu g ON g.op_id = o.id
    GROUP BY o.trace_id, o.name
),
-- (b) Kernels named like attention that no rule made an attention kernel, not under such an op; the first
-- kernel rule matching the name, when it counts only inside a call (Triton's _fwd_kernel).
call_rules AS (
    SELECT d.name, arg_min(r.pattern, r.rule_order) AS pattern, arg_min(r.context, r.rule_order) AS context
    FROM (SELECT name FROM kernel_names WHERE attention_like) d
    JOIN rule_kernel_stages r ON regexp_matches(kernel_base(d.name), r.pattern)
    GROUP BY d.name
),
attention_kernel_rows AS (
    SELECT f.trace_id, 'unknown_attention_kernel' AS reason, f.name, min(f.cpu_op_name) AS cpu_op_name,
           count(*) AS occurrences, count(*) AS gpu_ops, sum(f.dur_ns) AS total_ns, 0 AS cpu_ns,
           CASE WHEN min(f.source) = 'kernel'
                THEN 'a kernel named like attention that the kernel rule ' || min(f.rule) || ' leaves other: check that row of kernel_stages.csv'
                WHEN min(f.source) <> 'none'
                THEN 'a kernel named like attention that the ' || min(f.source) || ' rule ' || min(f.rule) || ' leaves other: check that rule'
                WHEN min(c.context) = 'call'
                THEN 'the kernel rule ' || min(c.pattern) || ' counts only inside an attention call, and none holds it: an op rule (op_stages.csv) or module rule for what launches it makes the call'
                ELSE 'kernel name not in kernel_stages.csv: add a rule (stage fused_attention, attention yes)'
           END AS cause
    FROM free f JOIN kernel_names n USING (name) LEFT JOIN call_rules c USING (name)
    WHERE n.attention_like AND NOT n.softmax_kernel AND f.id NOT IN (SELECT id FROM attention_op_gpu)
    GROUP BY f.trace_id, f.name
),
-- (d) Forward calls with attention kernels and no projection, with free GEMMs right beside them on the stream. A
-- module call's op without its instance number (nn.Module: Qwen3Attention_3): one row per class.
bare_calls AS (
    SELECT c.call_id, c.trace_id,
           CASE WHEN c.call_source = 'module' THEN regexp_replace(c.op, '_[0-9]+$', '') ELSE c.op END AS op, c.call_source
    FROM attention_calls c
    WHERE counts_as_call(c.direction) AND c.attention_kernel_ns > 0
      AND NOT EXISTS (SELECT 1 FROM gpu g WHERE g.call_id = c.call_id AND g.stage IN ('qkv_proj', 'out_proj'))
),
bare_ends AS (
    SELECT b.call_id, b.trace_id, b.op, b.call_source, q.device, q.stream, min(q.k) AS k0, max(q.k) AS k1
    FROM bare_calls b JOIN gpu g ON g.call_id = b.call_id AND g.attention_kernel JOIN seq q ON q.id = g.id
    GROUP BY ALL
),
-- The nearest free GEMM after the attention kernels (out_proj), and the nearest before them with the free GEMMs
-- at most 2 before it (separate q, k and v projections).
bare_near AS (
    SELECT e.*,
           (SELECT max(q.k) FROM seq q WHERE q.trace_id = e.trace_id AND q.device = e.device AND q.stream = e.stream
              AND q.free_gemm AND q.k BETWEEN e.k0 - 4 AND e.k0 - 1) AS kb,
           (SELECT min(q.k) FROM seq q WHERE q.trace_id = e.trace_id AND q.device = e.device AND q.stream = e.stream
              AND q.free_gemm AND q.k BETWEEN e.k1 + 1 AND e.k1 + 4) AS ka
    FROM bare_ends e
),
bare_gemms AS (
    SELECT DISTINCT ON (q.id) e.call_id, e.trace_id, e.op, e.call_source, q.id
    FROM bare_near e JOIN seq q
      ON q.trace_id = e.trace_id AND q.device = e.device AND q.stream = e.stream AND q.free_gemm
     AND (q.k BETWEEN e.kb - 2 AND e.kb OR q.k = e.ka)
    WHERE q.id NOT IN (SELECT id FROM attention_op_gpu)
    ORDER BY q.id, e.call_id
),
bare_rows AS (
    SELECT b.trace_id, 'block_without_projections' AS reason, b.op AS name, min(f.cpu_op_name) AS cpu_op_name,
           count(DISTINCT b.call_id) AS occurrences, count(*) AS gpu_ops, sum(f.dur_ns) AS total_ns, 0 AS cpu_ns,
           'attention calls with no projection, with GEMM kernels outside every call right beside their attention kernels on the stream: the block''s projections left other; '
           || CASE min(b.call_source)
                  WHEN 'eager' THEN 'an eager call recorded without shapes stays its core: record with record_shapes=True, or label the block'
                  WHEN 'op' THEN 'a call op recorded without shapes stays the op: record with record_shapes=True, or label the block'
                  WHEN 'label' THEN 'the label holds the core only: label the whole block, or add a module rule for the attention module'
                  ELSE 'the kernel-order walk could not bound the block: a module rule or a label around the block takes them in'
              END AS cause
    FROM bare_gemms b JOIN free f USING (id)
    GROUP BY b.trace_id, b.op
),
-- (d) Forward calls with no attention kernel at all whose GPU ops include ones left other: the core is among them.
coreless_ops AS (
    SELECT c.trace_id, c.call_id, g.id, g.name, g.dur_ns, g.cpu_op_name,
           CASE WHEN c.call_source = 'module' THEN regexp_replace(c.op, '_[0-9]+$', '') ELSE c.op END AS op
    FROM attention_calls c JOIN gpu g ON g.call_id = c.call_id AND g.stage = 'other'
    WHERE counts_as_call(c.direction) AND coalesce(c.attention_kernel_ns, 0) = 0
),
coreless_rows AS (
    SELECT trace_id, 'call_without_core' AS reason, op AS name, arg_max(cpu_op_name, dur_ns) AS cpu_op_name,
           count(DISTINCT call_id) AS occurrences, count(*) AS gpu_ops, sum(dur_ns) AS total_ns, 0 AS cpu_ns,
           'attention calls with no attention kernel, whose GPU ops left other hold the core (the heaviest: '
           || kernel_base(arg_max(name, dur_ns)) || ', launched by ' || coalesce(arg_max(cpu_op_name, dur_ns), 'no op')
           || '): a kernel_stages.csv rule (attention yes) for the kernel, or an op_stages.csv rule for its op' AS cause
    FROM coreless_ops
    GROUP BY trace_id, op
),
found AS (
    SELECT * FROM softmax_op_rows
    UNION ALL SELECT * FROM softmax_kernel_rows
    UNION ALL SELECT * FROM attention_op_rows
    UNION ALL SELECT * FROM attention_kernel_rows
    UNION ALL SELECT * FROM bare_rows
    UNION ALL SELECT * FROM coreless_rows
),
shared AS (
    SELECT f.*, coalesce(100.0 * f.total_ns / nullif(t.gpu_ns, 0), 0) AS share,
           coalesce(100.0 * f.cpu_ns / nullif(t.cpu_ns, 0), 0) AS cpu_share, t.gpu_ns AS trace_gpu_ns
    FROM found f JOIN totals t USING (trace_id)
),
fired AS (
    SELECT *, sum(share) OVER (PARTITION BY trace_id) AS trace_share,
           sum(cpu_share) OVER (PARTITION BY trace_id) AS trace_cpu_share
    FROM shared
)
SELECT t.trace, f.reason, f.name, f.cpu_op_name, f.occurrences::BIGINT AS occurrences, f.gpu_ops::BIGINT AS gpu_ops,
       f.total_ns::BIGINT AS total_ns,
       round(f.share, 3) AS share_pct, f.cpu_ns::BIGINT AS cpu_ns, round(f.cpu_share, 3) AS cpu_share_pct, f.cause
FROM fired f
JOIN traces t USING (trace_id)
WHERE CASE WHEN f.trace_gpu_ns > 0 THEN f.trace_share >= $min_share_pct ELSE f.trace_cpu_share >= $min_share_pct END
ORDER BY t.trace, f.total_ns DESC, f.cpu_ns DESC, f.name, f.reason;
