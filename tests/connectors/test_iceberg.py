"""The ``iceberg_output`` sink on a real Iceberg table (a SQL catalog on SQLite, a local warehouse).

Random inserts and deletes (NULLs, duplicate rows) feed a join-aggregate, a GROUP BY with a NULL group and
a projection with duplicate rows; after every round each view is checked against DuckDB recomputing it
from scratch, each apply table against the view (as a multiset), each changelog table integrated against
the view, and the tables' metadata history for one catalog commit per step.  Then: restarts (nothing
doubled or lost, a dropped apply table seeded from the view), replayed steps, another pipeline's table,
declaration errors, and an unwritable warehouse (the sink retries, the pipeline goes on).
"""
import datetime as dt
import decimal
import json
import math
import os
import random
import re
import time
from collections import Counter

import pandas as pd
import pyarrow as pa
import pytest

from connectors.base import Context, check_options
from connectors.iceberg_output import IcebergOutput
from planner.errors import ConnectorError
from sqlengine import Pipeline
from tests.support.oracle import Model, bag, bag_from_changes, diff

pytest.importorskip("pyiceberg")   # the "iceberg" extra
pytest.importorskip("sqlalchemy")
from pyiceberg.catalog import load_catalog  # noqa: E402
from pyiceberg.exceptions import NoSuchTableError  # noqa: E402

D = decimal.Decimal
SCHEMA = ("CREATE TABLE t (id INT, g VARCHAR, v INT, d DECIMAL(10,2), ts TIMESTAMP, dt DATE, b BOOLEAN);\n"
          "CREATE TABLE u (g VARCHAR, label VARCHAR);")
COLUMNS = {"t": ["id", "g", "v", "d", "ts", "dt", "b"], "u": ["g", "label"]}
VIEWS = {
    "agg": "SELECT t.g, u.label, COUNT(*) AS n, SUM(t.v) AS s, SUM(t.d) AS sd, MAX(t.ts) AS mts, MIN(t.dt) AS mdt "
           "FROM t JOIN u ON t.g = u.g GROUP BY t.g, u.label",
    "grp": "SELECT g, COUNT(*) AS n, COUNT(v) AS nv, SUM(d) AS sd, MIN(ts) AS mts FROM t GROUP BY g",
    "dup": "SELECT g, v, d, ts, dt, b, CAST(v AS DOUBLE) / 4 AS q FROM t",
}
# (view, sink name, mode, key)
SINKS = [("agg", "apply", "apply", ["g", "label"]), ("agg", "log", "changelog", None),
         ("grp", "apply", "apply", ["g"]), ("dup", "apply", "apply", None), ("dup", "log", "changelog", None)]


def catalog_props(root):
    os.makedirs(root, exist_ok=True)   # SQLite creates the file, not its directory
    return {"type": "sql", "uri": f"sqlite:///{root}/catalog.db", "warehouse": f"file://{root}/warehouse"}


def decl(*connectors) -> str:
    return json.dumps(list(connectors)).replace("'", "''")


def sink(name, catalog, table, mode="changelog", key=None, **more):
    config = {"catalog": catalog, "table": table, "mode": mode, **more}
    if key is not None:
        config["key"] = key
    return {"name": name, "transport": {"name": "iceberg_output", "config": config}}


def program(catalog):
    out = [SCHEMA]
    for v, select in VIEWS.items():
        conns = [sink(n, catalog, f"ns.{v}_{n}", mode, key) for view, n, mode, key in SINKS if view == v]
        out.append(f"CREATE MATERIALIZED VIEW {v} WITH ('connectors' = '{decl(*conns)}') AS {select};")
    return "\n".join(out)


