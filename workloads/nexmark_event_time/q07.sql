-- Nexmark Query 7: the highest bids of each tumbling window
-- Source: nexmark/nexmark q7.sql (Apache-2.0), windowed form
-- Adapted: TUMBLE(bid, date_time, size) table function; 10 s windows; the join on the window end instead of
-- Flink's BETWEEN, so that the planner bounds both sides (the BETWEEN form keeps all bids: README Limitations)
-- Deterministic: yes
CREATE VIEW q07 AS
SELECT B.auction, B.price, B.bidder, B.date_time, B.window_end
FROM TUMBLE(bid, date_time, INTERVAL '10' SECOND) B
JOIN (
    SELECT MAX(price) AS maxprice, window_end
    FROM TUMBLE(bid, date_time, INTERVAL '10' SECOND)
    GROUP BY window_start, window_end
) B1
ON B.price = B1.maxprice AND B.window_end = B1.window_end
