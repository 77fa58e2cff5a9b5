-- The first matching rule of rule_label_stages (lowest rule_order) per distinct annotation name.
--
-- Annotation names are the CPU's record_function ranges and Kineto's gpu_user_annotation ranges (the only
-- label a GPU op without a launch can have). A rule's stage or impl cell \1 means the pattern's first group
-- in the name. The patterns are matched against the few distinct names, each compiled once (pattern_hits).
--
-- @reads cpu_slices, events, rule_label_stages
-- @creates _label_match  Per annotation name: m, the rule's decision (stage, impl, is_call, context, scope, causal_arg, rule).
CREATE OR REPLACE TEMP TABLE _label_match AS
WITH n AS MATERIALIZED (
    SELECT n.*, n.name AS _subject
    FROM (SELECT DISTINCT name FROM cpu_slices WHERE kind = 'user_annotation'
          UNION SELECT DISTINCT name FROM events WHERE kind = 'gpu_user_annotation') n
),
h AS ({{pattern_hits rule_label_stages n _subject}})
SELECT name, arg_min(m, o) AS m FROM (
    SELECT n.name, r.rule_order AS o,
           struct_pack(stage := CASE WHEN r.stage = '\1' THEN regexp_extract(n.name, r.pattern, 1) ELSE nullif(r.stage, '') END,
                       impl := CASE WHEN r.impl = '\1' THEN regexp_extract(n.name, r.pattern, 1) ELSE nullif(r.impl, '') END,
                       is_call := r.call = 'yes', context := 'any', scope := 'outer', causal_arg := NULL::INTEGER,
                       rule := r.pattern) AS m
    FROM n JOIN h USING (_subject) JOIN rule_label_stages r ON r.pattern = h.pattern
) GROUP BY name;
