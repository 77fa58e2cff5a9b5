-- Where the time goes, by attention stage: GPU op time and CPU self time per trace.
--
-- Every GPU op has a stage (gpu_op_stages): from an enclosing stage label, else an
-- enclosing module scope, else its launching op, else its kernel name, and in a training step's backward
-- from the forward op autograd ran it for; around an attention kernel no CPU op holds (graph replays,
-- compiled regions), from its place in the stream's kernel order; everything else is "other". gpu_ns sums the
-- GPU ops' durations and share_pct is the stage's share of the trace's GPU op time;
-- attention_share_pct is its share of the trace's attention time (the GPU op time of every stage but other;
-- NULL for other), so the attention stages add up to 100.
-- CPU ops (cpu_op, runtime and driver slices) get stages by the same labels and op
-- rules, and cpu_ns sums their self time, so a CPU-only trace still gets an answer.
-- The gpu_by_* and cpu_by_* columns count how many rows each source decided, so
-- the attribution can be checked. By default GPU ops with no launch in the trace
-- (orphans) are left out.
--
-- @param include_orphans BOOLEAN = false   Also count GPU ops launched before the trace began.
-- @column trace VARCHAR                  Trace label.
-- @column rank INTEGER                   The trace's rank (traces.rank; NULL when none was recorded).
-- @column stage VARCHAR                  Attention stage (see docs/attribution.md).
-- @column gpu_ops BIGINT                 GPU ops of this stage.
-- @column gpu_ns BIGINT                  Their summed duration, nanoseconds.
-- @column share_pct DOUBLE               100 * gpu_ns / GPU op time of the trace.
-- @column cpu_ops BIGINT                 CPU ops (cpu_op, runtime, driver) of this stage.
-- @column cpu_ns BIGINT                  Their summed self time, nanoseconds.
-- @column gpu_by_label BIGINT            GPU ops decided by a record_function label.
-- @column gpu_by_module BIGINT           GPU ops decided by an enclosing module scope (nn.Module / Python frame).
-- @column gpu_by_op BIGINT               GPU ops decided by their launching op.
-- @column gpu_by_gpu_annotation BIGINT   GPU ops decided by Kineto's gpu_user_annotation (orphans).
-- @column gpu_by_kernel BIGINT           GPU ops decided by their kernel name.
-- @column cpu_by_label BIGINT            CPU ops decided by a label.
-- @column cpu_by_module BIGINT           CPU ops decided by a module scope.
-- @column cpu_by_op BIGINT               CPU ops decided by an op rule.
-- @column gpu_by_backward BIGINT         GPU ops autograd ran for a forward op of this stage (source backward: the op's Sequence number).
-- @column cpu_by_backward BIGINT         CPU ops decided so.
-- @column backward_gpu_ns BIGINT         GPU time of this stage in a training step's backward: autograd's work for its forward ops, and the fused backward ops' kernels (calls with direction backward), ns.
-- @column gpu_by_sequence BIGINT         GPU ops decided by their place in a stream's kernel order around an attention kernel no CPU op holds (graph replays, compiled regions).
-- @column attention_share_pct DOUBLE     100 * gpu_ns / the GPU op time of the trace's attention stages (all but other); NULL for other.
WITH gpu AS (
    SELECT trace_id, stage, count(*) AS gpu_ops, sum(dur_ns)::BIGINT AS gpu_ns,
           count(*) FILTER (WHERE source = 'label') AS gpu_by_label,
           count(*) FILTER (WHERE source = 'module') AS gpu_by_module,
           count(*) FILTER (WHERE source = 'op') AS gpu_by_op,
           count(*) FILTER (WHERE source = 'gpu_annotation') AS gpu_by_gpu_annotation,
           count(*) FILTER (WHERE source = 'kernel') AS gpu_by_kernel,
           count(*) FILTER (WHERE source = 'backward') AS gpu_by_backward,
           count(*) FILTER (WHERE source = 'sequence') AS gpu_by_sequence,
           coalesce(sum(dur_ns) FILTER (WHERE source = 'backward' OR backward_call), 0)::BIGINT AS backward_gpu_ns
    FROM (SELECT s.*, coalesce(c.direction = 'backward', false) AS backward_call
          FROM gpu_op_stages s LEFT JOIN attention_calls c USING (call_id))
    WHERE $include_orphans OR NOT orphan
    GROUP BY trace_id, stage
),
cpu AS (
    SELECT trace_id, stage, count(*) AS cpu_ops, sum(self_ns)::BIGINT AS cpu_ns,
           count(*) FILTER (WHERE source = 'label') AS cpu_by_label,
           count(*) FILTER (WHERE source = 'module') AS cpu_by_module,
           count(*) FILTER (WHERE source = 'op') AS cpu_by_op,
           count(*) FILTER (WHERE source = 'backward') AS cpu_by_backward
    FROM cpu_stages
    WHERE kind IN ('cpu_op', 'runtime', 'driver')
    GROUP BY trace_id, stage
),
joined AS (
    SELECT coalesce(g.trace_id, c.trace_id) AS trace_id, coalesce(g.stage, c.stage) AS stage,
           coalesce(g.gpu_ops, 0) AS gpu_ops, coalesce(g.gpu_ns, 0) AS gpu_ns,
           coalesce(c.cpu_ops, 0) AS cpu_ops, coalesce(c.cpu_ns, 0) AS cpu_ns,
           coalesce(g.gpu_by_label, 0) AS gpu_by_label, coalesce(g.gpu_by_module, 0) AS gpu_by_module,
           coalesce(g.gpu_by_op, 0) AS gpu_by_op,
           coalesce(g.gpu_by_gpu_annotation, 0) AS gpu_by_gpu_annotation, coalesce(g.gpu_by_kernel, 0) AS gpu_by_kernel,
           coalesce(c.cpu_by_label, 0) AS cpu_by_label, coalesce(c.cpu_by_module, 0) AS cpu_by_module,
           coalesce(c.cpu_by_op, 0) AS cpu_by_op,
           coalesce(g.gpu_by_backward, 0) AS gpu_by_backward, coalesce(c.cpu_by_backward, 0) AS cpu_by_backward,
           coalesce(g.backward_gpu_ns, 0) AS backward_gpu_ns, coalesce(g.gpu_by_sequence, 0) AS gpu_by_sequence
    FROM gpu g FULL OUTER JOIN cpu c ON c.trace_id = g.trace_id AND c.stage = g.stage
)
SELECT t.trace, t.rank, j.stage, j.gpu_ops, j.gpu_ns,
       round(100.0 * j.gpu_ns / nullif(sum(j.gpu_ns) OVER (PARTITION BY j.trace_id), 0), 3) AS share_pct,
       j.cpu_ops, j.cpu_ns, j.gpu_by_label, j.gpu_by_module, j.gpu_by_op, j.gpu_by_gpu_annotation, j.gpu_by_kernel,
       j.cpu_by_label, j.cpu_by_module, j.cpu_by_op, j.gpu_by_backward, j.cpu_by_backward, j.backward_gpu_ns,
       j.gpu_by_sequence,
       CASE WHEN j.stage <> 'other' THEN round(100.0 * j.gpu_ns / nullif(sum(j.gpu_ns) FILTER (WHERE j.stage <> 'other')
                                                                   OVER (PARTITION BY j.trace_id), 0), 3)
       END AS attention_share_pct
FROM joined j JOIN traces t USING (trace_id)
ORDER BY t.trace, j.gpu_ns DESC, j.cpu_ns DESC, j.stage;
