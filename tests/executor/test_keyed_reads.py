"""Spark steps read only the state rows of the change's keys (sqlengine.executor.keyed_reads).

Runs are written sorted by their sort column in small row groups, and a Spark step's state reads are
filtered by the values of the change's keys, pushed into the parquet reader.  The differential test runs
with tiny row groups (so every run is sorted and has many groups) and the driver's state cache off (so
Spark reads every state from parquet), under inserts, deletes, duplicates and NULL keys, and compares every
view with DuckDB after every round.
"""
import pandas as pd
import pyarrow.parquet as pq
import pytest

from planner import compile_program
from sqlengine.executor import keyed_reads
from sqlengine.executor.derived import derivation
from sqlengine.executor.placement import Placement
from sqlengine.state import store

from ..support.oracle import Model, bag_from_changes, check_views, churn_rounds, diff, feed, materialized

MAX_KEYS = Placement().max_keys   # distinct probe values up to which a read is narrowed by key, by default

SCHEMA = ("CREATE TABLE t (id BIGINT, k INT, v INT, s VARCHAR); CREATE TABLE u (k INT, w VARCHAR);"
          "CREATE TABLE p (id INT NOT NULL PRIMARY KEY, k INT, x INT);")
COLUMNS = {"t": ["id", "k", "v", "s"], "u": ["k", "w"], "p": ["id", "k", "x"]}
VIEWS = {
    "g": "SELECT s, COUNT(*) AS n, SUM(v) AS sv FROM t GROUP BY s",
    "ja": "SELECT u.w, COUNT(*) AS n, SUM(t.v) AS sv FROM t JOIN u ON t.k = u.k GROUP BY u.w",
    "lj": "SELECT t.id, t.k, u.w FROM t LEFT JOIN u ON t.k = u.k",
    "mx": "SELECT k, MAX(v) AS m, MIN(s) AS ms FROM t GROUP BY k",
    "dk": "SELECT DISTINCT k, s FROM t",
    "pk": "SELECT p.k, SUM(p.x) AS sx FROM p GROUP BY p.k",
}
SQL = materialized(SCHEMA, VIEWS)


def rounds(seed, n):
    return churn_rounds(seed, n, {
        "u": ([4, 8], lambda rnd, i: (rnd.choice([None, *range(12)]), rnd.choice([None, "a", "b", "c"]))),
        "t": ([30, 60], lambda rnd, i: (i, rnd.choice([None, *range(12)]), rnd.choice([None, *range(50)]),
                                        rnd.choice([None, "x", "y", "o'k", "back\\slash", "\u00e9t\u00e9"]))),
        "p": ([10], lambda rnd, i: (i, rnd.choice([None, *range(6)]), rnd.randrange(9))),   # keys never reused
    }, duplicates=("t", 3), deletes=("t", "u", "p"), max_gone=20)


@pytest.fixture
def tiny_row_groups(monkeypatch, placement):
    monkeypatch.setattr(store, "ROW_GROUP_ROWS", 16)
    monkeypatch.setattr(keyed_reads, "ROW_GROUP_ROWS", 16)
    placement["local_step_rows"] = 0                       # every step on Spark
    from sqlengine.state import cache
    monkeypatch.setattr(cache, "DISK_TIER", False)         # state beyond the budget is read by Spark: runs sorted
    placement["driver_scans"] = False                      # the delete clamp's wide lookups too


def uncached(p):
    """Spark reads every state from its parquet runs, as when the state outgrows the driver's cache."""
    p.engine.local.cache.hold_nothing()


