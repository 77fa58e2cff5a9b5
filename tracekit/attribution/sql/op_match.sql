-- The first matching rule of rule_op_stages (lowest rule_order) per distinct CPU op name.
--
-- A rule's stage or impl cell \1 means the pattern's first group in the name; causal_arg is the op's
-- argument that says whether the call is causal. The patterns are matched against the few distinct names,
-- each compiled once (pattern_hits).
--
-- @reads cpu_slices, rule_op_stages
-- @creates _op_match     Per op name: m, the rule's decision (stage, impl, is_call, context, scope, causal_arg, rule).
CREATE OR REPLACE TEMP TABLE _op_match AS
WITH n AS MATERIALIZED (
    SELECT n.*, n.name AS _subject FROM (SELECT DISTINCT name FROM cpu_slices WHERE kind = 'cpu_op') n
),
h AS ({{pattern_hits rule_op_stages n _subject}})
SELECT name, arg_min(m, o) AS m FROM (
    SELECT n.name, r.rule_order AS o,
           struct_pack(stage := CASE WHEN r.stage = '\1' THEN regexp_extract(n.name, r.pattern, 1) ELSE nullif(r.stage, '') END,
                       impl := CASE WHEN r.impl = '\1' THEN regexp_extract(n.name, r.pattern, 1) ELSE nullif(r.impl, '') END,
                       is_call := r.call = 'yes', context := r.context, scope := r.scope,
                       causal_arg := TRY_CAST(nullif(r.causal_arg, '') AS INTEGER), rule := r.pattern) AS m
    FROM n JOIN h USING (_subject) JOIN rule_op_stages r ON r.pattern = h.pattern
) GROUP BY name;
