"""The Delta Lake connectors: ``delta_table_input`` following Delta tables written by the test (random inserts,
updates, deletes, merges and an overwrite, with the change data feed), views over them checked against DuckDB
recomputing them from the tables' current contents, and ``delta_table_output`` mirror and changelog tables
checked against the views; restarts (no version read twice, no step written twice); appends without a change
data feed; bad input and declaration errors."""
import json
import random
import time
from collections import Counter

import pyarrow as pa
import pytest

deltalake = pytest.importorskip("deltalake")
from deltalake import DeltaTable, write_deltalake  # noqa: E402

from connectors.base import Context  # noqa: E402
from connectors.delta_output import DeltaTableOutput  # noqa: E402
from planner.errors import ConnectorError, PermanentConnectorError  # noqa: E402
from sqlengine import Pipeline  # noqa: E402
from tests.support.oracle import Model, bag, diff  # noqa: E402

CDF = {"delta.enableChangeDataFeed": "true"}
T_SCHEMA = pa.schema([("id", pa.int64()), ("g", pa.string()), ("v", pa.int32())])
D_SCHEMA = pa.schema([("g", pa.string()), ("label", pa.string())])
SCHEMA = ("CREATE TABLE t (id BIGINT NOT NULL, g VARCHAR, v INT);\n"
          "CREATE TABLE d (g VARCHAR NOT NULL PRIMARY KEY, label VARCHAR)")
AGG = "SELECT g, COUNT(*) AS n, SUM(v) AS s FROM t GROUP BY g"
JOIN = "SELECT t.id, t.v, d.label FROM t JOIN d ON t.g = d.g"


def decl(*connectors) -> str:
    return json.dumps(list(connectors)).replace("'", "''")


def source(name, uri, **config):
    return {"name": name, "transport": {"name": "delta_table_input",
                                        "config": {"uri": uri, "poll_interval_ms": 50, **config}}}


def sink(name, uri, **config):
    return {"name": name, "transport": {"name": "delta_table_output", "config": {"uri": uri, **config}}}


def read(uri):
    """A Delta table's current rows, as tuples (read with delta-rs)."""
    t = pa.RecordBatchReader.from_stream(DeltaTable(uri).scan()).read_all()
    return [tuple(r.values()) for r in t.to_pylist()], t.column_names


def latest(uri) -> int:
    return DeltaTable(uri).version()


def wait_version(p, key, version, timeout=60):
    """Until the source ``key`` logged ``version``, and the pipeline processed and delivered it."""
    end = time.monotonic() + timeout
    while (p.status()["connectors"][key]["position"] or {}).get("version") != version:
        assert time.monotonic() < end, p.status()["connectors"][key]
        time.sleep(0.02)
    p.wait_for_idle(timeout_s=timeout)


def view_rows(p, view):
    return bag([tuple(r.values()) for r in p.query(f"SELECT * FROM {view}")])


def changelog_bag(uri):
    rows, names = read(uri)
    wi, si = names.index("__weight"), names.index("__step")
    c: Counter = Counter()
    for r in rows:
        c[tuple(x for i, x in enumerate(r) if i not in (wi, si))] += r[wi]
    return bag([k for k, n in c.items() for _ in range(n)]), rows, names


