-- Nexmark tables as streams: the nexmark schema with LATENESS INTERVAL 4 SECONDS on every date_time
-- (Feldera's spelling; Flink's is WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND).
-- Columns follow the Flink Nexmark suite (nexmark/nexmark, ddl_views.sql) with
-- the event-time column named date_time instead of `dateTime`, as in Feldera's
-- and RisingWave's Nexmark SQL, so that no identifier needs quoting.
-- Types: BIGINT / VARCHAR / TIMESTAMP (millisecond values).  Spark SQL users:
-- VARCHAR without a length is not accepted in Spark DDL; map it to STRING.

CREATE TABLE person (
    id            BIGINT,
    name          VARCHAR,
    emailAddress  VARCHAR,
    creditCard    VARCHAR,
    city          VARCHAR,
    state         VARCHAR,
    date_time     TIMESTAMP LATENESS INTERVAL 4 SECONDS,
    extra         VARCHAR
);

CREATE TABLE auction (
    id            BIGINT,
    itemName      VARCHAR,
    description   VARCHAR,
    initialBid    BIGINT,
    reserve       BIGINT,
    date_time     TIMESTAMP LATENESS INTERVAL 4 SECONDS,
    expires       TIMESTAMP,
    seller        BIGINT,
    category      BIGINT,
    extra         VARCHAR
);

CREATE TABLE bid (
    auction       BIGINT,
    bidder        BIGINT,
    price         BIGINT,
    channel       VARCHAR,
    url           VARCHAR,
    date_time     TIMESTAMP LATENESS INTERVAL 4 SECONDS,
    extra         VARCHAR
);
