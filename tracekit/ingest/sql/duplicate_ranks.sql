-- The ranks of a job that more than one trace claims: job, rank and the traces' labels.
--
-- Traces are tied to one job only by what they recorded: the same job id, or, with no job id, the same
-- distributed world (a world_size above 1, the same in both). Two unrelated single-GPU traces that each say
-- rank 0 (no job id, no world or a world of 1) claim nothing of each other.
--
-- @fragment
-- @reads traces
SELECT job, rank, list(trace ORDER BY trace_id) FROM traces
WHERE rank IS NOT NULL AND (job IS NOT NULL OR world_size > 1)
GROUP BY job, rank, CASE WHEN job IS NULL THEN world_size END
HAVING count(*) > 1 ORDER BY job NULLS FIRST, rank