# ---------------------------------------------------------------------- the source tables' writer
class Writer:
    """Random versions of the Delta tables t (no key: duplicates, NULLs) and d (key g)."""

    def __init__(self, t_uri, d_uri, seed):
        self.t, self.d, self.r = t_uri, d_uri, random.Random(seed)

    def t_rows(self, n):
        r = self.r
        ids = [r.randrange(12) for _ in range(n)]
        return pa.table({"id": ids, "g": [r.choice(["a", "b", "c", None]) for _ in ids],
                         "v": pa.array([r.choice([None, 0, 1, 2, 5]) for _ in ids], pa.int32())}, schema=T_SCHEMA)

    def create(self):
        write_deltalake(self.t, self.t_rows(8), configuration=CDF)
        write_deltalake(self.d, pa.table({"g": ["a", "b"], "label": ["A", None]}, schema=D_SCHEMA), configuration=CDF)

    def step(self, op=None):
        """One new version of t or d (a random operation, else ``op``); returns the operation."""
        r = self.r
        op = op or r.choice(["append", "append", "delete", "update", "merge", "d_merge", "d_delete"])
        if op == "append":
            rows = self.t_rows(r.randrange(1, 6))
            if r.random() < 0.5:   # an exact duplicate of a row already there
                rows = pa.concat_tables([rows, rows.slice(0, 1)])
            write_deltalake(self.t, rows, mode="append")
        elif op == "overwrite":
            write_deltalake(self.t, self.t_rows(6), mode="overwrite")
        elif op == "delete":
            DeltaTable(self.t).delete(r.choice([f"id = {r.randrange(12)}", "v IS NULL", "g = 'b' AND id < 6"]))
        elif op == "update":
            DeltaTable(self.t).update(updates={"v": "v + 1", "g": r.choice(["'c'", "NULL", "g"])},
                                      predicate=f"id = {r.randrange(12)}")
        elif op == "merge":   # upsert by id (every row with a matching id is updated), new ids inserted
            src = self.t_rows(3).group_by("id").aggregate([("g", "max"), ("v", "max")]) \
                .rename_columns(["id", "g", "v"]).cast(T_SCHEMA)
            (DeltaTable(self.t).merge(src, "t.id = s.id", source_alias="s", target_alias="t")
             .when_matched_update_all().when_not_matched_insert_all().execute())
        elif op == "d_merge":
            g = r.choice(["a", "b", "c", "e"])
            src = pa.table({"g": [g], "label": [r.choice(["A", "B", None, "Z"])]}, schema=D_SCHEMA)
            (DeltaTable(self.d).merge(src, "t.g = s.g", source_alias="s", target_alias="t")
             .when_matched_update_all().when_not_matched_insert_all().execute())
        else:
            DeltaTable(self.d).delete(f"g = '{r.choice(['a', 'b', 'c'])}'")
        return op


def program(w, out):
    agg_sinks = [sink("mirror", f"{out}/agg_mirror", mode="mirror", key=["g"]), sink("log", f"{out}/agg_log")]
    join_sinks = [sink("mirror", f"{out}/join_mirror", mode="mirror")]   # no key: duplicate rows
    return (f"CREATE TABLE t (id BIGINT NOT NULL, g VARCHAR, v INT) "
            f"WITH ('connectors' = '{decl(source('src', w.t))}');\n"
            f"CREATE TABLE d (g VARCHAR NOT NULL PRIMARY KEY, label VARCHAR) "
            f"WITH ('connectors' = '{decl(source('src', w.d))}');\n"
            f"CREATE MATERIALIZED VIEW agg WITH ('connectors' = '{decl(*agg_sinks)}') AS {AGG};\n"
            f"CREATE MATERIALIZED VIEW j WITH ('connectors' = '{decl(*join_sinks)}') AS {JOIN};")


def check(p, w, out):
    """The views equal DuckDB over the source tables' current contents; the sinks' tables equal the views."""
    st = p.status()["connectors"]
    for key in ("t.src", "d.src", "agg.mirror", "agg.log", "j.mirror"):
        assert st[key]["errors"] == 0, st[key]
    model = Model(SCHEMA, {"t": ["id", "g", "v"], "d": ["g", "label"]})
    model.insert("t", read(w.t)[0])
    model.insert("d", read(w.d)[0])
    con = model.duck()
    for view, select in (("agg", AGG), ("j", JOIN)):
        expected = model.view(con, select)
        actual = view_rows(p, view)
        assert not diff(actual, expected), (view, diff(actual, expected))
        mirror = bag(read(f"{out}/{view if view == 'agg' else 'join'}_mirror")[0])
        assert not diff(mirror, expected), (view, "mirror", diff(mirror, expected))
    integrated, rows, names = changelog_bag(f"{out}/agg_log")
    assert not diff(integrated, model.view(con, AGG)), diff(integrated, model.view(con, AGG))
    # each step once: as many data commits as steps, and no row twice within a step (steps are consolidated)
    steps = {r[names.index("__step")] for r in rows}
    writes = [h for h in DeltaTable(f"{out}/agg_log").history() if h["operation"] == "WRITE"]
    assert len(writes) == len(steps), (len(writes), sorted(steps))
    assert max(Counter(rows).values()) == 1


