-- The containers: CPU slices that can hold others (ops and annotations; runtime calls are leaves).
--
-- @param kinds LIST      The container kinds (schema.kinds.CPU_NEST_KINDS less the launch kinds).
-- @reads _cpu
-- @creates _cont         The rows of _cpu whose kind is a container kind.
CREATE TEMP TABLE _cont AS SELECT * FROM _cpu WHERE kind IN {{kinds}};
