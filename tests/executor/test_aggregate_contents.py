"""A materialized aggregate view's contents read from the aggregate's own state (rule ``aggregate_contents``).

The differential test runs GROUP BY views (NULL keys, NULL arguments, HAVING, AVG,
a global aggregate, one over a join) under inserts, deletes and duplicates, on the driver and on Spark, and
compares every view with DuckDB after every round, while one view's changes are listened to and the others'
are not computed.  The other tests pin when the rule applies, that it can be switched off, and a restart
from storage written without it.
"""
import pytest

from planner import compile_program

from ..support.oracle import Model, bag_from_changes, check_views, churn_rounds, diff, feed, materialized, reopen_with_rule

SCHEMA = "CREATE TABLE t (id BIGINT, k INT, v INT, s VARCHAR); CREATE TABLE u (k INT, w INT);"
COLUMNS = {"t": ["id", "k", "v", "s"], "u": ["k", "w"]}
VIEWS = {
    "g": "SELECT k, COUNT(*) AS n, SUM(v) AS s, COUNT(v) AS c FROM t GROUP BY k",
    "e": "SELECT s, AVG(v) AS m, SUM(v) AS sv FROM t WHERE k > 2 GROUP BY s HAVING COUNT(*) > 1",
    "total": "SELECT COUNT(*) AS n, SUM(v) AS s FROM t",
    "ja": "SELECT u.w, COUNT(*) AS n, SUM(t.v) AS s FROM t JOIN u ON t.k = u.k GROUP BY u.w",
}
SQL = materialized(SCHEMA, VIEWS)


def rounds(seed, n):
    return churn_rounds(seed, n, {
        "u": ([6], lambda rnd, i: (rnd.choice([None, *range(8)]), rnd.choice([None, *range(5)]))),
        "t": ([5, 20], lambda rnd, i: (i, rnd.choice([None, *range(8)]), rnd.choice([None, *range(60)]),
                                       rnd.choice([None, "x", "y"]))),
    }, duplicates=("t", 2), deletes=("t", "u"), max_gone=12)


def contents_ops(program):
    """The views whose contents are derived from their aggregate -> the integral op."""
    out = {}
    for name, o in program.circuit.outputs.items():
        op = program.circuit.ops[o.integral] if o.integral is not None else None
        if op is not None and op.mode == "derived" and program.circuit.ops[op.reads[0]].kind == "aggregate":
            out[name] = op
    return out


@pytest.mark.parametrize("where", ["driver", "spark"])
def test_aggregate_views_read_from_their_state_match_duckdb(make_pipeline, placement, where):
    if where == "spark":
        placement["local_step_rows"] = 0
    p = make_pipeline(SQL)
    derived = contents_ops(p.program)
    assert set(derived) == set(VIEWS)
    assert not any(op.id in p.engine.keys for op in derived.values())   # they store nothing
    changes = p.listen("g")   # g's changes are computed and delivered; the other views' are not computed
    model = Model(SCHEMA, COLUMNS)
    for i, ops in enumerate(rounds(3, 5)):
        feed(p, model, ops, COLUMNS)
        check_views(p, model, VIEWS, f"round {i}")
    con = model.duck()   # the listened view's changes add up to its contents
    assert not diff(bag_from_changes(changes.to_pandas()), model.view(con, VIEWS["g"]))
    on = p.status()["steps_run_on"]
    assert on["spark" if where == "spark" else "driver"] > 0 and on["driver" if where == "spark" else "spark"] == 0
    assert p.engine.stats.spark_fallbacks == 0, p.engine.stats.last_spark_error


T = "CREATE TABLE t (k INT, v INT, s VARCHAR);"


@pytest.mark.parametrize("title, view, derived", [
    ("a materialized GROUP BY", "CREATE MATERIALIZED VIEW v AS SELECT k, SUM(v) AS s FROM t GROUP BY k", True),
    ("a view that is not materialized has no contents", "CREATE VIEW v AS SELECT k, SUM(v) AS s FROM t GROUP BY k",
     False),
    ("MIN/MAX recompute their groups: no state of their own",
     "CREATE MATERIALIZED VIEW v AS SELECT k, MAX(v) AS m FROM t GROUP BY k", False),
    ("an expression over the aggregates that may fail on a row",
     "CREATE MATERIALIZED VIEW v AS SELECT k, CAST(MAX(s) AS INT) + SUM(v) AS x FROM t GROUP BY k", False),
])
def test_when_the_contents_are_derived(title, view, derived):
    assert bool(contents_ops(compile_program(T + view))) == derived, title