def run_versions(p, w, out, n):
    ops = []
    for _ in range(n):
        op = w.step()
        ops.append(op)
        wait_version(p, "t.src", latest(w.t))
        wait_version(p, "d.src", latest(w.d))
        check(p, w, out)
    return ops


def test_round_trip_and_restart(make_pipeline, tmp_path):
    w = Writer(str(tmp_path / "t"), str(tmp_path / "d"), seed=7)
    w.create()
    out, store = str(tmp_path / "out"), str(tmp_path / "store")
    p = make_pipeline(program(w, out), storage_dir=store)
    wait_version(p, "t.src", 0)
    wait_version(p, "d.src", 0)
    check(p, w, out)
    ops = run_versions(p, w, out, 14)
    assert {"append", "delete", "update", "merge", "d_merge", "d_delete"} <= set(ops), ops
    w.step("overwrite")   # every row deleted, new ones inserted
    wait_version(p, "t.src", latest(w.t))
    check(p, w, out)
    versions = p.status()["connectors"]["t.src"]["batches"]
    p.stop()
    # while it is down: more versions of both tables (some rewrite rows)
    for _ in range(4):
        w.step()
    DeltaTable(w.t).update(updates={"v": "v + 10"}, predicate="id < 4")
    p = make_pipeline(program(w, out), storage_dir=store)
    wait_version(p, "t.src", latest(w.t))
    wait_version(p, "d.src", latest(w.d))
    check(p, w, out)
    # only the new versions were read, one batch each (check() saw every step written once)
    assert p.status()["connectors"]["t.src"]["batches"] == latest(w.t) - (versions - 1)
    run_versions(p, w, out, 3)


def sink_context(tmp_path, pipeline_id="p1"):
    return Context(pipeline="p", storage_dir=str(tmp_path), relation="v", connector="c",
                   columns=[("g", None), ("n", None)], materialized=True, pipeline_id=pipeline_id)


def direct_sink(tmp_path, uri, mode="mirror", pipeline_id="p1", **config):
    s = DeltaTableOutput({"uri": uri, "mode": mode, "key": None, "partition_by": None, **config}, None,
                         sink_context(tmp_path, pipeline_id))
    s.validate()
    return s


def changes(*rows):
    """(g, n, weight) rows as a sink's input."""
    return pa.table({"g": [r[0] for r in rows], "n": pa.array([r[1] for r in rows], pa.int64()),
                     "__weight": pa.array([r[2] for r in rows], pa.int64())})


# a view with duplicate rows: weights above 1, deletes of some of a row's copies, NULLs
SINK_STEPS = [[("a", 1, 2), (None, 2, 1)], [("a", 1, -1), ("b", 3, 3), (None, 2, 1)], [("a", 1, -1), (None, 2, -2)],
              [("b", 3, -2), ("a", 1, 1), ("c", None, 1)], [("c", None, -1), (None, 5, 2), ("b", 3, -1)]]


@pytest.mark.parametrize("mode, config", [("mirror", {}), ("mirror", {"partition_by": ["g"]}),
                                          ("changelog", {"partition_by": ["g"]})])
