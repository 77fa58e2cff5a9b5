-- A kernel's name without template and parameter lists (what it does, not its argument types): kernel-name rules
-- match it. `(anonymous namespace)` is kept as `anonymous_namespace`.
--
-- @param macro KEYWORD(MACRO|TEMP MACRO)  TEMP MACRO for one connection's own model.
-- @creates kernel_base
CREATE OR REPLACE {{macro}} kernel_base(name) AS (
    regexp_replace(replace(name, '(anonymous namespace)', 'anonymous_namespace'), '[<(].*$', '')
);
