-- The Itanium-mangled kernel names (ROCm, some CUDA libraries), which kernel rules see demangled.
--
-- The caller demangles them (common.names.demangle) into _demangled, which this step makes empty.
--
-- @reads gpu_ops
-- @creates _demangled    Each mangled kernel name and its demangled text (filled by the caller).
CREATE OR REPLACE TEMP TABLE _demangled (name VARCHAR, text VARCHAR);

SELECT DISTINCT name FROM gpu_ops WHERE starts_with(name, '_Z') OR starts_with(name, '__Z');
