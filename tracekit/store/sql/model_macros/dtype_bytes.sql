-- Bytes per element of a dtype as Input types write it (double 8; float, int 4; c10::BFloat16, c10::Half, short 2;
-- c10::Float8_*, signed/unsigned char, c10::qint8 1; complex types twice their part); NULL for any other.
--
-- @param macro KEYWORD(MACRO|TEMP MACRO)  TEMP MACRO for one connection's own model.
-- @creates dtype_bytes
CREATE OR REPLACE {{macro}} dtype_bytes(dtype) AS (
    CASE WHEN dtype IN ('double', 'c10::complex<float>') THEN 8
         WHEN dtype IN ('float', 'int', 'c10::complex<c10::Half>') THEN 4
         WHEN dtype IN ('c10::BFloat16', 'c10::Half', 'short') THEN 2
         WHEN dtype LIKE 'c10::Float8%' OR dtype IN ('signed char', 'unsigned char', 'c10::qint8') THEN 1
    END
);
