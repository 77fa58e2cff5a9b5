-- The roofline peaks per trace and dtype: roofline_peaks(wanted) gives trace_id, dtype (fp8, bf16, ...), device,
-- peak_tflops and peak_tbps from the first rule_device_peaks row whose pattern matches the device name (or whose
-- device starts with it, e.g. H100); the name is `wanted`, or each trace's first GPU when `wanted` is auto.
--
-- @param macro KEYWORD(MACRO|TEMP MACRO)  TEMP MACRO for one connection's own model.
-- @creates roofline_peaks
CREATE OR REPLACE {{macro}} roofline_peaks(wanted) AS TABLE
SELECT dn.trace_id, r.dtype, arg_min(r.device, r.rule_order) AS device,
       arg_min(CAST(r.peak_tflops AS DOUBLE), r.rule_order) AS peak_tflops,
       arg_min(CAST(r.peak_tbps AS DOUBLE), r.rule_order) AS peak_tbps
FROM (
    SELECT t.trace_id, CASE WHEN wanted = 'auto' THEN (SELECT arg_min(d.name, d.device) FROM devices d
                                                       WHERE d.trace_id = t.trace_id) ELSE wanted END AS name
    FROM traces t
) dn
JOIN rule_device_peaks r ON regexp_matches(dn.name, r.pattern) OR starts_with(lower(r.device), lower(dn.name))
GROUP BY dn.trace_id, r.dtype;
