-- The first matching rule of rule_kernel_stages (lowest rule_order) per distinct kernel name.
--
-- Kernel rules see the kernel's name demangled (_demangled) and as kernel_base gives it: the inner name of a
-- launch wrapper (ck_tile::kentry<..., Kernel>, cutlass::device_kernel<Op>, ...) without template and parameter
-- lists, since argument types (flashinfer::QuantizationSFLayout) are not what it does. A rule's stage or impl
-- cell \1 means the pattern's first group in that subject. Attention yes or helper is an attention kernel; helper
-- (a scheduler, a split-KV combine) also never starts a call of its own. The patterns are matched against the
-- few distinct subjects, each compiled once (pattern_hits).
--
-- @reads gpu_ops, rule_kernel_stages, _demangled
-- @creates _kernel_match  Per kernel name: m, the rule's decision (stage, impl, context, attention, helper, rule).
CREATE OR REPLACE TEMP TABLE _kernel_match AS
WITH n AS MATERIALIZED (
    SELECT n.*, kernel_base(n.text) AS _subject
    FROM (SELECT DISTINCT g.name, coalesce(d.text, g.name) AS text FROM gpu_ops g LEFT JOIN _demangled d USING (name)) n
),
h AS ({{pattern_hits rule_kernel_stages n _subject}})
SELECT name, arg_min(m, o) AS m FROM (
    SELECT n.name, r.rule_order AS o,
           struct_pack(stage := CASE WHEN r.stage = '\1' THEN regexp_extract(n._subject, r.pattern, 1) ELSE nullif(r.stage, '') END,
                       impl := CASE WHEN r.impl = '\1' THEN regexp_extract(n._subject, r.pattern, 1) ELSE nullif(r.impl, '') END,
                       context := r.context, attention := r.attention IN ('yes', 'helper'),
                       helper := r.attention = 'helper', rule := r.pattern) AS m
    FROM n JOIN h USING (_subject) JOIN rule_kernel_stages r ON r.pattern = h.pattern
) GROUP BY name;

DROP TABLE _demangled;