# ------------------------------------------------------------------ random changes
G = [None, "a", "b", "c"]
VALUES = dict(id=[1, 2, 3, 4], g=G, v=[None, -3, 0, 2, 5], d=[None, D("1.25"), D("-0.50"), D("10.00")],
              ts=[None, dt.datetime(2024, 1, 1, 12, 0, 0, 123456), dt.datetime(1999, 12, 31, 23, 59, 59)],
              dt=[None, dt.date(2024, 2, 29), dt.date(1970, 1, 1)], b=[None, True, False])


def random_round(rng, model):
    """[(table, delete?, rows)]: inserts (some twice), deletes of existing rows and of absent ones."""
    out = []
    rows = [tuple(rng.choice(VALUES[c]) for c in COLUMNS["t"]) for _ in range(rng.randint(1, 6))]
    rows += rng.sample(rows, k=min(len(rows), rng.randint(0, 2)))   # duplicates within the batch
    out.append(("t", False, rows))
    if rng.random() < 0.7:
        out.append(("u", False, [(rng.choice(G), rng.choice(["x", "y", None])) for _ in range(rng.randint(1, 2))]))
    for table in ("t", "u"):
        existing = sorted(model.rows[table].elements(), key=repr)
        if existing and rng.random() < 0.8:
            gone = rng.sample(existing, k=min(len(existing), rng.randint(1, 4)))
            if table == "t" and rng.random() < 0.3:
                gone.append((99, "zz", 1, None, None, None, None))   # not there: a no-op
            out.append((table, True, gone))
    return out


def push(p, model, ops):
    for table, delete, rows in ops:
        df = pd.DataFrame([list(r) for r in rows], columns=COLUMNS[table], dtype=object)
        p.input_pandas(table, df, delete=delete)
        (model.delete if delete else model.insert)(table, rows)


# ------------------------------------------------------------------ checks
def table_of(catalog, name):
    return load_catalog("default", **catalog).load_table(name)


def commits(table):
    """[(sqlengine.step property, steps of the snapshots it added)] for each metadata version, in order."""
    log = [e.metadata_file for e in table.metadata.metadata_log] + [table.metadata_location]
    assert len(log) < 100, "write.metadata.previous-versions-max would cut the history short"
    paths = [x.replace("file://", "") for x in log]
    out, seen = [], set()
    for path in paths:
        with open(path) as f:
            m = json.load(f)
        added = [s for s in m.get("snapshots", []) if s["snapshot-id"] not in seen]
        seen |= {s["snapshot-id"] for s in added}
        out.append((int(m["properties"].get("sqlengine.step", 0)),
                    {int(s["summary"].get("sqlengine.step", 0)) for s in added}))
    return out


def check_one_commit_per_step(table):
    history = [c for c in commits(table) if c[0]]   # versions before the sink's first commit have no step
    steps = [s for s, _ in history]
    assert steps == sorted(set(steps)), f"a step committed twice or out of order: {steps}"
    for step, added in history:
        assert added <= {step}, f"commit of step {step} added snapshots of steps {added}"


def pipeline_id(p):
    with open(os.path.join(p.storage_dir, "pipeline_id")) as f:
        return f.read().strip()


def check(p, model, catalog):
    p.wait_for_idle(timeout_s=60)
    st = p.status()["connectors"]
    con = model.duck()
    for v, select in VIEWS.items():
        expected = model.view(con, select)
        actual = bag([tuple(r.values()) for r in p.query(f"SELECT * FROM {v}")])
        assert not diff(actual, expected), (v, diff(actual, expected))
        for view, n, mode, _ in SINKS:
            if view != v:
                continue
            s = st[f"{v}.{n}"]
            assert s["state"] == "running" and s["lag"] == 0, (s["state"], s["last_error"])
            try:
                table = table_of(catalog, f"ns.{v}_{n}")
            except NoSuchTableError:   # the view never changed yet: no table
                assert not expected and s["position"]["step"] == 0, s
                continue
            assert int(table.properties["sqlengine.step"]) == s["position"]["step"]
            assert table.properties["sqlengine.pipeline"] == pipeline_id(p)
            data = table.scan().to_arrow()
            if mode == "apply":
                got = bag([tuple(r.values()) for r in data.to_pylist()])
                assert not diff(got, expected), (v, n, diff(got, expected))
            else:
                df = data.to_pandas()
                got = bag_from_changes(df.drop(columns=["__step"]))
                assert not diff(got, expected), (v, n, diff(got, expected))
                snaps = [int(x.summary.additional_properties["sqlengine.step"]) for x in table.snapshots()]
                assert len(snaps) == len(set(snaps)), f"a step appended twice: {snaps}"
                per_step = Counter(int(x) for x in df["__step"])
                assert set(per_step) == set(snaps)
                for x in table.snapshots():
                    step = int(x.summary.additional_properties["sqlengine.step"])
                    assert int(x.summary.additional_properties["added-records"]) == per_step[step]
            check_one_commit_per_step(table)


