"""Nested JSON end to end: order events on a Kafka topic (a real Kafka-protocol broker) with a customer ROW, an
ARRAY of item ROWs and a MAP of tags, inserted and deleted; a view that UNNESTs the items, revenue per product,
and a Parquet sink of a view with the nested columns.  After every round, the views and the sink's integrated
files equal DuckDB's recomputation over the same orders (bags with exact multiplicities).

The README's example (docs/sql-reference.md, "Nested data") is this program."""
from __future__ import annotations

import json
import random
import uuid
from collections import Counter
from decimal import Decimal

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from tests.connectors.test_kafka import LAZY, connectors, wait_position
from tests.support.oracle import bag, diff

TABLE = ("CREATE TABLE orders (id BIGINT, customer ROW(name VARCHAR, tier INT), "
         "items ROW(sku VARCHAR, qty INT, price DECIMAL(10, 2)) ARRAY, tags MAP<VARCHAR, VARCHAR>)")
DUCK_TABLE = ("CREATE TABLE orders (id BIGINT, customer STRUCT(name VARCHAR, tier INT), "
              "items STRUCT(sku VARCHAR, qty INT, price DECIMAL(10, 2))[], tags MAP(VARCHAR, VARCHAR))")
ARROW = pa.schema([("id", pa.int64()), ("customer", pa.struct([("name", pa.string()), ("tier", pa.int32())])),
                   ("items", pa.list_(pa.struct([("sku", pa.string()), ("qty", pa.int32()),
                                                 ("price", pa.decimal128(10, 2))]))),
                   ("tags", pa.map_(pa.string(), pa.string()))])
VIEWS = {
    "order_items": "SELECT o.id, o.customer.name AS customer, i.sku, i.qty, i.price FROM orders o "
                   "CROSS JOIN UNNEST(o.items) AS i(sku, qty, price)",
    "revenue": "SELECT sku, SUM(qty * price) AS revenue, COUNT(*) AS lines FROM order_items GROUP BY sku",
    "web_orders": "SELECT id, customer, items, tags FROM orders WHERE tags['channel'] = 'web'",
}
ORACLE = {
    "order_items": "SELECT o.id, o.customer.name, i.e.sku, i.e.qty, i.e.price FROM orders o "
                   "CROSS JOIN UNNEST(o.items) AS i(e)",
    "revenue": "SELECT i.e.sku, SUM(i.e.qty * i.e.price), COUNT(*) FROM orders o CROSS JOIN UNNEST(o.items) AS "
               "i(e) GROUP BY i.e.sku",
    "web_orders": "SELECT id, customer, items, tags FROM orders WHERE tags['channel'] = 'web'",
}


def _order(rng: random.Random, oid: int) -> dict:
    items = [{"sku": rng.choice(["apple", "pear", "fig"]), "qty": rng.choice([1, 2, None]),
              "price": rng.choice(["1.50", "2.25", "10.00"])} for _ in range(rng.randrange(0, 4))]
    tags = rng.choice([{}, {"channel": "web"}, {"channel": "shop", "promo": "x"}, {"promo": "y", "channel": "web"}])
    customer = rng.choice([None, {"name": "ann", "tier": 1}, {"name": "bo", "tier": None}])
    return {"id": oid, "customer": customer, "items": rng.choice([items, items, None]), "tags": tags}


def _arrow(orders) -> pa.Table:
    """The oracle's rows, built from the events by hand (map entries sorted, decimals exact)."""
    rows = [{**o, "items": None if o["items"] is None else
             [{**i, "price": Decimal(i["price"])} for i in o["items"]],
             "tags": sorted(o["tags"].items())} for o in orders]
    return pa.Table.from_pylist(rows, schema=ARROW)


def test_nested_order_events_from_kafka(broker, tmp_path):
    from sqlengine import Pipeline
    tin = f"orders-{uuid.uuid4().hex[:8]}"
    broker.create_topic(tin, 2)
    src = {"name": "kin", "transport": {"name": "kafka_input", "config": {"bootstrap.servers": broker.bootstrap,
                                                                           "topics": [tin]}},
           "format": {"name": "json", "config": {"update_format": "insert_delete"}}}
    out = tmp_path / "web"
    sink = {"name": "pq", "transport": {"name": "file_output", "config": {"path": str(out)}}}
    sql = (f"{TABLE} WITH ('connectors' = '{connectors(src)}');\n"
           f"CREATE MATERIALIZED VIEW order_items AS {VIEWS['order_items']};\n"
           f"CREATE MATERIALIZED VIEW revenue AS {VIEWS['revenue']};\n"
           f"CREATE MATERIALIZED VIEW web_orders WITH ('connectors' = '{connectors(sink)}') AS "
           f"{VIEWS['web_orders']};")
    p = Pipeline.from_sql(sql, storage_dir=str(tmp_path / "st"), spark_conf=LAZY)
    p.start()
    rng = random.Random(3)
    live, serial = [], 0
    producer = broker.producer()
    try:
        for rnd in range(4):
            messages = {0: [], 1: []}
            for _ in range(rng.randint(10, 25)):
                if live and rng.random() < 0.3:
                    gone = live.pop(rng.randrange(len(live)))
                    # the same order, its tags' keys in another order
                    event = {"delete": {**gone, "tags": dict(reversed(list(gone["tags"].items())))}}
                else:
                    serial += 1
                    order = _order(rng, serial % 7)   # ids repeat: duplicates of equal orders too
                    live.append(order)
                    event = {"insert": order}
                messages[rng.randrange(2)].append(json.dumps(event).encode())
            for part, values in messages.items():
                broker.produce(tin, values, partition=part, producer=producer)
            wait_position(p, "orders.kin", broker.end_offsets(tin))
            p.wait_for_idle(timeout_s=60)
            con = duckdb.connect()
            con.execute(DUCK_TABLE)
            rows = _arrow(live)   # noqa: F841 (read by DuckDB)
            con.execute("INSERT INTO orders SELECT * FROM rows")
            for name, q in ORACLE.items():
                want = bag(con.execute(q).fetchall())
                got = bag([tuple(r.values()) for r in p.query(f"SELECT * FROM {name}")])
                assert not diff(got, want), f"round {rnd}: view {name}: {diff(got, want)}"
            written = pq.read_table(out) if any(f.name.endswith(".parquet") for f in out.iterdir()) else None
            changes: Counter = Counter()
            if written is not None:
                weights = written.column("__weight").to_pylist()
                for r, w in zip(written.drop_columns(["__weight", "__step"]).to_pylist(), weights):
                    changes[tuple(bag([tuple(r.values())]))[0]] += w
            changes = Counter({k: v for k, v in changes.items() if v})
            want = bag(con.execute(ORACLE["web_orders"]).fetchall())
            assert not diff(changes, want), f"round {rnd}: the Parquet sink: {diff(changes, want)}"
            assert written is None or pa.types.is_list(written.schema.field("items").type)
            con.close()
    finally:
        p.stop()