def test_spark_steps_reading_state_by_key_match_duckdb(make_pipeline, tiny_row_groups):
    p = make_pipeline(SQL)
    uncached(p)
    changes = p.listen("ja")
    model = Model(SCHEMA, COLUMNS)
    narrowed = 0
    for i, ops in enumerate(rounds(11, 6)):
        p.engine.stats.narrowed_reads = 0
        feed(p, model, ops, COLUMNS)
        narrowed += p.engine.stats.narrowed_reads
        check_views(p, model, VIEWS, f"round {i}")
    con = model.duck()
    assert not diff(bag_from_changes(changes.to_pandas()), model.view(con, VIEWS["ja"]))
    assert p.status()["steps_run_on"]["driver"] == 0
    assert p.engine.stats.spark_fallbacks == 0, p.engine.stats.last_spark_error
    assert narrowed > 0   # the reads were narrowed by key (not all read whole)
    # runs of more than a row group are sorted by their sort column, in many row groups
    t_int = p.engine.ctx.table_integral("t")
    col = p.engine.sort_columns[t_int]
    big = [r for r in p.engine.store.runs(p.engine.keys[t_int]) if r.rows > 16]
    assert big
    for r in big:
        f = pq.ParquetFile(f"{p.engine.store.root}/{r.path}")
        assert f.metadata.num_row_groups == -(-r.rows // 16)
        assert f.metadata.row_group(0).column(0).has_column_index   # a page index, for page skipping
        values = f.read(columns=[col]).column(0).to_pylist()
        assert values == sorted(values, key=lambda x: (x is None, x))


def test_a_narrowed_read_is_pushed_into_the_parquet_reader(make_pipeline, tiny_row_groups):
    import pyarrow as pa
    p = make_pipeline(SQL)
    uncached(p)
    feed(p, Model(SCHEMA, COLUMNS), next(iter(rounds(5, 1))), COLUMNS)
    eng = p.engine
    t_int = eng.ctx.table_integral("t")
    col = eng.sort_columns[t_int]
    probe = pa.table({col: pa.array([3, 7, None], pa.int32())})
    df = eng.sparks.read_state(t_int, key=((col,), [probe], [(col,)]))
    plan = df._jdf.queryExecution().executedPlan().toString()
    assert "PushedFilters" in plan and f"In({col}," in plan.replace(" ", ""), plan
    got = df.toArrow().column(col).to_pylist()
    whole = eng.sparks.read_state(t_int).toArrow().column(col).to_pylist()
    assert sorted(got, key=str) == sorted([x for x in whole if x in (3, 7, None)], key=str)


def test_sort_columns_follow_the_readers_keys():
    sql = ("CREATE TABLE t (id BIGINT NOT NULL, k BIGINT NOT NULL, v BIGINT); CREATE TABLE d (k BIGINT NOT NULL, "
           "name VARCHAR); CREATE TABLE p (a INT, b INT NOT NULL PRIMARY KEY);"
           "CREATE MATERIALIZED VIEW g AS SELECT k, COUNT(*) AS n, SUM(v) AS s FROM t GROUP BY k;"
           "CREATE MATERIALIZED VIEW j AS SELECT d.name, COUNT(*) AS n FROM t JOIN d ON t.k = d.k GROUP BY d.name;"
           "CREATE MATERIALIZED VIEW q AS SELECT a FROM p;")
    c = compile_program(sql).circuit
    derived = {op.id: derivation(c, op) for op in c.ops if op.kind == "integrate" and op.mode == "derived"}
    cols = keyed_reads.sort_columns(c, derived, {"p": ["c1"]})
    assert cols[c.tables["t"][1]] == "c1"   # t is read by the join on k, its second column
    assert cols[c.tables["d"][1]] == "c0"
    assert cols[c.tables["p"][1]] == "c1"   # read by nobody: its primary key (upserts look it up)
    assert all(cols[op.id] == "c0" for op in c.ops if op.kind == "aggregate" and op.mode == "accumulate")


@pytest.mark.parametrize("probes, specs, expected", [
    ([[1, 2, 2]], [("c0",)], ([1, 2], False)),
    ([[1, None], [3]], [("c0",), ("c4",)], ([1, 3], True)),
    ([None, [5]], [("c0",), ("c0",)], ([5], False)),
    ([[1]], [("c0 + 1",)], None),                         # an expression: its values are not the column's
    ([list(range(MAX_KEYS + 1))], [("c0",)], None),   # too many values
])
def test_key_filter(probes, specs, expected):
    import pyarrow as pa
    tables = [None if v is None else pa.table({s[0]: pa.array(v, pa.int64())}) for v, s in zip(probes, specs)]
    got = keyed_reads.key_filter("c0", ("c0",), tables, specs, MAX_KEYS)
    if got is not None:
        got = (sorted(got[0]), got[1])
    assert got == expected


def test_a_read_narrowed_by_many_keys_runs(make_pipeline, tiny_row_groups):
    """The most values a read is narrowed by (MAX_KEYS) go to the parquet reader without overflowing the
    executor's stack (one IN of a thousand values did, and took the JVM down)."""
    import pyarrow as pa
    p = make_pipeline(SQL)
    uncached(p)
    n = MAX_KEYS
    p.input_pandas("t", pd.DataFrame({"id": range(n), "k": range(n), "v": [1] * n, "s": [f"s{i}" for i in range(n)]}))
    p.wait_for_idle()
    eng = p.engine
    t_int = eng.ctx.table_integral("t")
    col = eng.sort_columns[t_int]
    probe = pa.table({col: pa.array(range(0, 2 * n, 2), pa.int32())})   # n values, half of them stored
    found = keyed_reads.key_filter(col, (col,), [probe], [(col,)], MAX_KEYS)
    assert found is not None and len(found[0]) == n
    got = eng.sparks.read_state(t_int, key=((col,), [probe], [(col,)])).toArrow().column(col).to_pylist()
    assert sorted(got) == list(range(0, n, 2))


@pytest.mark.parametrize("max_keys", [2000, 3])
def test_driver_steps_read_uncached_state_by_key_from_files(make_pipeline, monkeypatch, placement, max_keys):
    """With nothing cached and the disk tier off, a small step still runs on the driver: it reads the state
    rows of its keys from the row groups of the runs' files that can hold them (``state.row_groups``).  With
    ``max_keys`` 3, most reads cannot be narrowed so, and those steps run on Spark instead (same answers)."""
    from sqlengine.state import cache
    monkeypatch.setattr(store, "ROW_GROUP_ROWS", 16)
    monkeypatch.setattr(keyed_reads, "ROW_GROUP_ROWS", 16)
    placement["max_keys"] = max_keys
    monkeypatch.setattr(cache, "DISK_TIER", False)
    p = make_pipeline(SQL)
    uncached(p)
    changes = p.listen("ja")
    model = Model(SCHEMA, COLUMNS)
    for i, ops in enumerate(rounds(23, 6)):
        feed(p, model, ops, COLUMNS)
        check_views(p, model, VIEWS, f"round {i}")
    con = model.duck()
    assert not diff(bag_from_changes(changes.to_pandas()), model.view(con, VIEWS["ja"]))
    eng, ran = p.engine, p.status()["steps_run_on"]
    assert eng.local.cache.used == 0 and not eng.local.cache.mapped   # nothing was cached
    assert eng.stats.spark_fallbacks == 0, eng.stats.last_spark_error
    if max_keys == 2000:
        assert ran["spark"] == 0 and ran["driver"] > 0 and eng.local.files.rows_read > 0
    else:
        assert eng.stats.driver_attempts_failed > 0 and ran["spark"] > 0


@pytest.mark.parametrize("scan", ["duckdb", "spark"])
def test_stored_rows_the_driver_cannot_narrow_are_exactly_the_stored_copies(make_pipeline, placement, scan):
    """The delete clamp's and upserts' lookup of stored rows beyond the cache, when the driver cannot narrow
    it by key (here more than 2 keys): with a local master DuckDB scans the runs' files
    (``LocalExecutor.scan_runs``), else a Spark job reads them (``SparkState.scan``).  Either gives exactly the stored copies
    of the probed rows (NULLs, duplicates, rows never stored), and deletes of more copies than exist remove
    only those."""
    import random
    from collections import Counter
    import pyarrow as pa
    placement.update(driver_scans=scan == "duckdb", max_keys=2)
    p = make_pipeline(SQL)
    uncached(p)
    eng = p.engine
    model = Model(SCHEMA, COLUMNS)
    for ops in rounds(31, 4):
        feed(p, model, ops, COLUMNS)
    live = sorted(model.rows["t"].elements(), key=repr)
    rnd = random.Random(5)
    twice = rnd.sample(live, 3)
    feed(p, model, [("t", True, twice + twice + [(10 ** 9, None, None, None), (10 ** 9 + 1, 3, None, "x")])],
         COLUMNS)   # more copies than exist, and rows never inserted
    check_views(p, model, VIEWS, "after deleting missing copies")
    op = eng.ctx.table_integral("t")
    names = [c for c in eng.state_arrow[op].names if c != "__w"]
    wanted = rnd.sample(sorted(model.rows["t"].elements(), key=repr), 12) + [(10 ** 9, None, None, None)]
    probe = pa.table({c: pa.array([r[j] for r in wanted], eng.state_arrow[op].field(c).type)
                      for j, c in enumerate(names)})
    got = eng.inputs.stored_rows(op, probe, names)
    got_bag = Counter()
    for r in got.to_pylist():
        got_bag[tuple(r[c] for c in names)] += r["__w"]
    probed = set(wanted)
    want_bag = Counter({r: n for r, n in model.rows["t"].items() if r in probed})
    # (a superset of the probed rows may come back, read by one column that tells them apart: each with its count)
    assert Counter({r: n for r, n in got_bag.items() if r in probed}) == want_bag
    assert all(v > 0 and model.rows["t"][r] == v for r, v in got_bag.items())
    assert (eng.stats.rows_scanned > 0) == (scan == "duckdb") and (eng.stats.spark_scans > 0) == (scan == "spark")


def test_stored_rows_read_by_a_lead_column_or_by_all(make_pipeline, placement):
    """Deletes looked up beyond what the driver can narrow are first read by one column whose values tell the
    deleted rows apart (``keyed_reads.lead_column``); where the state holds far more rows of those values than
    the lookup (here 150 per value), by every column instead.  Either way the deletes remove the copies that
    exist, and no others."""
    import pyarrow as pa
    placement["max_keys"] = 2
    p = make_pipeline("CREATE TABLE t (a BIGINT, b BIGINT); "
                      "CREATE MATERIALIZED VIEW v AS SELECT a, COUNT(*) AS n, SUM(b) AS s FROM t GROUP BY a")
    uncached(p)
    eng = p.engine
    specs = []
    real = eng.local.scan_runs
    eng.local.scan_runs = lambda files, schema, spec, *a: specs.append(spec) or real(files, schema, spec, *a)
    p.input_pandas("t", pd.DataFrame({"a": [i // 150 for i in range(1500)], "b": [i % 150 for i in range(1500)]}))
    p.wait_for_idle()
    few = pd.DataFrame({"a": [0, 1, 2, 100], "b": [5, 5, 5, 1]})   # 600 stored rows of those a: by a
    p.input_pandas("t", few, delete=True)
    p.wait_for_idle()
    many = pd.DataFrame({"a": list(range(3, 10)) + [101], "b": [7] * 7 + [1]})   # 1050 rows: more than 4x8 + 1000
    p.input_pandas("t", many, delete=True)
    p.wait_for_idle()
    assert specs == [("c0",), ("c0",), ("c0", "c1")], specs
    want = {(a, 150 - 1, sum(range(150)) - (5 if a < 3 else 7)) for a in range(10)}
    assert {tuple(r.values()) for r in p.query("SELECT * FROM v")} == want


def test_column_min_from_footers(tmp_path):
    """The least weight of runs from their row groups' statistics; unknown (None) where a group has none."""
    import pyarrow as pa
    from sqlengine.state import row_groups
    paths = []
    for i, ws in enumerate(([3, 1, 2, 5], [4, -1, 7, 2], [])):
        paths.append(str(tmp_path / f"r{i}.parquet"))
        pq.write_table(pa.table({"c0": list(range(len(ws))), "__w": pa.array(ws, pa.int64())}), paths[-1],
                       row_group_size=2)
    assert row_groups.column_min(paths[:1], "__w") == 1
    assert row_groups.column_min(paths, "__w") == -1          # the second group of the second run
    assert row_groups.column_min(paths[2:], "__w") is None    # no rows
    assert row_groups.column_min([paths[0], paths[2]], "__w") == 1
    pq.write_table(pa.table({"c0": [1, 2], "__w": pa.array([1, 1], pa.int64())}), str(tmp_path / "n.parquet"),
                   write_statistics=False)
    assert row_groups.column_min([paths[0], str(tmp_path / "n.parquet")], "__w") is None


@pytest.mark.parametrize("types, expected", [
    (("int32", "int64"), ([1, 3], True)),            # a join's INT key probed beside its BIGINT side
    (("string", "large_string"), (["1", "3"], True)),
    (("int32", "string"), None),                     # no common type: not narrowed
])
def test_key_filter_over_probes_of_different_types(types, expected):
    """The probes of a read (the changes of both sides of a join) may hold the key in different types; their values
    are one list, of a common type (found by fuzz seed 44, a FULL JOIN of an INT and a BIGINT column on Spark)."""
    import pyarrow as pa
    cast = {"int32": pa.int32(), "int64": pa.int64(), "string": pa.string(), "large_string": pa.large_string()}
    values = [[1, None], [3]]
    tables = [pa.table({c: pa.array([None if x is None else (str(x) if "string" in t else x) for x in v], cast[t])})
              for v, t, c in zip(values, types, ("c0", "c4"))]
    got = keyed_reads.key_filter("c0", ("c0",), tables, [("c0",), ("c4",)], MAX_KEYS)
    if got is not None:
        got = (sorted(got[0]), got[1])
    assert got == expected
