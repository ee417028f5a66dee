-- Nexmark Query 11: user sessions, the bids of each bidder in sessions closed by a 10 s gap
-- Source: nexmark/nexmark q11.sql (Apache-2.0)
-- Adapted: SESSION(bid, date_time, gap, bidder) table function (window_start / window_end) instead of Flink's
-- GROUP BY SESSION(...) with SESSION_START / SESSION_END
-- Deterministic: yes
CREATE VIEW q11 AS
SELECT bidder, COUNT(*) AS bid_count, window_start AS starttime, window_end AS endtime
FROM SESSION(bid, date_time, INTERVAL '10' SECOND, bidder)
GROUP BY bidder, window_start, window_end
