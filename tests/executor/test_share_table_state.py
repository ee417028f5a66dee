"""Integrals of a filter or projection of a table or of an inner join, read through the states of the table or the
join's inputs (rule ``share_table_state``).

The differential test runs views whose joins, recomputed aggregates, DISTINCT, set operations and windows read
such integrals, under inserts, deletes, duplicates and NULLs, on the driver and on Spark, against DuckDB after
every round, and checks that those integrals store nothing.  The other tests pin when the rule applies.
"""
import pytest

from planner import compile_program

from ..support.oracle import Model, check_views, churn_rounds, feed, materialized, reopen_with_rule

SCHEMA = "CREATE TABLE t (id BIGINT, k INT, v INT, s VARCHAR); CREATE TABLE u (k INT, w INT);"
COLUMNS = {"t": ["id", "k", "v", "s"], "u": ["k", "w"]}
VIEWS = {
    # joins reading a filtered, projected table on either side, a self-join and a LEFT JOIN
    "j": "SELECT t.id, t.v, u.w FROM t JOIN u ON t.k = u.k WHERE t.v > 10 AND u.w < 40",
    "self": "SELECT a.id, b.id AS id2 FROM t a JOIN t b ON a.k = b.k WHERE a.v > 40 AND b.s = 'x'",
    "lj": "SELECT u.k, u.w, t.v FROM u LEFT JOIN (SELECT k, v FROM t WHERE s IS NOT NULL) t ON u.k = t.k",
    # MIN/MAX recompute the touched groups from their input's integral
    "mm": "SELECT k, MIN(v) AS lo, MAX(v) AS hi FROM t WHERE s <> 'z' GROUP BY k",
    "dv": "SELECT DISTINCT k, s FROM t WHERE v < 30",
    "ex": "SELECT k FROM t WHERE v > 20 EXCEPT SELECT k FROM u WHERE w > 20",
    "win": "SELECT id, k, ROW_NUMBER() OVER (PARTITION BY k ORDER BY id) AS rn FROM t WHERE v >= 5",
    # the first join's integral is read by the second join through the two tables' states
    "j3": "SELECT u.w, COUNT(*) AS n, SUM(t2.v) AS s FROM t JOIN u ON t.k = u.k JOIN t t2 ON u.k = t2.k "
          "WHERE t.s <> 'y' GROUP BY u.w",
}
SQL = materialized(SCHEMA, VIEWS)


def rounds(seed, n):
    return churn_rounds(seed, n, {
        "u": ([8], lambda rnd, i: (rnd.choice([None, *range(12)]), rnd.choice([None, *range(60)]))),
        "t": ([6, 25], lambda rnd, i: (i, rnd.choice([None, *range(12)]), rnd.choice([None, *range(60)]),
                                       rnd.choice([None, "x", "y", "z"]))),
    }, duplicates=("t", 2), deletes=("t", "u"), max_gone=10)


def derived_ops(program):
    return [op for op in program.circuit.ops if op.kind == "integrate" and op.mode == "derived"]


@pytest.mark.parametrize("where", ["driver", "spark"])
def test_views_over_shared_table_state_match_duckdb(make_pipeline, placement, where):
    if where == "spark":
        placement["local_step_rows"] = 0
    p = make_pipeline(SQL)
    derived = derived_ops(p.program)
    kinds = {op.kind for op in p.program.circuit.ops if set(op.reads) & {d.id for d in derived}}
    assert kinds >= {"join", "aggregate", "distinct", "setop", "window"}, kinds
    assert not any(d.id in p.engine.keys for d in derived)   # they own no state
    assert any(len(d.reads) == 2 for d in derived)             # one of them is read through a join
    model = Model(SCHEMA, COLUMNS)
    for i, ops in enumerate(rounds(11, 5)):
        feed(p, model, ops, COLUMNS)
        check_views(p, model, VIEWS, f"round {i}")
    on = p.status()["steps_run_on"]
    assert on["spark" if where == "spark" else "driver"] > 0 and on["driver" if where == "spark" else "spark"] == 0
    keys = set(p.status()["state_size"])
    assert keys == {p.engine.keys[i] for i in p.engine.keys}
    assert p.engine.stats.spark_fallbacks == 0, p.engine.stats.last_spark_error