def test_views_and_tables_agree_step_by_step(make_pipeline, tmp_path):
    catalog = catalog_props(tmp_path / "ice")
    p = make_pipeline(program(catalog))
    model = Model(SCHEMA, COLUMNS)
    rng = random.Random(11)
    before, seen = Counter(), set()
    for _ in range(7):
        push(p, model, random_round(rng, model))
        check(p, model, catalog)
        now = model.view(model.duck(), VIEWS["dup"])
        seen |= {"duplicates" for n in now.values() if n > 1}
        seen |= {"one copy of several deleted" for r, n in before.items() if n > now[r] > 0}
        seen |= {"NULL group" for r in model.view(model.duck(), VIEWS["grp"]) if r[0] is None}
        before = now
    assert seen == {"duplicates", "one copy of several deleted", "NULL group"}   # the rounds covered them
    # types round-trip: Iceberg's own types, and the values the view holds
    dup = table_of(catalog, "ns.dup_apply").schema()
    assert [(f.name, str(f.field_type), f.required) for f in dup.fields] == [
        ("g", "string", False), ("v", "int", False), ("d", "decimal(10, 2)", False), ("ts", "timestamp", False),
        ("dt", "date", False), ("b", "boolean", False), ("q", "double", False)]
    log = table_of(catalog, "ns.agg_log").schema()
    assert [(f.name, str(f.field_type)) for f in log.fields][-2:] == [("__weight", "long"), ("__step", "long")]


def test_restart_neither_doubles_nor_loses(make_pipeline, tmp_path):
    catalog = catalog_props(tmp_path / "ice")
    store = str(tmp_path / "store")
    model = Model(SCHEMA, COLUMNS)
    rng = random.Random(5)
    p = make_pipeline(program(catalog), storage_dir=store)
    for _ in range(3):
        push(p, model, random_round(rng, model))
    check(p, model, catalog)
    p.stop()
    # input while it is down, then a restart on the same storage
    p = make_pipeline(program(catalog), storage_dir=store, start=False)
    for _ in range(2):
        push(p, model, random_round(rng, model))
    p.start()
    check(p, model, catalog)
    push(p, model, random_round(rng, model))
    check(p, model, catalog)
    p.stop()
    # an apply table dropped while the pipeline is down: seeded from the view's contents on start
    load_catalog("default", **catalog).drop_table("ns.grp_apply")
    p = make_pipeline(program(catalog), storage_dir=store)
    check(p, model, catalog)
    table = table_of(catalog, "ns.grp_apply")
    assert len(commits(table)) == 1 and table.properties["sqlengine.step"] == str(p.status()["step"])
    push(p, model, random_round(rng, model))
    check(p, model, catalog)


# ------------------------------------------------------------------ the sink object itself
def make_sink(catalog, table, mode="apply", key=None, columns=("g", "x"), pipeline_id="pipe-1", connector="ice",
              **more):
    config = {"catalog": catalog, "table": table, "mode": mode, **more}
    if key is not None:
        config["key"] = key
    ctx = Context(pipeline="p", storage_dir="/unused", relation="v", connector=connector,
                  columns=[(c, None) for c in columns], materialized=True, pipeline_id=pipeline_id)
    s = IcebergOutput(check_options("transport iceberg_output", IcebergOutput.OPTIONS, config, ctx.where), None, ctx)
    s.validate()
    return s


