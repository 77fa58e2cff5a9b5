-- Collectives that run far below the bandwidth of their message size, as a finding.
--
-- The rows of slow_collectives (cluster): per trace, collective and message size, a
-- busbw under half of what that size should reach (the best any rank of the source
-- reached in the same power-of-two size bucket, and from 16 MiB on at least half of the
-- link's peak), heaviest loss first. A rank that waits for a late one counts its wait
-- as kernel time: matched_collectives tells a late rank from a slow link.
--
-- @uses slow_collectives
-- @column trace VARCHAR            Trace label.
-- @column rank INTEGER             The trace's rank (traces.rank).
-- @column collective VARCHAR       Collective (record_param_comms' name).
-- @column size_bytes BIGINT        Message size, bytes.
-- @column calls BIGINT             Calls of this size.
-- @column time_ns BIGINT           Their summed kernel time, nanoseconds.
-- @column busbw_gbps DOUBLE        Bus bandwidth reached, GB/s.
-- @column expected_gbps DOUBLE     What the size should reach, GB/s (slow_collectives).
-- @column pct_of_expected DOUBLE   100 * busbw_gbps / expected_gbps.
-- @column link VARCHAR             The link the peak is for (NULL: no rule_link_peaks row matched).
-- @column lost_ns BIGINT           time_ns minus the time at expected_gbps, nanoseconds.
SELECT trace, rank, collective, size_bytes, calls, time_ns, busbw_gbps, expected_gbps, pct_of_expected, link, lost_ns
FROM slow_collectives
ORDER BY trace, lost_ns DESC, collective, size_bytes;
