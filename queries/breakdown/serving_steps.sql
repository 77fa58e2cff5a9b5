-- LLM serving steps (vLLM, SGLang): prefill or decode, requests and tokens where recorded, GPU time.
--
-- A step is a record_function range the serving stack writes around one
-- model step: vLLM's and SGLang's execute_<...>context_<n>(<tokens>...)
-- _generation_<n>(<tokens>...) ranges, SGLang's step[DECODE bs=32] /
-- step[EXTEND ...] and capture_<bs>_<MODE> ranges, and any range whose name
-- says prefill, extend or decode; a step range inside another is part of the
-- outer one. phase: prefill when it runs context (prefill) requests only,
-- decode when generation requests only, mixed when both (chunked prefill),
-- else from the name's words (extend is SGLang's prefill). Tokens are the
-- first count in the parentheses after context_ / generation_ (vLLM: tokens;
-- SGLang: sq, the query tokens). gpu_ns sums the GPU ops launched inside the
-- range (a graph launch brings all its kernels); attention_gpu_ns those of
-- attention stages (gpu_op_stages.stage other than other).
--
-- @column trace VARCHAR                Trace label.
-- @column step_id BIGINT               The range's cpu_slices.id.
-- @column name VARCHAR                 The range's name as written.
-- @column phase VARCHAR                prefill, decode, mixed or unknown.
-- @column context_requests BIGINT      Requests in prefill (context_<n>), NULL when not recorded.
-- @column generation_requests BIGINT   Requests decoding (generation_<n>, or bs=<n> of a decode step).
-- @column context_tokens BIGINT        Prefill tokens, NULL when not recorded.
-- @column generation_tokens BIGINT     Decode tokens, NULL when not recorded.
-- @column ts_ns BIGINT                 Start of the range on the CPU, ns.
-- @column cpu_ns BIGINT                Duration of the range on the CPU, ns.
-- @column gpu_ops BIGINT               GPU ops launched inside it.
-- @column gpu_ns BIGINT                Their summed duration, ns.
-- @column attention_gpu_ns BIGINT      The part in attention stages, ns.
WITH candidates AS (
    SELECT id, trace_id, name, ts_ns, dur_ns, annotation_ids,
           TRY_CAST(regexp_extract(name, 'context_([0-9]+)', 1) AS BIGINT) AS ctx,
           TRY_CAST(regexp_extract(name, 'generation_([0-9]+)', 1) AS BIGINT) AS gen,
           TRY_CAST(regexp_extract(name, 'context_[0-9]+\((?:sq)?([0-9]+)', 1) AS BIGINT) AS ctx_tokens,
           TRY_CAST(regexp_extract(name, 'generation_[0-9]+\((?:sq)?([0-9]+)', 1) AS BIGINT) AS gen_tokens,
           TRY_CAST(coalesce(nullif(regexp_extract(name, '(?i)bs=([0-9]+)', 1), ''),
                             regexp_extract(name, '^capture_([0-9]+)_', 1)) AS BIGINT) AS bs,
           CASE WHEN regexp_matches(name, '(?i)decode') THEN 'decode'
                WHEN regexp_matches(name, '(?i)prefill|extend') THEN 'prefill' END AS word_phase
    FROM cpu_slices
    WHERE kind = 'user_annotation'
      AND (regexp_matches(name, 'context_[0-9]+.*generation_[0-9]+')
           OR regexp_matches(name, '(?i)^step\[|^capture_[0-9]+_|prefill|decode|extend'))
),
steps AS (
    -- A step inside another (SGLang's step[...] inside execute_...) is part of it, not a step of its own.
    SELECT * FROM candidates c
    WHERE NOT EXISTS (SELECT 1 FROM candidates o WHERE o.trace_id = c.trace_id AND list_contains(c.annotation_ids, o.id))
),
ops AS (
    SELECT a.aid AS step_id, g.dur_ns, s.stage
    FROM (SELECT id, unnest(annotation_ids) AS aid FROM cpu_slices
          WHERE kind IN ('runtime', 'driver') AND len(annotation_ids) > 0) a
    JOIN steps st ON st.id = a.aid
    JOIN gpu_ops g ON g.launch_id = a.id
    JOIN gpu_op_stages s ON s.id = g.id
),
per_step AS (
    SELECT step_id, count(*) AS gpu_ops, sum(dur_ns)::BIGINT AS gpu_ns,
           coalesce(sum(dur_ns) FILTER (WHERE stage <> 'other'), 0)::BIGINT AS attention_gpu_ns
    FROM ops GROUP BY step_id
)
SELECT t.trace, s.id AS step_id, s.name,
       CASE WHEN s.ctx > 0 AND s.gen > 0 THEN 'mixed' WHEN s.ctx > 0 THEN 'prefill' WHEN s.gen > 0 THEN 'decode'
            ELSE coalesce(s.word_phase, 'unknown') END AS phase,
       s.ctx AS context_requests, coalesce(s.gen, CASE WHEN s.word_phase = 'decode' THEN s.bs END) AS generation_requests,
       s.ctx_tokens AS context_tokens, s.gen_tokens AS generation_tokens, s.ts_ns, s.dur_ns AS cpu_ns,
       coalesce(p.gpu_ops, 0) AS gpu_ops, coalesce(p.gpu_ns, 0)::BIGINT AS gpu_ns,
       coalesce(p.attention_gpu_ns, 0)::BIGINT AS attention_gpu_ns
FROM steps s JOIN traces t USING (trace_id) LEFT JOIN per_step p ON p.step_id = s.id
ORDER BY t.trace, s.ts_ns, s.id;