def test_sink_replayed_step_is_a_noop(tmp_path, mode, config):
    """The sink used directly: a step it holds has no effect, also for a new instance (reading it back from the
    table); a mirror without key keeps multiplicities; a changelog integrates to the view."""
    uri = str(tmp_path / "out")
    s = direct_sink(tmp_path, uri, mode, **config)
    assert s.open() == 0
    model = Counter()
    for step, rows in enumerate(SINK_STEPS, 1):
        s.write(step, changes(*rows))
        version = latest(uri)
        s.write(step, changes(*rows))   # replayed: nothing written
        assert latest(uri) == version
        for g, n, wt in rows:
            model[(g, n)] += wt
        got = bag(read(uri)[0]) if mode == "mirror" else changelog_bag(uri)[0]
        assert got == bag(list(model.elements())), step
        again = direct_sink(tmp_path, uri, mode, **config)   # a new instance reads the step back from the table
        assert again.open() == step
        again.write(step, changes(("zzz", 9, 1)))
        assert latest(uri) == version
    assert DeltaTable(uri).metadata().partition_columns == config.get("partition_by", [])


def test_sink_refuses_tables_it_must_not_write(tmp_path):
    uri = str(tmp_path / "m")
    s = direct_sink(tmp_path, uri)
    s.open()
    s.write(1, changes(("a", 1, 1)))
    with pytest.raises(ConnectorError, match=r"holds the output of another pipeline \(p1\)"):
        direct_sink(tmp_path, uri, pipeline_id="p2").open()
    # a changelog into a table that holds rows it did not write
    other = str(tmp_path / "log")
    write_deltalake(other, pa.table({"g": ["x"], "n": [1], "__weight": [1], "__step": [1]}))
    with pytest.raises(ConnectorError, match="holds rows this connector did not write"):
        direct_sink(tmp_path, other, "changelog").open()
    # a table with other columns
    with pytest.raises(ConnectorError, match="has the columns g, n, __weight, __step, not those of view v"):
        direct_sink(tmp_path, other).open()
    # a directory that is not a Delta table; a path that cannot be created
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "x.csv").write_text("1\n")
    with pytest.raises(ConnectorError, match="exists and is not a Delta table"):
        direct_sink(tmp_path, str(tmp_path / "plain")).open()
    s = direct_sink(tmp_path, str(tmp_path / "plain" / "x.csv" / "t"))
    assert s.open() == 0
    with pytest.raises(ConnectorError, match="cannot create the Delta table"):
        s.write(1, changes(("a", 1, 1)))


def test_mirror_by_key_rejects_duplicate_keys(tmp_path):
    s = direct_sink(tmp_path, str(tmp_path / "m"), key=["g"])
    s.open()
    s.write(1, pa.table({"g": ["a", None], "n": [1, 2], "__weight": [1, 1]}))
    s.write(2, pa.table({"g": ["a", "a", None, None], "n": [1, 5, 2, 3], "__weight": [-1, 1, -1, 1]}))
    assert sorted(read(str(tmp_path / "m"))[0], key=str) == [("a", 5), (None, 3)]
    with pytest.raises(ConnectorError, match="not unique"):
        s.write(3, pa.table({"g": ["b", "b"], "n": [1, 2], "__weight": [1, 1]}))


def test_appends_without_change_data_feed(make_pipeline, tmp_path):
    uri = str(tmp_path / "t")
    write_deltalake(uri, pa.table({"id": [1, 2], "g": ["a", "b"], "v": pa.array([1, 2], pa.int32())}, schema=T_SCHEMA))
    p = make_pipeline(f"CREATE TABLE t (id BIGINT NOT NULL, g VARCHAR, v INT) "
                      f"WITH ('connectors' = '{decl(source('src', uri))}');\nCREATE MATERIALIZED VIEW a AS {AGG};")
    wait_version(p, "t.src", 0)
    for i in range(3):
        write_deltalake(uri, pa.table({"id": [10 + i], "g": ["a"], "v": pa.array([i], pa.int32())}, schema=T_SCHEMA),
                        mode="append")
    DeltaTable(uri).optimize.compact()   # no data change: followed too
    wait_version(p, "t.src", latest(uri))
    assert view_rows(p, "a") == bag([("a", 4, 4), ("b", 1, 2)])
    DeltaTable(uri).delete("id = 1")
    end = time.monotonic() + 30
    while "change data feed" not in (p.status()["connectors"]["t.src"]["last_error"] or ""):
        assert time.monotonic() < end, p.status()["connectors"]["t.src"]
        time.sleep(0.05)
    st = p.status()
    assert "delta.enableChangeDataFeed" in st["connectors"]["t.src"]["last_error"]
    assert st["connectors"]["t.src"]["position"] == {"version": latest(uri) - 1}   # the delete is not skipped
    assert view_rows(p, "a") == bag([("a", 4, 4), ("b", 1, 2)])                   # the pipeline goes on
    p.input_json("t", [{"id": 99, "g": "z", "v": 1}])
    p.wait_for_idle(timeout_s=30)
    assert ("z", 1, 1) in view_rows(p, "a")


