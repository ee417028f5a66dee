"""Nested columns through files and lakes: Parquet files with LIST, MAP and STRUCT columns read by ``file_input``
(a ROW's fields matched by name, a MAP's keys in any order), then written as nested columns by a Delta sink
and an Iceberg sink in changelog mode.  Each sink's integrated rows equal the view's rows, which equal DuckDB's
recomputation over the files' rows."""
from __future__ import annotations

import json
from collections import Counter

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.support.oracle import bag, diff

SCHEMA = pa.schema([("id", pa.int64()), ("tags", pa.list_(pa.string())), ("attrs", pa.map_(pa.string(), pa.int64())),
                    ("cust", pa.struct([("tier", pa.int64()), ("name", pa.string())]))])   # (fields in another order)


def _files(root):
    rows = [[1, ["a", None], [("z", 1), ("a", 2)], {"tier": 1, "name": "x"}],
            [2, None, [], None],
            [3, [], [("a", 2), ("z", 1)], {"tier": None, "name": "y"}],
            [3, [], [("a", 2), ("z", 1)], {"tier": None, "name": "y"}]]
    (root / "in").mkdir()
    for i in range(2):
        part = rows[i * 2:(i + 1) * 2]
        pq.write_table(pa.Table.from_pylist([dict(zip(SCHEMA.names, r)) for r in part], schema=SCHEMA),
                       root / "in" / f"p{i}.parquet")
    return rows


def _integrated(t: pa.Table) -> Counter:
    out: Counter = Counter()
    weights = t.column("__weight").to_pylist()
    for r, w in zip(t.drop_columns(["__weight", "__step"]).to_pylist(), weights):
        out[next(iter(bag([tuple(r.values())])))] += w
    return Counter({k: v for k, v in out.items() if v})


def test_nested_parquet_in_delta_and_iceberg_out(tmp_path):
    pytest.importorskip("deltalake")
    pytest.importorskip("pyiceberg")
    import deltalake
    from pyiceberg.catalog import load_catalog

    from sqlengine import Pipeline
    rows = _files(tmp_path)
    src = [{"transport": {"name": "file_input", "config": {"path": str(tmp_path / "in")}}, "format": {"name": "parquet"}}]
    catalog = {"type": "sql", "uri": f"sqlite:///{tmp_path}/cat.db", "warehouse": f"file://{tmp_path}/wh"}
    sinks = [{"name": "delta", "transport": {"name": "delta_table_output", "config": {"uri": str(tmp_path / "delta")}}},
             {"name": "ice", "transport": {"name": "iceberg_output", "config": {"catalog": catalog, "table": "db.v"}}}]
    view = "SELECT id, tags, attrs, cust, cust.name AS name FROM o WHERE id > 1 OR attrs['z'] = 1"
    p = Pipeline.from_sql(
        f"CREATE TABLE o (id BIGINT, tags VARCHAR ARRAY, attrs MAP<VARCHAR, INT>, cust ROW(name VARCHAR, tier INT)) "
        f"WITH ('connectors' = '{json.dumps(src)}');\n"
        f"CREATE MATERIALIZED VIEW v WITH ('connectors' = '{json.dumps(sinks)}') AS {view};",
        storage_dir=str(tmp_path / "st"), spark_conf={"sqlengine.spark.start": "lazy"})
    p.start()
    try:
        p.wait_for_completion(timeout_s=120)
        con = duckdb.connect()
        con.execute("CREATE TABLE o (id BIGINT, tags VARCHAR[], attrs MAP(VARCHAR, INT), "
                    "cust STRUCT(name VARCHAR, tier INT))")
        for r in rows:
            con.execute("INSERT INTO o VALUES (?, ?, MAP(?, ?), ?)",
                        [r[0], r[1], [k for k, _ in sorted(r[2])], [v for _, v in sorted(r[2])],
                         None if r[3] is None else {"name": r[3]["name"], "tier": r[3]["tier"]}])
        want = bag(con.execute(view).fetchall())
        got = bag([tuple(r.values()) for r in p.query("SELECT * FROM v")])
        assert not diff(got, want), diff(got, want)
        assert not diff(_integrated(deltalake.DeltaTable(str(tmp_path / "delta")).to_pyarrow_table()), want)
        ice = load_catalog("default", **catalog).load_table("db.v").scan().to_arrow()
        assert not diff(_integrated(ice), want)
        assert pa.types.is_map(ice.schema.field("attrs").type) and pa.types.is_struct(ice.schema.field("cust").type)
    finally:
        p.stop()


