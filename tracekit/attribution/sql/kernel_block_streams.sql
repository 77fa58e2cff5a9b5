-- The streams whose kernel order may hold attention blocks, and the CPU calls a block may widen.
--
-- A stream qualifies when it runs an attention kernel that is a call of its own (found by name, no CPU call
-- holds it), or when it runs graph replays and a kernel of a CPU call that holds an attention kernel and
-- lacks a projection on the GPU on one side or both (vLLM's piecewise CUDA graphs: the attention op runs
-- eagerly between graph replays that hold the projections; a side the ops already decided stays theirs). The last statement counts the streams (none: nothing more to do).
--
-- @param decisions IDENT    The GPU op decisions so far: id, stage, source, call_id, attention_kernel.
-- @reads gpu_ops
-- @creates _kblock          The GPU ops the blocks take in (id, call_id, stage, source, rule, attention_kernel); empty here.
-- @creates _kb_cpu_calls    The CPU calls with an attention kernel that lack a projection: call_id, open_before (no qkv_proj), open_after (no out_proj).
-- @creates _kb_streams      The streams to read (trace_id, device, stream).
CREATE OR REPLACE TEMP TABLE _kblock (id BIGINT, call_id BIGINT, stage VARCHAR, source VARCHAR,
                                      rule VARCHAR, attention_kernel BOOLEAN);

CREATE OR REPLACE TEMP TABLE _kb_cpu_calls AS
SELECT call_id, NOT bool_or(stage = 'qkv_proj') AS open_before, NOT bool_or(stage = 'out_proj') AS open_after
FROM {{decisions}} WHERE call_id IS NOT NULL GROUP BY call_id
HAVING bool_or(attention_kernel) AND NOT (bool_or(stage = 'qkv_proj') AND bool_or(stage = 'out_proj'))
   AND NOT bool_or(source = 'kernel' AND call_id = id);

CREATE OR REPLACE TEMP TABLE _kb_streams AS
SELECT DISTINCT g.trace_id, g.device, g.stream
FROM {{decisions}} d JOIN gpu_ops g USING (id)
WHERE d.source = 'kernel' AND d.call_id = d.id
UNION
(SELECT DISTINCT g.trace_id, g.device, g.stream
 FROM {{decisions}} d JOIN gpu_ops g USING (id) WHERE d.call_id IN (SELECT call_id FROM _kb_cpu_calls)
 INTERSECT
 SELECT DISTINCT trace_id, device, stream FROM gpu_ops WHERE via_graph);

SELECT count(*) FROM _kb_streams;