def test_event_time_and_the_switch(monkeypatch):
    ev = ("CREATE TABLE e (ts TIMESTAMP LATENESS INTERVAL 1 MINUTE, k INT, v INT);"
          "CREATE MATERIALIZED VIEW v AS SELECT k, SUM(v) AS s FROM e GROUP BY k")
    assert contents_ops(compile_program(ev)) == {}
    view = T + "CREATE MATERIALIZED VIEW v AS SELECT k, SUM(v) AS s FROM t GROUP BY k"
    assert contents_ops(compile_program(view, disabled_rules=frozenset({"aggregate_contents"}))) == {}
    monkeypatch.setenv("SQLENGINE_RULES", "-aggregate_contents")
    assert contents_ops(compile_program(view)) == {}


def test_contents_stored_by_an_earlier_version_are_dropped_on_restart(make_pipeline, monkeypatch, tmp_path):
    sql = SCHEMA + f"CREATE MATERIALIZED VIEW g AS {VIEWS['g']};"
    model = Model(SCHEMA, COLUMNS)
    batches = list(rounds(8, 3))
    p, before = reopen_with_rule(make_pipeline, monkeypatch, sql, str(tmp_path / "s"), "aggregate_contents", model,
                                 batches[0], COLUMNS)
    assert contents_ops(p.program) and before - set(p.engine.keys.values())
    assert set(p.store.current.runs) <= set(p.engine.keys.values())
    check_views(p, model, {"g": VIEWS["g"]}, "after the restart")
    for ops in batches[1:]:
        feed(p, model, ops, COLUMNS)
        check_views(p, model, {"g": VIEWS["g"]}, "after the restart")


@pytest.mark.parametrize("where, forget", [("driver", False), ("spark", False), ("driver", True)])
def test_a_sum_leaving_bigint_is_a_row_error_though_no_one_listens(make_pipeline, placement, tmp_path, where,
                                                                    forget):
    """A step that nobody listens to does not compute the view's change, unless a group's integer SUM may
    leave BIGINT's range: the bound (the sum of the partial sums' absolute values) is kept with the step,
    across a restart, and once past BIGINT the change is computed and the group's row recorded as an error.
    ``forget``: storage written before the bound was kept (no bound in its manifest) always computes it."""
    if where == "spark":
        placement["local_step_rows"] = 0
    import pandas as pd
    sql = "CREATE TABLE t (k INT, x BIGINT); CREATE MATERIALIZED VIEW s AS SELECT k, SUM(x) AS sx FROM t GROUP BY k;"
    storage = str(tmp_path / "s")
    big = 1 << 61
    p = make_pipeline(sql, storage_dir=storage)
    assert contents_ops(p.program)
    for _ in range(3):
        p.input_pandas("t", pd.DataFrame({"k": [1, 2], "x": [big, 1]}))
        p.wait_for_idle()
    assert sorted(tuple(r.values()) for r in p.query("SELECT * FROM s")) == [(1, 3 * big), (2, 3)]
    assert p.status()["errors"] == {}
    p.stop()
    if forget:
        import json
        import pathlib
        manifests = (pathlib.Path(storage) / "state").glob("manifest-*.json")
        last = max(manifests, key=lambda f: int(f.stem.split("-")[1]))
        m = json.loads(last.read_text())
        assert m["meta"].pop("sum_bounds")
        last.write_text(json.dumps(m))
    p = make_pipeline(sql, storage_dir=storage)
    if forget:   # a bound of 0 would let the next step pass 2^61 unchecked
        p.input_pandas("t", pd.DataFrame({"k": [1], "x": [-big]}))
        p.wait_for_idle()
        p.input_pandas("t", pd.DataFrame({"k": [1], "x": [big]}))
        p.wait_for_idle()
        assert p.status()["errors"] == {}
    p.input_pandas("t", pd.DataFrame({"k": [1], "x": [big]}))   # group 1's SUM is 2^63 now
    p.wait_for_idle()
    assert p.status()["errors"] == {"s": 1}
    (e,) = p.query("SELECT * FROM sqlengine_errors")
    assert "does not fit in BIGINT" in e["error"]
    assert sorted(tuple(r.values()) for r in p.query("SELECT * FROM s")) == [(2, 3)]
