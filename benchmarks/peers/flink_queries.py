"""Nexmark queries in Flink SQL, translated by hand from workloads/nexmark/qNN.sql.

Used by ``flink_nexmark.py`` (run by the ``.peer-flink`` venv's Python, so this module
imports nothing but the standard library) and by ``benchmarks/nexmark_throughput.py``
(to know which queries Flink runs).  The tables are the engine's (``schema.sql``) with
VARCHAR -> STRING and TIMESTAMP -> TIMESTAMP(3), read from CSV files (no header) by the
filesystem connector; no watermarks, so every query is a regular (unwindowed) streaming
query, as the engine's views are.

Translation notes (only where the text differs from the engine's DuckDB SQL):
- q14: LENGTH -> CHAR_LENGTH.
- q22: split_part(url, '/', n) (1-based) -> SPLIT_INDEX(url, '/', n - 1) (0-based).
- q102: ``COUNT(*) / COUNT(DISTINCT auction)`` is integer division in Flink; DuckDB's is real
  division, so the numerator is cast to DOUBLE.
"""

TABLES = {
    "person": "id BIGINT, name STRING, emailAddress STRING, creditCard STRING, city STRING, state STRING, "
              "date_time TIMESTAMP(3), extra STRING",
    "auction": "id BIGINT, itemName STRING, description STRING, initialBid BIGINT, reserve BIGINT, "
               "date_time TIMESTAMP(3), expires TIMESTAMP(3), seller BIGINT, category BIGINT, extra STRING",
    "bid": "auction BIGINT, bidder BIGINT, price BIGINT, channel STRING, url STRING, date_time TIMESTAMP(3), "
           "extra STRING",
}

_RANKS = """
     count(*) FILTER (WHERE price < 10000) AS rank1_bids,
     count(*) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_bids,
     count(*) FILTER (WHERE price >= 1000000) AS rank3_bids"""
_DISTINCTS = """,
     count(DISTINCT bidder) AS total_bidders,
     count(DISTINCT bidder) FILTER (WHERE price < 10000) AS rank1_bidders,
     count(DISTINCT bidder) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_bidders,
     count(DISTINCT bidder) FILTER (WHERE price >= 1000000) AS rank3_bidders,
     count(DISTINCT auction) AS total_auctions,
     count(DISTINCT auction) FILTER (WHERE price < 10000) AS rank1_auctions,
     count(DISTINCT auction) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_auctions,
     count(DISTINCT auction) FILTER (WHERE price >= 1000000) AS rank3_auctions"""
_DAY = "CAST(CAST(date_time AS DATE) AS STRING)"
_HM = ("lpad(CAST(EXTRACT(HOUR FROM date_time) AS STRING), 2, '0') || ':' || "
       "lpad(CAST(EXTRACT(MINUTE FROM date_time) AS STRING), 2, '0')")
_CHANNEL_ID = "NULLIF(REGEXP_EXTRACT(url, '(&|^)channel_id=([^&]*)', 2), '')"
_BID_COUNT = """SELECT a.id AS auction_id, a.itemName AS auction_item_name, COUNT(b.auction) AS bid_count
FROM auction a JOIN bid b ON a.id = b.auction
GROUP BY a.id, a.itemName"""
_IN_AUCTION = "FROM auction A, bid B WHERE A.id = B.auction AND B.date_time BETWEEN A.date_time AND A.expires"

