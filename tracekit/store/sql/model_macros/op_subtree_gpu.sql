-- Per CPU op whose name is in the list `names`: op_id, named_below (how many ops of those names lie strictly below
-- it) and kernel_ns (summed duration of the GPU ops launched anywhere in its subtree; NULL when it launched none).
-- What a call of a library op (a GEMM, a convolution) cost on the GPU, wherever below it the kernels were
-- launched.
--
-- @param macro KEYWORD(MACRO|TEMP MACRO)  TEMP MACRO for one connection's own model.
-- @creates op_subtree_gpu
CREATE OR REPLACE {{macro}} op_subtree_gpu(names) AS TABLE
WITH RECURSIVE ops AS (
    SELECT id FROM cpu_slices WHERE kind = 'cpu_op' AND list_contains(names, name)
),
below(op_id, id) AS (
    SELECT id, id FROM ops
    UNION ALL
    SELECT b.op_id, c.id FROM below b JOIN cpu_slices c ON c.parent_id = b.id WHERE c.kind = 'cpu_op'
)
SELECT b.op_id, count(*) FILTER (WHERE b.id <> b.op_id AND b.id IN (SELECT id FROM ops)) AS named_below,
       sum(g.kernel_ns)::BIGINT AS kernel_ns
FROM below b
LEFT JOIN (SELECT cpu_op_id, sum(dur_ns) AS kernel_ns FROM gpu_ops GROUP BY cpu_op_id) g ON g.cpu_op_id = b.id
GROUP BY b.op_id;