def changes(rows):
    g, x, w = zip(*rows) if rows else ((), (), ())
    return pa.table({"g": pa.array(g, pa.string()), "x": pa.array(x, pa.decimal128(10, 2)),
                     "__weight": pa.array(w, pa.int64())})


def rows_of(table):
    return Counter(tuple(r.values()) for r in table.refresh().scan().to_arrow().to_pylist())


@pytest.mark.parametrize("mode, key", [("apply", None), ("apply", ["g"]), ("changelog", None)])
def test_replayed_steps_are_no_ops(tmp_path, mode, key):
    catalog = catalog_props(tmp_path)
    s = make_sink(catalog, "ns.t", mode, key, properties={"write.parquet.compression-codec": "gzip"})
    assert s.open() == 0
    s.write(1, changes([("a", D("1"), 3), (None, None, 2), ("b", D("2"), 1)]))
    s.write(2, changes([("a", D("1"), -2), (None, None, -1), ("b", D("2"), -1), ("b", D("3"), 1)]))
    assert s.table.properties["write.parquet.compression-codec"] == "gzip"   # set when it created the table
    before = rows_of(s.table)
    versions = len(commits(s.table))
    s.write(2, changes([("zz", D("9"), 5)]))          # the same step again, on the same object
    s.write(1, changes([("zz", D("9"), 5)]))
    assert rows_of(s.table) == before and len(commits(s.table)) == versions == 2
    s.close()
    s = make_sink(catalog, "ns.t", mode, key)          # as after a crash: read back, then the step again
    assert s.open() == 2
    s.write(2, changes([("zz", D("9"), 5)]))
    assert rows_of(s.table) == before
    s.write(3, changes([("a", D("1"), 1)]))
    if mode == "apply":
        assert rows_of(s.table) == Counter({("a", D("1.00")): 2, (None, None): 1, ("b", D("3.00")): 1})
        s.seed(3, changes([("q", D("0"), 1)]))   # a seed of a step it holds: nothing
        assert rows_of(s.table)[("q", D("0.00"))] == 0
    else:
        assert len(rows_of(s.table)) == 8
    check_one_commit_per_step(s.table)
    s.close()