def test_nested_avro_records_arrays_maps_and_unions():
    """Avro messages with a record, an array of records, a map and a union (int or string, into a VARIANT)
    decode into the table's nested columns, canonical (the map's keys sorted)."""
    import io

    fastavro = pytest.importorskip("fastavro")
    from connectors.base import Context
    from connectors.messages import AvroFormat, Batch, decoder
    from planner import compile_program
    from sqlengine.ingest import Errors
    t = compile_program("CREATE TABLE t (id BIGINT, cust ROW(name VARCHAR, tier INT), items ROW(sku VARCHAR, "
                        "qty INT) ARRAY, tags MAP<VARCHAR, VARCHAR>, u VARIANT)").tables["t"]
    item = {"type": "record", "name": "item", "fields": [{"name": "sku", "type": "string"},
                                                         {"name": "qty", "type": ["null", "int"]}]}
    schema = {"type": "record", "name": "order", "fields": [
        {"name": "id", "type": "long"},
        {"name": "cust", "type": ["null", {"type": "record", "name": "cust", "fields": [
            {"name": "name", "type": "string"}, {"name": "tier", "type": "int"}]}]},
        {"name": "items", "type": {"type": "array", "items": item}},
        {"name": "tags", "type": {"type": "map", "values": "string"}},
        {"name": "u", "type": ["int", "string"]}]}
    fmt = AvroFormat({"schema": json.dumps(schema), "update_format": "raw"}, Context("p", "", "t", "c"))
    parsed = fastavro.parse_schema(schema)
    records = [{"id": 1, "cust": {"name": "ann", "tier": 2}, "items": [{"sku": "a", "qty": None}],
                "tags": {"z": "1", "a": "2"}, "u": 5},
               {"id": 2, "cust": None, "items": [], "tags": {}, "u": "five"}]
    values = []
    for r in records:
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, parsed, r)
        values.append(buf.getvalue())
    errs = Errors("t", "dead_letter")
    rows = [r for chunk, _ in decoder(fmt, t)(Batch(values))(errs, 1000) for r in chunk.to_pylist()]
    assert not errs.bad
    assert rows == [{"c0": 1, "c1": {"name": "ann", "tier": 2}, "c2": [{"sku": "a", "qty": None}],
                     "c3": [("a", "2"), ("z", "1")], "c4": "5"},
                    {"c0": 2, "c1": None, "c2": [], "c3": [], "c4": '"five"'}]


def test_kafka_json_of_text_into_variant_and_uuid_columns_is_their_json_value():
    """A batch whose VARIANT values are all JSON strings, and UUIDs in upper case: the VARIANT holds the JSON
    text of the string ('"abc"', not 'abc') and the UUID its lower-case text, as from every other path (the
    vectorised reader, which takes a string as text, is not used for these columns)."""
    from connectors.messages import Batch, JsonDecoder
    from planner import compile_program
    from sqlengine.ingest import Errors
    t = compile_program("CREATE TABLE t (id INT, doc VARIANT, u UUID)").tables["t"]
    out = list(JsonDecoder(t, "raw")(Batch([b'{"id": 1, "doc": "abc", "u": "A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11"}',
                                              b'{"id": 2, "doc": "x"}']))(Errors("t"), 100))
    rows = [r for chunk in out for r in chunk[0].to_pylist()]
    assert rows == [{"c0": 1, "c1": '"abc"', "c2": "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"},
                    {"c0": 2, "c1": '"x"', "c2": None}]