QUERIES = {
    "q00": "SELECT auction, bidder, price, date_time, extra FROM bid",
    "q01": "SELECT auction, bidder, 0.908 * price AS price, date_time, extra FROM bid",
    "q02": "SELECT auction, price FROM bid WHERE MOD(auction, 123) = 0",
    "q03": """SELECT P.name, P.city, P.state, A.id
FROM auction AS A INNER JOIN person AS P ON A.seller = P.id
WHERE A.category = 10 AND (P.state = 'OR' OR P.state = 'ID' OR P.state = 'CA')""",
    "q04": f"""SELECT Q.category, AVG(Q.final)
FROM (SELECT MAX(B.price) AS final, A.category {_IN_AUCTION} GROUP BY A.id, A.category) Q
GROUP BY Q.category""",
    "q09": """SELECT id, itemName, description, initialBid, reserve, date_time, expires, seller, category, extra,
    auction, bidder, price, bid_dateTime, bid_extra
FROM (
   SELECT A.*, B.auction, B.bidder, B.price, B.date_time AS bid_dateTime, B.extra AS bid_extra,
     ROW_NUMBER() OVER (PARTITION BY A.id ORDER BY B.price DESC, B.date_time ASC) AS rownum
   FROM auction A, bid B
   WHERE A.id = B.auction AND B.date_time BETWEEN A.date_time AND A.expires
) T
WHERE rownum <= 1""",
    "q10": f"SELECT auction, bidder, price, date_time, extra, {_DAY} AS dt, {_HM} AS hm FROM bid",
    "q14": """SELECT auction, bidder, 0.908 * price AS price,
    CASE
        WHEN EXTRACT(HOUR FROM date_time) >= 8 AND EXTRACT(HOUR FROM date_time) <= 18 THEN 'dayTime'
        WHEN EXTRACT(HOUR FROM date_time) <= 6 OR EXTRACT(HOUR FROM date_time) >= 20 THEN 'nightTime'
        ELSE 'otherTime'
    END AS bidTimeType,
    date_time, extra,
    CHAR_LENGTH(extra) - CHAR_LENGTH(REPLACE(extra, 'c', '')) AS c_counts
FROM bid
WHERE 0.908 * price > 1000000 AND 0.908 * price < 50000000""",
    "q15": f"SELECT {_DAY} AS day_, count(*) AS total_bids,{_RANKS}{_DISTINCTS}\nFROM bid GROUP BY {_DAY}",
    "q16": f"SELECT channel, {_DAY} AS day_, max({_HM}) AS minute_, count(*) AS total_bids,{_RANKS}{_DISTINCTS}\n"
           f"FROM bid GROUP BY channel, {_DAY}",
    "q17": f"""SELECT auction, {_DAY} AS day_, count(*) AS total_bids,{_RANKS},
     min(price) AS min_price, max(price) AS max_price, avg(price) AS avg_price, sum(price) AS sum_price
FROM bid GROUP BY auction, {_DAY}""",
    "q18": """SELECT auction, bidder, price, channel, url, date_time, extra
FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY bidder, auction ORDER BY date_time DESC) AS rank_number
      FROM bid) T
WHERE rank_number <= 1""",
    "q19": """SELECT * FROM
(SELECT *, ROW_NUMBER() OVER (PARTITION BY auction ORDER BY price DESC) AS rank_number FROM bid) T
WHERE rank_number <= 10""",
    "q20": """SELECT auction, bidder, price, channel, url, B.date_time AS bid_date_time, B.extra AS bid_extra,
    itemName, description, initialBid, reserve, A.date_time AS auction_date_time, expires, seller, category,
    A.extra AS auction_extra
FROM bid AS B INNER JOIN auction AS A ON B.auction = A.id
WHERE A.category = 10""",
    "q21": f"""SELECT auction, bidder, price, channel,
    CASE
        WHEN lower(channel) = 'apple' THEN '0'
        WHEN lower(channel) = 'google' THEN '1'
        WHEN lower(channel) = 'facebook' THEN '2'
        WHEN lower(channel) = 'baidu' THEN '3'
        ELSE {_CHANNEL_ID}
    END AS channel_id
FROM bid
WHERE {_CHANNEL_ID} IS NOT NULL OR lower(channel) IN ('apple', 'google', 'facebook', 'baidu')""",
    "q22": """SELECT auction, bidder, price, channel,
    SPLIT_INDEX(url, '/', 3) AS dir1, SPLIT_INDEX(url, '/', 4) AS dir2, SPLIT_INDEX(url, '/', 5) AS dir3
FROM bid""",
    "q101": """SELECT a.id AS auction_id, a.itemName AS auction_item_name, b.max_price AS current_highest_bid
FROM auction a
LEFT OUTER JOIN (SELECT b1.auction, MAX(b1.price) max_price FROM bid b1 GROUP BY b1.auction) b
ON a.id = b.auction""",
    "q102": f"""{_BID_COUNT}
HAVING COUNT(b.auction) >= (SELECT CAST(COUNT(*) AS DOUBLE) / COUNT(DISTINCT auction) FROM bid)""",
    "q103": """SELECT a.id AS auction_id, a.itemName AS auction_item_name
FROM auction a
WHERE a.id IN (SELECT b.auction FROM bid b GROUP BY b.auction HAVING COUNT(*) >= 20)""",
    "q104": """SELECT a.id AS auction_id, a.itemName AS auction_item_name
FROM auction a
WHERE a.id NOT IN (SELECT b.auction FROM bid b GROUP BY b.auction HAVING COUNT(*) < 20)""",
    "q105": f"{_BID_COUNT}\nORDER BY bid_count DESC\nLIMIT 1000",
    "q106": f"SELECT MIN(final) AS min_final FROM (SELECT A.id, MAX(B.price) AS final {_IN_AUCTION} GROUP BY A.id) T",
}
