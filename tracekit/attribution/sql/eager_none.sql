-- No eager pattern and no call op to widen: the eager layer's marks and pairs, empty.
--
-- @reads _eager_softmax, _eager_call_ops
-- @creates _eager_marks   The eager calls' and widened call ops' marks (empty here; see attribution/eager_marks).
-- @creates _eager_pairs   Every CPU slice inside a mark's span (empty here).
CREATE OR REPLACE TEMP TABLE _eager_marks (
    id BIGINT, mkey BIGINT, kind VARCHAR, pos DOUBLE, stage VARCHAR, is_call BOOLEAN, impl VARCHAR,
    context VARCHAR, scope VARCHAR, causal_arg INTEGER, rule VARCHAR, op VARCHAR, lane BIGINT,
    k0 BIGINT, k1 BIGINT, ts_ns BIGINT, end_ns BIGINT);

CREATE OR REPLACE TEMP TABLE _eager_pairs (x BIGINT, mkey BIGINT);

DROP TABLE _eager_softmax;

DROP TABLE _eager_call_ops;
