-- GPU time of LLM serving steps per phase (prefill, decode, mixed) and attention stage.
--
-- The steps of serving_steps, their GPU ops grouped by the step's phase and
-- the GPU op's attention stage (gpu_op_stages; other = not attention).
-- share_pct is of the phase's GPU time.
--
-- @uses serving_steps
-- @column trace VARCHAR    Trace label.
-- @column phase VARCHAR    prefill, decode, mixed or unknown.
-- @column steps BIGINT     Steps of this phase.
-- @column stage VARCHAR    Attention stage of the GPU ops (other: not attention).
-- @column gpu_ops BIGINT   GPU ops.
-- @column gpu_ns BIGINT    Their summed duration, ns.
-- @column share_pct DOUBLE 100 * gpu_ns / the phase's GPU time.
WITH launched AS (
    SELECT id, unnest(annotation_ids) AS aid FROM cpu_slices
    WHERE kind IN ('runtime', 'driver') AND len(annotation_ids) > 0
),
ops AS (
    SELECT ss.trace, ss.phase, s.stage, g.dur_ns
    FROM serving_steps ss
    JOIN launched l ON l.aid = ss.step_id
    JOIN gpu_ops g ON g.launch_id = l.id
    JOIN gpu_op_stages s ON s.id = g.id
),
per AS (
    SELECT trace, phase, stage, count(*) AS gpu_ops, sum(dur_ns)::BIGINT AS gpu_ns FROM ops GROUP BY ALL
)
SELECT p.trace, p.phase, (SELECT count(*) FROM serving_steps s WHERE s.trace = p.trace AND s.phase = p.phase) AS steps,
       p.stage, p.gpu_ops, p.gpu_ns, 100.0 * p.gpu_ns / sum(p.gpu_ns) OVER (PARTITION BY p.trace, p.phase) AS share_pct
FROM per p
ORDER BY p.trace, p.phase, p.gpu_ns DESC, p.stage;
