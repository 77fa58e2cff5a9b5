-- GPU time of LLM serving steps per phase (prefill, decode, mixed) and attention stage, and attention per token and request.
--
-- The steps of serving_steps, their GPU ops (launched on the step's thread
-- inside its range) grouped by the step's phase and the GPU op's attention
-- stage (gpu_op_stages; other = not attention). share_pct is of the phase's
-- GPU time. The phase columns repeat on each of its rows: its requests and
-- tokens summed over its steps, its attention GPU time (every stage but
-- other and tp_comm, as serving_steps counts it) per token, per request and
-- as a share of its steps' GPU time.
-- Graph captures (serving_steps.kind capture) are warm-up, not serving: they
-- are left out; with steady_only, so is every step outside the steady-state
-- window (warm-up, and phases of under 3 steps).
--
-- @uses serving_steps
-- @param steady_only BOOLEAN = false      Only the steps in the steady-state window (serving_steps.steady_state true).
-- @column trace VARCHAR                   Trace label.
-- @column phase VARCHAR                   prefill, decode, mixed or unknown.
-- @column steps BIGINT                    Steps of this phase.
-- @column stage VARCHAR                   Attention stage of the GPU ops (other: not attention).
-- @column gpu_ops BIGINT                  GPU ops.
-- @column gpu_ns BIGINT                   Their summed duration, ns.
-- @column share_pct DOUBLE                100 * gpu_ns / the phase's GPU time.
-- @column steady_steps BIGINT             Steps of this phase in the steady-state window (serving_steps.steady_state).
-- @column requests BIGINT                 Requests summed over the phase's steps (NULL when no step recorded them).
-- @column tokens BIGINT                   Tokens summed over the phase's steps (NULL when no step recorded them).
-- @column attention_gpu_ns BIGINT         The phase's GPU time in attention stages, ns.
-- @column attention_ns_per_token DOUBLE   attention_gpu_ns / tokens, over the steps that recorded tokens.
-- @column attention_ns_per_request DOUBLE attention_gpu_ns / requests, over the steps that recorded requests.
-- @column attention_share_pct DOUBLE      100 * attention_gpu_ns / the phase's GPU time.
WITH serving AS (
    SELECT ss.*, t.trace_id FROM serving_steps ss JOIN traces t USING (trace)
    WHERE ss.kind <> 'capture' AND (NOT $steady_only OR ss.steady_state)
),
ops AS (
    SELECT ss.trace_id, ss.phase, s.stage, g.dur_ns
    FROM serving ss
    JOIN runtime_calls r ON r.trace_id = ss.trace_id AND r.pid = ss.pid AND r.tid = ss.tid
                        AND r.ts_ns >= ss.ts_ns AND r.ts_ns <= ss.end_ns
    JOIN gpu_ops g ON g.launch_id = r.id
    JOIN gpu_op_stages s ON s.id = g.id
),
per AS (
    SELECT trace_id, phase, stage, count(*) AS gpu_ops, sum(dur_ns)::BIGINT AS gpu_ns FROM ops GROUP BY ALL
),
phase AS (
    SELECT trace_id, phase, count(*) AS steps, count(*) FILTER (WHERE steady_state) AS steady_steps,
           sum(requests)::BIGINT AS requests, sum(tokens)::BIGINT AS tokens,
           sum(attention_gpu_ns)::BIGINT AS attention_gpu_ns, sum(gpu_ns)::BIGINT AS gpu_ns,
           sum(attention_gpu_ns) FILTER (WHERE tokens > 0) / nullif(sum(tokens) FILTER (WHERE tokens > 0), 0)
               AS attention_ns_per_token,
           sum(attention_gpu_ns) FILTER (WHERE requests > 0) / nullif(sum(requests) FILTER (WHERE requests > 0), 0)
               AS attention_ns_per_request
    FROM serving GROUP BY ALL
)
SELECT t.trace, p.phase, ph.steps, p.stage, p.gpu_ops, p.gpu_ns,
       100.0 * p.gpu_ns / sum(p.gpu_ns) OVER (PARTITION BY p.trace_id, p.phase) AS share_pct,
       ph.steady_steps, ph.requests, ph.tokens, ph.attention_gpu_ns, ph.attention_ns_per_token,
       ph.attention_ns_per_request,
       CASE WHEN ph.gpu_ns > 0 THEN 100.0 * ph.attention_gpu_ns / ph.gpu_ns END AS attention_share_pct
FROM per p JOIN phase ph USING (trace_id, phase) JOIN traces t USING (trace_id)
ORDER BY t.trace, p.phase, p.gpu_ns DESC, p.stage;
