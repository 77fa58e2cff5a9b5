-- The first matching rule of rule_module_stages (lowest rule_order) per distinct Python frame name.
--
-- A rule's pattern sees the class of an ``nn.Module: <Class>_<n>`` scope, or the function of a
-- ``file.py(42): func`` frame (no rule applies to any other frame); its frame column says which kind it
-- is for. The patterns are matched against the few distinct names, each compiled once (pattern_hits).
--
-- @reads python_functions, rule_module_stages
-- @creates _module_match  Per frame name: m, the rule's decision (stage, is_call, impl, context, scope, causal_arg, rule).
CREATE OR REPLACE TEMP TABLE _module_match AS
WITH n AS MATERIALIZED (
    SELECT n.*,
           CASE WHEN n.name LIKE 'nn.Module: %' THEN regexp_extract(n.name, '^nn\.Module: (.+?)(_[0-9]+)?$', 1)
                ELSE nullif(regexp_extract(n.name, '^.+\([0-9]+\): ([A-Za-z_][A-Za-z0-9_]*)$', 1), '') END
               AS _subject
    FROM (SELECT name, CASE WHEN name LIKE 'nn.Module: %' THEN 'module' ELSE 'function' END AS frame
          FROM (SELECT DISTINCT name FROM python_functions)) n
),
h AS ({{pattern_hits rule_module_stages n _subject}})
SELECT name, arg_min(m, o) AS m FROM (
    SELECT n.name, r.rule_order AS o,
           struct_pack(stage := nullif(r.stage, ''), is_call := r.call = 'yes', impl := NULL::VARCHAR,
                       context := r.context, scope := 'module', causal_arg := NULL::INTEGER, rule := r.pattern) AS m
    FROM n JOIN h USING (_subject) JOIN rule_module_stages r ON r.pattern = h.pattern AND r.frame = n.frame
) GROUP BY name;
