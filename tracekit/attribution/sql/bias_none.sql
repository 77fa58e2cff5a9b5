-- No position-bias table read by the heads: attribution/bias_slices' table, empty.
--
-- @reads _bias_tables
-- @creates _bias_slices   The slices (x) of the position biases (none here).
CREATE OR REPLACE TEMP TABLE _bias_slices (x BIGINT);

DROP TABLE _bias_tables;
