-- Collectives that run far below the bandwidth of their message size.
--
-- One row per collective_bandwidth row (trace, collective, message size) whose
-- busbw is under min_pct % of what that size should reach: expected_gbps, the
-- best busbw any rank of the source reached for the same collective in the same
-- size bucket (bucket_bytes: the size rounded down to a power of two), and for
-- messages of large_bytes or more at least peak_pct % of the link's peak
-- (rule_link_peaks, tracekit/rules/link_peaks.csv: the first row matching the
-- trace's first GPU; nccl-tests' busbw comes near the peak on large messages,
-- while small ones are bound by latency, so only the job's own figures judge
-- them). lost_ns is the time beyond what expected_gbps would take. A rank that
-- waits for a late one counts the wait in its kernel time (matched_collectives
-- tells a late rank from a slow link).
--
-- @uses collective_bandwidth
-- @param min_pct DOUBLE = 50            Fire below this share of the expected bandwidth, percent.
-- @param large_bytes BIGINT = 16777216  From this message size on, the link's peak sets a floor, bytes.
-- @param peak_pct DOUBLE = 50           That floor: this share of the link's peak, percent.
-- @column trace VARCHAR              Trace label.
-- @column rank INTEGER               The trace's rank (traces.rank).
-- @column collective VARCHAR         Collective (record_param_comms' name).
-- @column size_bytes BIGINT          Message size, bytes (collective_bandwidth).
-- @column bucket_bytes BIGINT        Its size bucket: the size rounded down to a power of two, bytes.
-- @column calls BIGINT               Calls of this size.
-- @column time_ns BIGINT             Their summed kernel time, nanoseconds.
-- @column busbw_gbps DOUBLE          Bus bandwidth reached, GB/s.
-- @column bucket_best_gbps DOUBLE    The best busbw of this collective and size bucket in the source, GB/s.
-- @column device VARCHAR             The device the link peak is for (rule_link_peaks.device; NULL: no row matched).
-- @column link VARCHAR               The link (NVLink 3, PCIe Gen4 x16, ...).
-- @column peak_gbps DOUBLE           The link's peak per direction, GB/s.
-- @column pct_of_peak DOUBLE         100 * busbw_gbps / peak_gbps.
-- @column expected_gbps DOUBLE       What the size should reach: the bucket's best, at least peak_pct % of the peak from large_bytes on, GB/s.
-- @column pct_of_expected DOUBLE     100 * busbw_gbps / expected_gbps.
-- @column lost_ns BIGINT             time_ns minus the time at expected_gbps, nanoseconds.
WITH peaks AS (
    SELECT t.trace, arg_min(r.device, r.rule_order) AS device, arg_min(r.link, r.rule_order) AS link,
           arg_min(TRY_CAST(r.peak_gbps AS DOUBLE), r.rule_order) AS peak_gbps
    FROM traces t
    JOIN (SELECT trace_id, arg_min(name, device) AS name FROM devices GROUP BY trace_id) d USING (trace_id)
    JOIN rule_link_peaks r ON regexp_matches(d.name, r.pattern)
    GROUP BY t.trace
),
rows AS (
    SELECT b.*, (2 ** floor(log2(b.size_bytes)))::BIGINT AS bucket_bytes, p.device, p.link, p.peak_gbps
    FROM collective_bandwidth b
    LEFT JOIN peaks p USING (trace)
    WHERE b.busbw_gbps IS NOT NULL
),
judged AS (
    SELECT *, max(busbw_gbps) OVER (PARTITION BY collective, bucket_bytes) AS bucket_best_gbps
    FROM rows
),
expected AS (
    SELECT *, CASE WHEN size_bytes >= $large_bytes AND peak_gbps IS NOT NULL
                   THEN greatest(bucket_best_gbps, peak_gbps * $peak_pct / 100.0)
                   ELSE bucket_best_gbps END AS expected_gbps
    FROM judged
)
SELECT trace, rank, collective, size_bytes, bucket_bytes, calls, time_ns, busbw_gbps, bucket_best_gbps,
       device, link, peak_gbps, round(100.0 * busbw_gbps / nullif(peak_gbps, 0), 3) AS pct_of_peak,
       round(expected_gbps, 3) AS expected_gbps,
       round(100.0 * busbw_gbps / nullif(expected_gbps, 0), 3) AS pct_of_expected,
       (time_ns - time_ns * busbw_gbps / nullif(expected_gbps, 0))::BIGINT AS lost_ns
FROM expected
WHERE busbw_gbps < $min_pct / 100.0 * expected_gbps
ORDER BY lost_ns DESC, trace, collective, size_bytes;
