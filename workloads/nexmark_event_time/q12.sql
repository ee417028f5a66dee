-- Nexmark Query 12: bids per bidder in processing-time windows of 10 s
-- Source: feldera/feldera benchmark/feldera-sql/benchmarks/nexmark/queries/q12.sql and nexmark/nexmark q12.sql (Apache-2.0)
-- Adapted: the processing time is NOW(), the pipeline's clock (wall time, or set_clock/advance_clock in tests), in a
-- CTE that TUMBLE windows; as in Feldera, every bid takes the clock's current value, so the view counts the bids of
-- the window that holds the clock
-- Deterministic: yes (with a fixed clock)
CREATE VIEW q12 AS
WITH b AS (SELECT bidder, NOW() AS p_time FROM bid)
SELECT bidder, COUNT(*) AS bid_count, window_start, window_end
FROM TUMBLE(b, p_time, INTERVAL '10' SECOND)
GROUP BY bidder, window_start, window_end
