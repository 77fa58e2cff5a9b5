-- The rule_device_peaks dtype (fp8, bf16, fp16, fp32, fp64) of an op's input dtype as Input types write it
-- (c10::Float8_*, c10::BFloat16, c10::Half, float, double); NULL for any other.
--
-- @param macro KEYWORD(MACRO|TEMP MACRO)  TEMP MACRO for one connection's own model.
-- @creates peak_dtype
CREATE OR REPLACE {{macro}} peak_dtype(dtype) AS (
    CASE WHEN dtype LIKE 'c10::Float8%' THEN 'fp8' WHEN dtype = 'c10::BFloat16' THEN 'bf16'
         WHEN dtype = 'c10::Half' THEN 'fp16' WHEN dtype = 'float' THEN 'fp32' WHEN dtype = 'double' THEN 'fp64'
    END
);
