-- Nexmark Query 8: people who opened an account and an auction in the same tumbling window
-- Source: nexmark/nexmark q8.sql (Apache-2.0)
-- Adapted: TUMBLE(table, date_time, size) table function; 10 s windows
-- Deterministic: yes
CREATE VIEW q08 AS
SELECT P.id, P.name, P.starttime
FROM (
    SELECT id, name, window_start AS starttime, window_end AS endtime
    FROM TUMBLE(person, date_time, INTERVAL '10' SECOND)
    GROUP BY id, name, window_start, window_end
) P
JOIN (
    SELECT seller, window_start AS starttime, window_end AS endtime
    FROM TUMBLE(auction, date_time, INTERVAL '10' SECOND)
    GROUP BY seller, window_start, window_end
) A
ON P.id = A.seller AND P.starttime = A.starttime AND P.endtime = A.endtime