def test_follow_and_snapshot_modes(make_pipeline, tmp_path):
    """follow: only versions after the start (the latest at first open, logged before any change, so a restart
    does not move it); snapshot of an older version: its contents, then the connector finishes."""
    uri, store = str(tmp_path / "t"), str(tmp_path / "store")
    for i in range(3):   # versions 0, 1, 2
        write_deltalake(uri, pa.table({"id": [i], "g": ["x"], "v": pa.array([i], pa.int32())}, schema=T_SCHEMA),
                        mode="append")
    sql = (f"CREATE TABLE f (id BIGINT NOT NULL, g VARCHAR, v INT) "
           f"WITH ('connectors' = '{decl(source('src', uri, mode='follow'))}');\n"
           f"CREATE TABLE s (id BIGINT NOT NULL, g VARCHAR, v INT) "
           f"WITH ('connectors' = '{decl(source('src', uri, mode='snapshot', version=1))}');")
    p = make_pipeline(sql, storage_dir=store)
    wait_version(p, "f.src", 2)
    wait_version(p, "s.src", 1)
    assert p.status()["connectors"]["s.src"]["state"] == "finished"
    assert sorted(r["id"] for r in p.query("SELECT id FROM s")) == [0, 1]
    assert list(p.query("SELECT id FROM f")) == []
    p.stop()
    write_deltalake(uri, pa.table({"id": [3], "g": ["x"], "v": pa.array([3], pa.int32())}, schema=T_SCHEMA),
                    mode="append")
    p = make_pipeline(sql, storage_dir=store)
    wait_version(p, "f.src", 3)
    assert sorted(r["id"] for r in p.query("SELECT id FROM f")) == [3]
    assert sorted(r["id"] for r in p.query("SELECT id FROM s")) == [0, 1]
    assert p.status()["connectors"]["s.src"]["rows"] == 0


def test_missing_table_fails_until_a_restart(make_pipeline, tmp_path):
    uri = str(tmp_path / "later")
    p = make_pipeline(f"CREATE TABLE t (id BIGINT NOT NULL, g VARCHAR, v INT) "
                      f"WITH ('connectors' = '{decl(source('src', uri, mode='snapshot'))}');")
    end = time.monotonic() + 30
    while not p.status()["connectors"]["t.src"]["last_error"]:
        assert time.monotonic() < end
        time.sleep(0.05)
    err = p.status()["connectors"]["t.src"]["last_error"]
    assert "t.src" in err and "delta_table_input" in err and "does not exist" in err, err
    assert p.status()["connectors"]["t.src"]["state"] == "failed"   # permanent: not retried
    with pytest.raises(PermanentConnectorError, match="source src of table t .*does not exist"):
        p.wait_for_completion(timeout_s=60)
    write_deltalake(uri, pa.table({"id": [1, 2], "g": ["a", None], "v": pa.array([7, None], pa.int32())}))
    p.restart()   # a new run tries the failed source again
    p.wait_for_completion(timeout_s=60)
    assert sorted(tuple(r.values()) for r in p.query("SELECT * FROM t")) == [(1, "a", 7), (2, None, None)]


