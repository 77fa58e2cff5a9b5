-- The ranks of a job that more than one trace claims: job, rank and the traces' labels.
--
-- @fragment
-- @reads traces
SELECT job, rank, list(trace ORDER BY trace_id) FROM traces WHERE rank IS NOT NULL
GROUP BY job, rank HAVING count(*) > 1 ORDER BY job NULLS FIRST, rank
