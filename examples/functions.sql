-- User-defined functions: Python functions from examples/functions.py, and a SQL function.  Run it with:
--     sqlengine run examples/functions.sql --udfs examples/functions.py --exit-when-done
CREATE FUNCTION band(amount DECIMAL(10, 2)) RETURNS VARCHAR LANGUAGE PYTHON AS 'functions:band';
CREATE FUNCTION cents(amount DECIMAL(10, 2)) RETURNS BIGINT AS CAST(amount * 100 AS BIGINT);

CREATE TABLE orders (id BIGINT NOT NULL, region VARCHAR, amount DECIMAL(10, 2)) WITH ('connectors' = '[
  {"name": "gen", "transport": {"name": "datagen", "config": {"count": 20000, "seed": 7, "deletes": 0.05,
     "columns": {"id": {"sequence": {"start": 1}}, "region": {"choice": ["EU", "US", "APAC"]},
                 "amount": {"uniform": {"min": 1, "max": 500}}}}}}]');

CREATE MATERIALIZED VIEW by_band AS
SELECT region, band(amount) AS band, COUNT(*) AS orders, SUM(cents(amount)) AS cents,
       ROUND(SUM(with_vat(amount, region)), 2) AS gross, ROUND(geoavg(CAST(amount AS DOUBLE)), 4) AS geo_avg
FROM orders GROUP BY region, band(amount);
