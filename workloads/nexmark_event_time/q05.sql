-- Nexmark Query 5: hot items, the auctions with the most bids in each sliding window
-- Source: feldera/feldera benchmark/feldera-sql/benchmarks/nexmark/queries/q5.sql and nexmark/nexmark q5.sql (Apache-2.0)
-- Adapted: HOP(bid, date_time, slide, size) table function; 2 s slide, 10 s windows
-- Deterministic: yes
CREATE VIEW q05 AS
SELECT AuctionBids.auction, AuctionBids.num, AuctionBids.starttime, AuctionBids.endtime
FROM (
    SELECT auction, COUNT(*) AS num, window_start AS starttime, window_end AS endtime
    FROM HOP(bid, date_time, INTERVAL '2' SECOND, INTERVAL '10' SECOND)
    GROUP BY auction, window_start, window_end
) AS AuctionBids
JOIN (
    SELECT MAX(CountBids.num) AS maxn, CountBids.starttime, CountBids.endtime
    FROM (
        SELECT COUNT(*) AS num, window_start AS starttime, window_end AS endtime
        FROM HOP(bid, date_time, INTERVAL '2' SECOND, INTERVAL '10' SECOND)
        GROUP BY auction, window_start, window_end
    ) AS CountBids
    GROUP BY CountBids.starttime, CountBids.endtime
) AS MaxBids
ON AuctionBids.starttime = MaxBids.starttime AND AuctionBids.endtime = MaxBids.endtime
   AND AuctionBids.num >= MaxBids.maxn
