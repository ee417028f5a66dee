-- A pipeline that needs no outside system: generated orders (with deletes) and customers,
-- views kept up to date incrementally, and file sinks.  Run it with:
--     sqlengine run examples/shop.sql --exit-when-done
-- then query what it left:  sqlengine query examples/shop.storage "SELECT * FROM revenue_by_region"

CREATE TABLE customers (id INT NOT NULL, region VARCHAR, tier VARCHAR) WITH ('connectors' = '[
  {"name": "gen", "transport": {"name": "datagen", "config": {"count": 1000, "seed": 2, "columns": {
     "id": {"sequence": {"start": 1}},
     "region": {"choice": ["EU", "US", "APAC", "LATAM"]},
     "tier": {"choice": ["free", "pro", "enterprise"]}}}}}]');

CREATE TABLE orders (id BIGINT NOT NULL, customer INT, amount DECIMAL(10, 2), status VARCHAR, ts TIMESTAMP)
WITH ('connectors' = '[
  {"name": "gen", "transport": {"name": "datagen", "config": {"count": 300000, "rate": 50000, "seed": 1,
     "deletes": 0.05, "batch_rows": 5000, "columns": {
     "id": {"sequence": {"start": 1}},
     "customer": {"zipf": {"n": 1000, "s": 1.1}},
     "amount": {"uniform": {"min": 1, "max": 500}, "null_fraction": 0.01},
     "status": {"choice": ["new", "paid", "shipped", "returned"]},
     "ts": {"timestamp": {"start": "2024-01-01 00:00:00", "rate": 100}}}}}}]');

CREATE MATERIALIZED VIEW revenue_by_region
WITH ('connectors' = '[
  {"name": "snapshot", "transport": {"name": "file_output", "config": {"path": "out/revenue_by_region", "mode": "snapshot"}},
   "format": {"name": "csv"}}]') AS
SELECT c.region, o.status, COUNT(*) AS orders, SUM(o.amount) AS revenue
FROM orders o JOIN customers c ON o.customer = c.id
GROUP BY c.region, o.status;

CREATE MATERIALIZED VIEW top_customers
WITH ('connectors' = '[
  {"name": "changes", "transport": {"name": "file_output", "config": {"path": "out/top_customers"}}}]') AS
SELECT customer, revenue FROM (
  SELECT customer, revenue, ROW_NUMBER() OVER (ORDER BY revenue DESC, customer) AS rn
  FROM (SELECT customer, SUM(amount) AS revenue FROM orders WHERE status <> 'returned' GROUP BY customer) g) r
WHERE rn <= 5;

CREATE MATERIALIZED VIEW orders_per_minute AS
SELECT window_start, COUNT(*) AS orders
FROM TUMBLE(orders, ts, INTERVAL '1' MINUTE)
GROUP BY window_start;
