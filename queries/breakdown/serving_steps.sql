-- LLM serving steps (vLLM V1, vLLM, SGLang, TGI): phase, batch, GPU and attention time, warm-up or steady state.
--
-- A step is found, in this order of evidence, by (1) a record_function range
-- the serving engine writes around one model step, (2) a graph capture pass,
-- (3) a Python scope of the top model module (forward periodicity: each call
-- of *ForCausalLM is one step) and (4) a CUDA/HIP graph launch outside every
-- step (engines replay whole-model graphs for decode batches). The names are
-- data: rules/serving_steps.csv (extend with --rules), one row per engine's
-- form with the versions it was seen in: vLLM V1's execute_new_<n>_cached_<m>,
-- vLLM's execute_context_<n>(<tokens>_..)_generation_<n>(<tokens>), the
-- execute_<i>_context_<n>(sq..)_generation_<n>(sq..) form, SGLang's
-- step[DECODE bs=<n>] / step[EXTEND bs=<n> toks=<t>] / capture_<bs>_<MODE>,
-- vLLM V1's gpu_model_runner: forward scope, any range naming prefill, extend
-- or decode. A step inside another is part of the outer one; a forward scope
-- inside a step range is part of it.
-- phase: the rule's when the name says it (step[DECODE ...]), else prefill
-- when only prefill (context, new) requests run, decode when only decode
-- (generation, cached) requests, mixed when both (chunked prefill), else from
-- the name's words; a step whose name tells none (a forward scope, a graph
-- replay) is decode when it runs a decode attention kernel (paged, split-KV:
-- the rules of kind phase); unknown otherwise. GPU ops are those launched on the step's thread inside its range
-- (a graph launch brings all its kernels); attention_gpu_ns those of an
-- attention stage (gpu_op_stages.stage other than other), less the block's
-- tensor-parallel collective (tp_comm: communication, not attention work).
-- steady_state, per trace and phase over the steps that are not captures:
-- with median wall time m and median absolute deviation d, a step lies in the
-- spread when |wall_ns - m| <= max(3 * 1.4826 * d, 0.1 * m); the steps before
-- the first one in the spread are warm-up (false), it and every later step
-- steady state (true). Graph captures are never steady state; with fewer
-- than 3 steps of a phase it is NULL (the spread cannot be told).
--
-- @column trace VARCHAR                 Trace label.
-- @column step_id BIGINT                The range's cpu_slices.id, the scope's python_functions.id or the graph launch's runtime_calls.id.
-- @column name VARCHAR                  The range's name as written (the launch API for a graph replay).
-- @column phase VARCHAR                 prefill, decode, mixed or unknown.
-- @column context_requests BIGINT       Requests in prefill (context_<n>, new_<n>, bs of a prefill step), NULL when not recorded.
-- @column generation_requests BIGINT    Requests decoding (generation_<n>, cached_<n>, bs of a decode step), NULL when not recorded.
-- @column context_tokens BIGINT         Prefill tokens, NULL when not recorded.
-- @column generation_tokens BIGINT      Decode tokens (a decode step of bs=<n>: n), NULL when not recorded.
-- @column ts_ns BIGINT                  Start of the range on the CPU, ns.
-- @column cpu_ns BIGINT                 Duration of the range on the CPU, ns.
-- @column gpu_ops BIGINT                GPU ops launched inside it.
-- @column gpu_ns BIGINT                 Their summed duration, ns.
-- @column attention_gpu_ns BIGINT       The part in attention stages but tp_comm, ns.
-- @column step BIGINT                   The step's number in its trace, from 1, in time order.
-- @column engine VARCHAR                Engine of the rule that found it (vllm_v1, vllm, sglang, amd_profile, any, generic), graph_replay for a launch.
-- @column source VARCHAR                annotation, python or graph_replay: what marked the step.
-- @column kind VARCHAR                  step, capture (a graph capture pass), forward (a model forward scope) or graph_replay.
-- @column pid VARCHAR                   Process of the range.
-- @column tid VARCHAR                   Thread of the range.
-- @column end_ns BIGINT                 End of the range on the CPU, ns.
-- @column requests BIGINT               Requests in the step (prefill plus decode, else the batch size), NULL when not recorded.
-- @column tokens BIGINT                 Tokens in the step (prefill plus decode), NULL when not recorded.
-- @column wall_ns BIGINT                From the range's start to the later of its end and its last GPU op's end, ns.
-- @column attention_share_pct DOUBLE    100 * attention_gpu_ns / gpu_ns, NULL without GPU ops.
-- @column attention_ns_per_token DOUBLE attention_gpu_ns / tokens, NULL without tokens.
-- @column attention_ns_per_request DOUBLE attention_gpu_ns / requests, NULL without requests.
-- @column steady_state BOOLEAN          In the steady-state window of its trace and phase (see above); false for warm-up and captures, NULL under 3 steps.
WITH marks AS (
    SELECT id, trace_id, pid, tid, name, ts_ns, dur_ns, end_ns, 'annotation' AS source
    FROM cpu_slices WHERE kind = 'user_annotation'
    UNION ALL
    SELECT id, trace_id, pid, tid, name, ts_ns, dur_ns, end_ns, 'python' AS source
    FROM python_functions WHERE name LIKE 'nn.Module: %'
),
name_rule AS (
    -- The first rule by rule_order for each distinct name (a regex per name, not per event).
    SELECT n.source, n.name, r.engine, r.kind, r.phase AS rule_phase, r.context_requests AS re_ctx,
           r.generation_requests AS re_gen, r.context_tokens AS re_ctx_tok, r.generation_tokens AS re_gen_tok,
           r.batch AS re_batch, r.tokens AS re_tokens
    FROM (SELECT DISTINCT source, name FROM marks) n
    JOIN rule_serving_steps r ON r.applies_to = n.source AND regexp_matches(n.name, r.pattern)
    QUALIFY row_number() OVER (PARTITION BY n.source, n.name ORDER BY r.rule_order) = 1
),
candidates AS (
    SELECT m.*, nr.engine, nr.kind, nr.rule_phase,
           CASE WHEN nr.re_ctx <> '' THEN TRY_CAST(regexp_extract(m.name, nr.re_ctx, 1) AS BIGINT) END AS ctx,
           CASE WHEN nr.re_gen <> '' THEN TRY_CAST(regexp_extract(m.name, nr.re_gen, 1) AS BIGINT) END AS gen,
           CASE WHEN nr.re_ctx_tok <> '' THEN TRY_CAST(regexp_extract(m.name, nr.re_ctx_tok, 1) AS BIGINT) END AS ctx_tok,
           CASE WHEN nr.re_gen_tok <> '' THEN TRY_CAST(regexp_extract(m.name, nr.re_gen_tok, 1) AS BIGINT) END AS gen_tok,
           CASE WHEN nr.re_batch <> '' THEN TRY_CAST(regexp_extract(m.name, nr.re_batch, 1) AS BIGINT) END AS batch,
           CASE WHEN nr.re_tokens <> '' THEN TRY_CAST(regexp_extract(m.name, nr.re_tokens, 1) AS BIGINT) END AS toks
    FROM marks m JOIN name_rule nr USING (source, name)
),
marked_steps AS (
    -- A step inside another step or capture is part of it; a forward scope only counts outside them
    -- (a forward inside a forward is part of the outer one). Equal spans: the first id wins.
    SELECT * FROM candidates c
    WHERE NOT EXISTS (
        SELECT 1 FROM candidates o
        WHERE o.trace_id = c.trace_id AND o.pid = c.pid AND o.tid = c.tid AND o.id <> c.id
          AND o.ts_ns <= c.ts_ns AND o.end_ns >= c.end_ns
          AND (o.kind <> 'forward' OR c.kind = 'forward')
          AND NOT (o.ts_ns = c.ts_ns AND o.end_ns = c.end_ns AND o.kind = c.kind AND o.id > c.id)
    )
),
replays AS (
    -- Graph launches outside every step: one step each.
    SELECT r.id, r.trace_id, r.pid, r.tid, r.api AS name, r.ts_ns, r.dur_ns, r.end_ns, 'graph_replay' AS source,
           'graph_replay' AS engine, 'graph_replay' AS kind, '' AS rule_phase,
           NULL::BIGINT AS ctx, NULL::BIGINT AS gen, NULL::BIGINT AS ctx_tok, NULL::BIGINT AS gen_tok,
           NULL::BIGINT AS batch, NULL::BIGINT AS toks
    FROM runtime_calls r
    WHERE r.graph_launch
      AND NOT EXISTS (SELECT 1 FROM marked_steps s
                      WHERE s.trace_id = r.trace_id AND s.pid = r.pid AND s.tid = r.tid
                        AND r.ts_ns >= s.ts_ns AND r.ts_ns <= s.end_ns)
),
steps AS (
    SELECT * FROM marked_steps
    UNION ALL BY NAME
    SELECT * FROM replays
),
phased AS (
    SELECT *,
           CASE WHEN rule_phase <> '' THEN rule_phase
                WHEN ctx > 0 AND gen > 0 THEN 'mixed' WHEN ctx > 0 THEN 'prefill' WHEN gen > 0 THEN 'decode'
                WHEN regexp_matches(name, '(?i)mixed') THEN 'mixed'
                WHEN regexp_matches(name, '(?i)decode') THEN 'decode'
                WHEN regexp_matches(name, '(?i)prefill|extend') THEN 'prefill'
                ELSE 'unknown' END AS phase
    FROM steps
),
counted AS (
    SELECT *,
           coalesce(ctx, CASE WHEN phase = 'prefill' THEN batch END) AS context_requests,
           coalesce(gen, CASE WHEN phase = 'decode' THEN batch END) AS generation_requests,
           coalesce(ctx_tok, CASE WHEN phase = 'prefill' THEN toks END) AS context_tokens,
           coalesce(gen_tok, CASE WHEN phase = 'decode' THEN toks END) AS generation_tokens
    FROM phased
),
ops AS (
    SELECT s.id AS step_id, s.phase, g.name, g.dur_ns, g.end_ns, st.stage
    FROM counted s
    JOIN runtime_calls r ON r.trace_id = s.trace_id AND r.pid = s.pid AND r.tid = s.tid
                        AND r.ts_ns >= s.ts_ns AND r.ts_ns <= s.end_ns
    JOIN gpu_ops g ON g.launch_id = r.id
    JOIN gpu_op_stages st ON st.id = g.id
),
decode_kernels AS (
    -- Kernel names that make a step of unknown phase a decode step (rules of kind phase), among those steps' ops.
    SELECT DISTINCT n.name FROM (SELECT DISTINCT name FROM ops WHERE phase = 'unknown') n
    JOIN rule_serving_steps r ON r.applies_to = 'kernel' AND r.kind = 'phase' AND r.phase = 'decode'
                             AND regexp_matches(n.name, r.pattern)
),
per_step AS (
    SELECT step_id, count(*) AS gpu_ops, sum(dur_ns)::BIGINT AS gpu_ns, max(end_ns) AS gpu_end_ns,
           coalesce(sum(dur_ns) FILTER (WHERE stage NOT IN ('other', 'tp_comm')), 0)::BIGINT AS attention_gpu_ns,
           bool_or(name IN (SELECT name FROM decode_kernels)) AS decode_kernel
    FROM ops GROUP BY step_id
),
measured AS (
    SELECT c.* REPLACE (CASE WHEN c.phase = 'unknown' AND p.decode_kernel THEN 'decode' ELSE c.phase END AS phase),
           coalesce(p.gpu_ops, 0) AS n_gpu_ops, coalesce(p.gpu_ns, 0)::BIGINT AS sum_gpu_ns,
           coalesce(p.attention_gpu_ns, 0)::BIGINT AS attn_ns,
           (greatest(c.end_ns, coalesce(p.gpu_end_ns, c.end_ns)) - c.ts_ns)::BIGINT AS wall_ns,
           CASE WHEN c.context_requests IS NULL AND c.generation_requests IS NULL THEN c.batch
                ELSE coalesce(c.context_requests, 0) + coalesce(c.generation_requests, 0) END AS requests,
           CASE WHEN c.context_tokens IS NULL AND c.generation_tokens IS NULL THEN c.toks
                ELSE coalesce(c.context_tokens, 0) + coalesce(c.generation_tokens, 0) END AS tokens
    FROM counted c LEFT JOIN per_step p ON p.step_id = c.id
),
spread AS (
    SELECT trace_id, phase, count(*) AS n, median(wall_ns) AS m FROM measured WHERE kind <> 'capture' GROUP BY ALL
),
deviation AS (
    SELECT s.trace_id, s.phase, s.n, s.m, median(abs(x.wall_ns - s.m)) AS d
    FROM spread s JOIN measured x ON x.trace_id = s.trace_id AND x.phase = s.phase AND x.kind <> 'capture'
    GROUP BY ALL
),
window_start AS (
    SELECT d.trace_id, d.phase, d.n, min(x.ts_ns) AS first_ts
    FROM deviation d JOIN measured x ON x.trace_id = d.trace_id AND x.phase = d.phase AND x.kind <> 'capture'
    WHERE abs(x.wall_ns - d.m) <= greatest(3 * 1.4826 * d.d, 0.1 * d.m)
    GROUP BY ALL
)
SELECT t.trace, x.id AS step_id, x.name, x.phase, x.context_requests, x.generation_requests,
       x.context_tokens, x.generation_tokens, x.ts_ns, x.dur_ns AS cpu_ns, x.n_gpu_ops AS gpu_ops,
       x.sum_gpu_ns AS gpu_ns, x.attn_ns AS attention_gpu_ns,
       row_number() OVER (PARTITION BY x.trace_id ORDER BY x.ts_ns, x.id) AS step,
       x.engine, x.source, x.kind, x.pid, x.tid, x.end_ns, x.requests, x.tokens, x.wall_ns,
       CASE WHEN x.sum_gpu_ns > 0 THEN 100.0 * x.attn_ns / x.sum_gpu_ns END AS attention_share_pct,
       CASE WHEN x.tokens > 0 THEN x.attn_ns / x.tokens END AS attention_ns_per_token,
       CASE WHEN x.requests > 0 THEN x.attn_ns / x.requests END AS attention_ns_per_request,
       CASE WHEN x.kind = 'capture' THEN false
            WHEN w.n IS NULL OR w.n < 3 THEN NULL
            ELSE x.ts_ns >= w.first_ts END AS steady_state
FROM measured x JOIN traces t USING (trace_id)
LEFT JOIN window_start w ON w.trace_id = x.trace_id AND w.phase = x.phase
ORDER BY t.trace, x.ts_ns, x.id;
