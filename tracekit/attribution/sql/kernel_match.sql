-- The first matching rule of rule_kernel_stages (lowest rule_order) per distinct kernel name.
--
-- Kernel rules see the kernel's name demangled (_demangled) and without template and parameter lists
-- (kernel_base): argument types (flashinfer::QuantizationSFLayout) are not what it does. composable_kernel
-- launches every kernel through ck_tile::kentry<..., Kernel>: there the kernel is the template argument. A
-- rule's stage or impl cell \1 means the pattern's first group in the name. The patterns are matched against
-- the few distinct subjects, each compiled once (pattern_hits).
--
-- @reads gpu_ops, rule_kernel_stages, _demangled
-- @creates _kernel_match  Per kernel name: m, the rule's decision (stage, impl, context, attention, rule).
CREATE OR REPLACE TEMP TABLE _kernel_match AS
WITH n AS MATERIALIZED (
    SELECT n.*,
           CASE WHEN regexp_matches(kernel_base(n.text), '(^|[: ])kentry$')
                THEN kernel_base(regexp_replace(n.text, '^[^<]*<', '')) ELSE kernel_base(n.text) END AS _subject
    FROM (SELECT DISTINCT g.name, coalesce(d.text, g.name) AS text FROM gpu_ops g LEFT JOIN _demangled d USING (name)) n
),
h AS ({{pattern_hits rule_kernel_stages n _subject}})
SELECT name, arg_min(m, o) AS m FROM (
    SELECT n.name, r.rule_order AS o,
           struct_pack(stage := CASE WHEN r.stage = '\1' THEN regexp_extract(n.name, r.pattern, 1) ELSE nullif(r.stage, '') END,
                       impl := CASE WHEN r.impl = '\1' THEN regexp_extract(n.name, r.pattern, 1) ELSE nullif(r.impl, '') END,
                       context := r.context, attention := r.attention = 'yes', rule := r.pattern) AS m
    FROM n JOIN h USING (_subject) JOIN rule_kernel_stages r ON r.pattern = h.pattern
) GROUP BY name;

DROP TABLE _demangled;