def test_a_table_without_steps_is_replaced_in_one_commit(tmp_path):
    """A table that holds no step of the sink (made by someone else): the seed, or in a pipeline that never
    ran, the first step, replaces its rows."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import DecimalType, NestedField, StringType
    catalog = catalog_props(tmp_path)
    cat = load_catalog("default", **catalog)
    cat.create_namespace("ns")
    schema = Schema(NestedField(1, "g", StringType(), required=False),
                    NestedField(2, "x", DecimalType(12, 2), required=False))   # wider: values promote
    for name in ("ns.seeded", "ns.first"):
        cat.create_table(name, schema).append(pa.table({"g": ["old", "b"], "x": pa.array([D("1"), D("2")],
                                                                                       pa.decimal128(12, 2))}))
    s = make_sink(catalog, "ns.seeded", "apply")
    assert s.open() == 0
    s.seed(7, changes([("b", D("2"), 1), ("c", None, 3)]))
    assert rows_of(s.table) == Counter({("b", D("2.00")): 1, ("c", None): 3})
    assert s.table.properties["sqlengine.step"] == "7" and len(commits(s.table)) == 3
    s.write(8, changes([("c", None, -2), ("b", D("2"), 1)]))
    assert rows_of(s.table) == Counter({("b", D("2.00")): 2, ("c", None): 1})
    s.close()
    s = make_sink(catalog, "ns.first", "apply", key=["x"])
    assert s.open() == 0
    s.write(1, changes([("a", D("5"), 2)]))
    assert rows_of(s.table) == Counter({("a", D("5.00")): 2})
    s.close()


@pytest.mark.parametrize("key", [None, ["g"]])
def test_apply_counts_copies_with_non_unique_keys_nan_and_signed_zero(tmp_path, key):
    """Rows that share a key, or are equal, are counted; REAL/DOUBLE values (NaN, -0.0) stay out of filters."""
    catalog = catalog_props(tmp_path)
    s = make_sink(catalog, "ns.t", "apply", key, columns=("g", "f"))
    nan = float("nan")

    def ch(rows):
        g, f, w = zip(*rows)
        return pa.table({"g": pa.array(g, pa.string()), "f": pa.array(f, pa.float64()), "__weight": pa.array(w)})

    def contents():
        return Counter((g, "nan" if f != f else (f, math.copysign(1, f))) for g, f in rows_of(s.table).elements())

    s.open()
    s.write(1, ch([("a", nan, 2), ("a", -0.0, 1), ("a", 0.0, 1), ("a", 1.5, 3), ("b", 1.5, 1), (None, nan, 1)]))
    s.write(2, ch([("a", nan, -1), ("a", 0.0, -1), ("a", 1.5, -1), (None, nan, 1), ("b", 2.5, 1)]))
    assert contents() == Counter({("a", "nan"): 1, ("a", (0.0, -1.0)): 1, ("a", (1.5, 1.0)): 2,
                                  ("b", (1.5, 1.0)): 1, ("b", (2.5, 1.0)): 1, (None, "nan"): 2})
    s.write(3, ch([("a", -0.0, -1), (None, nan, -2), ("b", 1.5, -1)]))
    assert contents() == Counter({("a", "nan"): 1, ("a", (1.5, 1.0)): 2, ("b", (2.5, 1.0)): 1})
    check_one_commit_per_step(s.table)
    s.close()


def test_a_table_of_another_pipeline_or_sink_is_refused(tmp_path):
    catalog = catalog_props(tmp_path)
    s = make_sink(catalog, "ns.t", "changelog", pipeline_id="pipe-1")
    s.open()
    s.write(1, changes([("a", D("1"), 1)]))
    s.close()
    with pytest.raises(ConnectorError, match="holds the output of another pipeline"):
        make_sink(catalog, "ns.t", "changelog", pipeline_id="pipe-2").open()
    with pytest.raises(ConnectorError, match="holds the output of sink v.ice of this pipeline"):
        make_sink(catalog, "ns.t", "changelog", connector="other").open()
    with pytest.raises(ConnectorError, match=r"apply mode writes g, x \(not in the view: __weight, __step\)"):
        make_sink(catalog, "ns.t", "apply").open()


def test_unreachable_catalog_is_a_connector_error(tmp_path):
    catalog = {"type": "sql", "uri": f"sqlite:///{tmp_path}/no/such/dir/catalog.db", "warehouse": f"file://{tmp_path}"}
    with pytest.raises(ConnectorError, match="iceberg_output: cannot open catalog 'default': OperationalError"):
        make_sink(catalog, "ns.t").open()


def test_unwritable_warehouse_is_retried_while_the_pipeline_runs(make_pipeline, tmp_path):
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where the warehouse's directory should be")
    catalog = {"type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db", "warehouse": f"file://{blocker}/wh"}
    sql = (f"{SCHEMA}\nCREATE MATERIALIZED VIEW grp WITH ('connectors' = "
           f"'{decl(sink('ice', catalog, 'ns.grp', 'apply', ['g']))}') AS {VIEWS['grp']};")
    p = make_pipeline(sql)
    model = Model(SCHEMA, COLUMNS)
    push(p, model, random_round(random.Random(1), model))
    end = time.monotonic() + 30
    while p.status()["connectors"]["grp.ice"]["state"] != "retrying":
        assert time.monotonic() < end, p.status()["connectors"]["grp.ice"]
        time.sleep(0.05)
    st = p.status()
    err = st["connectors"]["grp.ice"]["last_error"]
    # the first attempt writes the first step (the round may take more than one step when the pipeline wakes
    # between its inserts); a retry after it reopens the sink, which holds nothing yet, so the engine seeds it
    # with the view's contents instead
    assert re.match(r"connector grp\.ice \(iceberg_output\): iceberg_output: cannot (write step \d+ to|seed) table "
                    r"ns\.grp.*: NotADirectoryError", err), err
    assert st["state"] == "running"
    push(p, model, random_round(random.Random(2), model))   # the pipeline goes on meanwhile
    p.wait_for_idle(timeout_s=30)
    assert bag([tuple(r.values()) for r in p.query("SELECT * FROM grp")]) == model.view(model.duck(), VIEWS["grp"])
    blocker.unlink()   # the warehouse becomes writable: the sink catches up
    end = time.monotonic() + 30
    while (p.status()["connectors"]["grp.ice"]["state"], p.status()["connectors"]["grp.ice"]["lag"]) != ("running", 0):
        assert time.monotonic() < end, p.status()["connectors"]["grp.ice"]
        time.sleep(0.05)
    p.wait_for_idle(timeout_s=30)
    got = bag([tuple(r.values()) for r in table_of(catalog, "ns.grp").scan().to_arrow().to_pylist()])
    assert not diff(got, model.view(model.duck(), VIEWS["grp"]))
    assert p.status()["connectors"]["grp.ice"]["errors"] >= 1


# ------------------------------------------------------------------ declaration errors
CAT = {"type": "sql", "uri": "sqlite:////tmp/x/catalog.db", "warehouse": "file:///tmp/x/wh"}


@pytest.mark.parametrize("config, materialized, needle, message", [
    ({"catalog": CAT, "tabel": "ns.v"}, True, "tabel", 'unknown option "tabel" (did you mean "table"?)'),
    ({"catalog": CAT, "table": "ns.v", "mode": "apply"}, False, "mode",
     "apply mode needs a MATERIALIZED VIEW (v is not)"),
    ({"catalog": CAT, "table": "ns.v", "mode": "apply", "key": ["gg"]}, True, "key",
     "key column 'gg' is not a column of v (did you mean \"g\"?). Columns: g, n"),
    ({"catalog": CAT, "table": "ns.v", "key": ["g"]}, True, "key", '"key" is for apply mode'),
    ({"catalog": CAT, "table": "v"}, True, "table", '"table" must be "namespace.table", not \'v\''),
    ({"catalog": CAT, "table": "ns.v", "mode": "upsert"}, True, "mode",
     "option \"mode\" must be one of 'changelog', 'apply', not 'upsert'"),
    ({"catalog": {"uri": {"nested": 1}}, "table": "ns.v"}, True, "catalog", 'catalog property "uri" must be'),
    ({"table": "ns.v"}, True, None, 'option "catalog" is required'),
    ({"catalog": CAT, "table": "ns.v", "properties": {"sqlengine.step": "9"}}, True, "properties",
     'names starting with "sqlengine." are the sink\'s own'),
])
def test_declaration_errors(tmp_path, config, materialized, needle, message):
    conn = {"name": "ice", "transport": {"name": "iceberg_output", "config": config}}
    sql = (f"CREATE TABLE t (g VARCHAR);\nCREATE {'MATERIALIZED ' if materialized else ''}VIEW v "
           f"WITH ('connectors' = '{decl(conn)}') AS SELECT g, COUNT(*) AS n FROM t GROUP BY g;")
    with pytest.raises(ConnectorError) as info:
        Pipeline.from_sql(sql, storage_dir=str(tmp_path))
    err = info.value
    assert message in err.message, err.message
    assert err.line == 2
    if needle is not None:
        assert err.column - 1 == sql.split("\n")[1].index(f'"{needle}"'), (str(err), needle)
