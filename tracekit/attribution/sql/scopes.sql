-- The module scopes a rule marks: each scope as a mark on the link step's axis, and every CPU slice inside one.
--
-- Rows that neither start a call nor name a stage (exclusions) only stop broader rows from matching; they
-- need no scope. A CPU slice belongs to a scope when it lies inside it on the same thread (model/inside, with
-- the link step's overhang), so a GPU op belongs to a scope when its launching runtime call does. Each
-- thread's stretch of the axis is k0 = base + ts_ns (none without scopes: the usual trace, which then pays
-- nothing for this layer). A scope sits just before the first slice it contains; scopes sharing that slice
-- nest by start time (outer first, then the longer).
--
-- @param bleed INT          How far (ns) a slice may end after its scope (model.link.BLEED_NS).
-- @reads python_functions, cpu_slices, _module_match, _cpu
-- @scratch _scope           The scopes a rule marks as a call or with a stage, with their match m.
-- @scratch _scope_lane      Each lane of the axis (with scopes in the trace): its base (k0 - ts_ns), trace_id, pid, tid.
-- @scratch _scope_k         The scopes with their lane and their ends on the axis (s0, s1).
-- @creates _scope_pairs     (x, sid, pos): every CPU slice x (at pos) inside the scope sid.
-- @creates _scope_marks     Each marked scope as a mark (kind 'module') with its position on the axis, its rule's decision, trace_id, ts_ns and end_ns.
CREATE OR REPLACE TEMP TABLE _scope AS
SELECT f.id, f.trace_id, f.pid, f.tid, f.ts_ns, f.dur_ns, f.end_ns, m.m
FROM python_functions f JOIN _module_match m USING (name)
WHERE m.m.is_call OR m.m.stage IS NOT NULL;

CREATE OR REPLACE TEMP TABLE _scope_lane AS
WITH l AS (SELECT lane, any_value(id) AS id, any_value(k0 - ts_ns) AS base FROM _cpu
           WHERE EXISTS (SELECT 1 FROM _scope) GROUP BY lane)
SELECT l.lane, l.base, s.trace_id, s.pid, s.tid FROM l JOIN cpu_slices s USING (id);

CREATE OR REPLACE TEMP TABLE _scope_k AS
SELECT s.*, l.lane, l.base + s.ts_ns AS s0, l.base + s.end_ns AS s1
FROM _scope s JOIN _scope_lane l ON l.trace_id = s.trace_id AND l.pid IS NOT DISTINCT FROM s.pid
                                AND l.tid IS NOT DISTINCT FROM s.tid;

CREATE OR REPLACE TEMP TABLE _scope_pairs AS
SELECT x, key AS sid, pos FROM ({{include model/inside spans=_scope_k key=id start=s0 end=s1 bleed=bleed}});

CREATE OR REPLACE TEMP TABLE _scope_marks AS
WITH first AS (SELECT sid AS id, min(pos) AS p FROM _scope_pairs GROUP BY sid)
SELECT s.id, s.id AS mkey, 'module' AS kind,
       (f.p - 1 + row_number() OVER (PARTITION BY f.p ORDER BY s.ts_ns, s.dur_ns DESC, s.id)
            / (count(*) OVER (PARTITION BY f.p) + 1))::DOUBLE AS pos,
       s.m.stage, s.m.is_call, s.m.impl, s.m.context, s.m.scope, s.m.causal_arg, s.m.rule,
       s.trace_id, s.ts_ns, s.end_ns
FROM _scope_k s JOIN first f USING (id);

DROP TABLE _scope;

DROP TABLE _scope_lane;

DROP TABLE _scope_k;