@pytest.mark.parametrize("columns, message", [
    ({"id": pa.array([1], pa.int64()), "g": pa.array([True])}, "column g is bool in the Delta table"),
    ({"g": pa.array(["x"])}, "has no column id, NOT NULL in table t"),
])
def test_incompatible_table(make_pipeline, tmp_path, columns, message):
    uri = str(tmp_path / "bad")
    write_deltalake(uri, pa.table(columns))
    p = make_pipeline(f"CREATE TABLE t (id BIGINT NOT NULL, g INT, v INT) "
                      f"WITH ('connectors' = '{decl(source('src', uri))}');")
    end = time.monotonic() + 30
    while not p.status()["connectors"]["t.src"]["last_error"]:
        assert time.monotonic() < end
        time.sleep(0.05)
    assert message in p.status()["connectors"]["t.src"]["last_error"]
    assert p.status()["connectors"]["t.src"]["rows"] == 0


def test_values_that_do_not_fit_go_to_the_dead_letter(make_pipeline, tmp_path):
    uri = str(tmp_path / "t")
    write_deltalake(uri, pa.table({"id": [1, 2, None], "g": ["a", "b", "c"], "v": [1, 5_000_000_000, 3],
                                   "extra": [1.5, 2.5, 3.5]}), configuration=CDF)
    p = make_pipeline(f"CREATE TABLE t (id BIGINT NOT NULL, g VARCHAR, v INT) "
                      f"WITH ('connectors' = '{decl(source('src', uri))}');")
    wait_version(p, "t.src", 0)
    assert [tuple(r.values()) for r in p.query("SELECT * FROM t")] == [(1, "a", 1)]
    assert p.status()["connectors"]["t.src"]["dead_letter_rows"] == 2


@pytest.mark.parametrize("sql, needle, message", [
    ("CREATE TABLE t (id INT) WITH ('connectors' = '{c}');",
     "versoin", 'unknown option "versoin" (did you mean "version"?)'),
    ("CREATE TABLE t (id INT) WITH ('connectors' = '{c}');", "mode", "must be one of 'snapshot_and_follow'"),
    ("CREATE TABLE t (id INT) WITH ('connectors' = '{c}');", "uri", "must be a local path or a file:// URI"),
    ("CREATE TABLE t (g INT);\nCREATE VIEW v WITH ('connectors' = '{c}') AS SELECT g FROM t;",
     "mode", "mirror mode needs a MATERIALIZED VIEW (v is not)"),
    ("CREATE TABLE t (g INT);\nCREATE MATERIALIZED VIEW v WITH ('connectors' = '{c}') AS SELECT g FROM t;",
     "key", 'key column "gg" is not a column of v (did you mean "g"?)'),
    ("CREATE TABLE t (g INT);\nCREATE MATERIALIZED VIEW v WITH ('connectors' = '{c}') AS SELECT g FROM t;",
     "key", '"key" is only used in mirror mode'),
    ("CREATE TABLE t (g INT);\nCREATE MATERIALIZED VIEW v WITH ('connectors' = '{c}') AS SELECT g FROM t;",
     "partition_by", 'partition_by column "x" is not a column of v'),
])
def test_declaration_errors(tmp_path, sql, needle, message):
    conns = {
        "versoin": source("s", "/x", versoin=1), "uri": source("s", "s3://bucket/x"),
        "mode": (source("s", "/x", mode="tail") if "TABLE t (id" in sql else sink("o", "/x", mode="mirror")),
        "key": (sink("o", "/x", key=["g"]) if "only used" in message else sink("o", "/x", mode="mirror", key=["gg"])),
        "partition_by": sink("o", "/x", partition_by=["x"]),
    }
    sql = sql.replace("{c}", decl(conns[needle]))
    with pytest.raises(ConnectorError) as info:
        Pipeline.from_sql(sql, storage_dir=str(tmp_path))
    err = info.value
    assert message in err.message, err.message
    line = sql.split("\n")[err.line - 1]
    assert err.column - 1 == line.index(f'"{needle}"'), (str(err), needle)
