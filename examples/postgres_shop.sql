-- The PostgreSQL example of README.md (Connectors > PostgreSQL): orders read from PostgreSQL by change data
-- capture, per-customer totals written back to PostgreSQL and mirrored into a Delta table (lake/, relative to
-- the working directory). Prepare the server as the README says, then: sqlengine run examples/postgres_shop.sql
CREATE TABLE orders (id BIGINT NOT NULL PRIMARY KEY, customer BIGINT NOT NULL, amount DECIMAL(10,2)) WITH ('connectors' = '[
  {"name": "pg", "transport": {"name": "postgres_input", "config": {"uri": "postgresql://app@127.0.0.1:5432/shop", "table": "orders", "mode": "cdc"}}}]');
CREATE MATERIALIZED VIEW customer_totals WITH ('connectors' = '[
  {"transport": {"name": "postgres_output", "config": {"uri": "postgresql://app@127.0.0.1:5432/shop", "table": "customer_totals", "key": ["customer"]}}},
  {"transport": {"name": "delta_table_output", "config": {"uri": "lake/customer_totals", "mode": "mirror", "key": ["customer"]}}}]') AS
  SELECT customer, COUNT(*) AS n, SUM(amount) AS total FROM orders GROUP BY customer;
