-- Every distinct kernel name with its precision class: the first rule_kernel_precision row (by rule_order) whose
-- pattern matches, else other. The queries kernel_precision, kernel_classes and findings.fp32_simt_gemm read it.
--
-- Columns: docs/schema.md (declared in tracekit/schema/catalog.py).
--
-- @param view KEYWORD(VIEW|TEMP VIEW)  TEMP VIEW for one connection's own model.
-- @creates kernel_precision_classes
CREATE OR REPLACE {{view}} kernel_precision_classes AS
SELECT d.name, coalesce(r.precision, 'other') AS precision, r.pattern AS rule, r.note AS rule_note,
       r.rule_order
FROM (SELECT DISTINCT name FROM gpu_ops WHERE kind = 'kernel') d
LEFT JOIN rule_kernel_precision r ON regexp_matches(d.name, r.pattern)
QUALIFY row_number() OVER (PARTITION BY d.name ORDER BY r.rule_order NULLS LAST) = 1;