def derived_nodes(sql, **kw):
    return [op.node.describe() for op in derived_ops(compile_program(sql, **kw))]


T = "CREATE TABLE t (a INT, b INT, c VARCHAR); CREATE TABLE u (a INT, d INT);"


def test_a_filtered_projected_table_under_a_join_is_derived():
    assert derived_nodes(T + "CREATE VIEW v AS SELECT t.b, u.d FROM t JOIN u ON t.a = u.a WHERE t.b > 1") == \
        ["Project c0 AS a, c1 AS b"]


@pytest.mark.parametrize("title, view", [
    ("an expression that may fail on a row", "SELECT t.b, u.d FROM t JOIN u ON t.a = u.a WHERE CAST(t.c AS INT) > 1"),
    ("a join key computed by the projection", "SELECT s.x, u.d FROM (SELECT a + 1 AS x FROM t WHERE b > 0) s "
                                              "JOIN u ON s.x = u.a"),
    ("a join key that is an expression", "SELECT t.b, u.d FROM t JOIN u ON t.a + 1 = u.a WHERE t.b > 1"),
])
def test_what_cannot_be_read_through_the_table_is_stored(title, view):
    assert derived_nodes(T + f"CREATE VIEW v AS {view}") == [], title


def test_a_views_contents_and_event_time_tables_are_stored():
    assert derived_nodes(T + "CREATE MATERIALIZED VIEW v AS SELECT a, b FROM t WHERE b > 1") == []
    ev = ("CREATE TABLE e (ts TIMESTAMP LATENESS INTERVAL 1 MINUTE, a INT, b INT);"
          "CREATE TABLE u (a INT, d INT);"
          "CREATE VIEW v AS SELECT e.b, u.d FROM e JOIN u ON e.a = u.a WHERE e.b > 1")
    assert derived_nodes(ev) == []


def test_the_rule_can_be_switched_off(monkeypatch):
    view = T + "CREATE VIEW v AS SELECT t.b, u.d FROM t JOIN u ON t.a = u.a WHERE t.b > 1"
    assert derived_nodes(view, disabled_rules=frozenset({"share_table_state"})) == []
    assert derived_nodes(view, disabled_rules=frozenset({"*"})) == []
    monkeypatch.setenv("SQLENGINE_RULES", "-share_table_state")
    assert derived_nodes(view) == []


def test_a_date_literal_cannot_fail_a_row_but_a_bad_one_can():
    d = "CREATE TABLE o (k INT, dt DATE); CREATE TABLE u (k INT, w INT);"
    good = d + "CREATE VIEW v AS SELECT o.dt, u.w FROM o JOIN u ON o.k = u.k WHERE o.dt < CAST('1995-03-15' AS DATE)"
    assert derived_nodes(good) == ["Filter c1 < CAST('1995-03-15' AS DATE)"]
    bad = d + "CREATE VIEW v AS SELECT o.dt, u.w FROM o JOIN u ON o.k = u.k WHERE o.dt < CAST('1995-02-30' AS DATE)"
    assert derived_nodes(bad) == []


def test_state_an_earlier_version_stored_is_dropped_on_restart(make_pipeline, monkeypatch, tmp_path):
    """Storage written without the rule (as by a version before it) holds runs of integrals that are derived
    now: a restart with the rule drops them from the manifest (and from the disk after the next steps), and
    the views stay right."""
    sql = SCHEMA + f"CREATE MATERIALIZED VIEW j3 AS {VIEWS['j3']};"
    model = Model(SCHEMA, COLUMNS)
    batches = list(rounds(5, 3))
    p, before = reopen_with_rule(make_pipeline, monkeypatch, sql, str(tmp_path / "s"), "share_table_state", model,
                                 batches[0], COLUMNS)
    live = set(p.engine.keys.values())
    dropped = before - live
    assert dropped and derived_ops(p.program)
    assert set(p.store.current.runs) <= live
    for ops in batches[1:]:
        feed(p, model, ops, COLUMNS)
    # their files go once no kept manifest lists them (the store keeps the last two)
    assert not [f for f in (tmp_path / "s").rglob("*") if any(k in f.name for k in dropped)]
    check_views(p, model, {"j3": VIEWS["j3"]}, "after the restart")
