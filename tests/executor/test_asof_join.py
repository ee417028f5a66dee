"""ASOF JOIN (planner/bind_asof.py): maintained under inserts and deletes on both sides.

Random batches of inserts and deletes into both tables, one step each: keys with NULLs, times with NULLs and
with duplicates on the left, no two current rows of the right side sharing a non-NULL (key, time) (so that
DuckDB's ASOF JOIN, which picks one of tied rows, is an exact oracle).  After every step each materialized
view (inner and LEFT, all four inequality directions, an expression key, a WHERE over the join) equals DuckDB's own
ASOF JOIN over the current tables.  Then ties on the right (every tied row matches), and the compile-time
errors of the forms not supported.
"""
import random

import duckdb
import pandas as pd
import pytest

from planner import compile_program
from planner.errors import EngineError, UnsupportedError
from tests.support.oracle import bag, diff
from tests.planner.test_compile_errors import compile_error

SCHEMA = ("CREATE TABLE a (k INT, t TIMESTAMP, x INT);\n"
          "CREATE TABLE b (k INT, t TIMESTAMP, y INT);\n")
VIEWS = {
    "inner_ge": "SELECT a.k, a.t, a.x, b.t AS bt, b.y FROM a ASOF JOIN b ON a.k = b.k AND a.t >= b.t",
    "left_ge": "SELECT a.x, b.y, b.t AS bt FROM a ASOF LEFT JOIN b ON a.k = b.k AND a.t >= b.t",
    "inner_gt": "SELECT p.x, b.y FROM a AS p ASOF JOIN b ON b.t < p.t AND p.k = b.k",
    "left_le": "SELECT * FROM a ASOF LEFT JOIN b ON a.k = b.k AND a.t <= b.t",
    "left_lt_expr": "SELECT a.x, b.y FROM a ASOF LEFT JOIN b ON b.k = a.k + 1 AND a.t < b.t",
    "filtered": "SELECT a.k, a.x, b.y FROM a ASOF LEFT JOIN b ON a.k = b.k AND a.t >= b.t WHERE a.x > 2",
}
PROGRAM = SCHEMA + "".join(f"CREATE MATERIALIZED VIEW {n} AS {q};\n" for n, q in VIEWS.items())
T0 = pd.Timestamp("2024-01-01 00:00:00")


def frame(rows, cols):
    return pd.DataFrame(rows, columns=cols).astype({cols[0]: "Int64", "t": "datetime64[us]", cols[2]: "Int64"})


def ts(rng, n):
    return None if rng.random() < 0.05 else T0 + pd.Timedelta(seconds=rng.randrange(n))


def steps(seed, n):
    """(table, inserts, deletes) batches; right rows never tie on a non-NULL (key, time)."""
    rng = random.Random(seed)
    rows = {"a": [], "b": []}
    for _ in range(n):
        for t in ("a", "b"):
            ins = []
            for _ in range(rng.randint(0, 8)):
                k = None if rng.random() < 0.1 else rng.randrange(4)
                if t == "a":
                    ins.append((k, ts(rng, 30), rng.randrange(6)))
                    continue
                taken = {(r[0], r[1]) for r in rows["b"] + ins if r[0] is not None and r[1] is not None}
                for _ in range(10):
                    r = (k, ts(rng, 30), rng.randrange(100))
                    if (r[0], r[1]) not in taken or r[0] is None or r[1] is None:
                        ins.append(r)
                        break
            dels = [rows[t].pop(rng.randrange(len(rows[t]))) for _ in range(rng.randint(0, 3)) if rows[t]]
            rows[t] += ins
            yield t, ins, dels


def test_asof_join_matches_duckdb_under_inserts_and_deletes(make_pipeline):
    p = make_pipeline(PROGRAM)
    current = {"a": [], "b": []}
    cols = {"a": ["k", "t", "x"], "b": ["k", "t", "y"]}
    for i, (t, ins, dels) in enumerate(steps(11, 20)):
        if ins:
            p.input_pandas(t, frame(ins, cols[t]))
        if dels:
            p.input_pandas(t, frame(dels, cols[t]), delete=True)
        for r in dels:
            current[t].remove(r)
        current[t] += ins
        p.wait_for_idle()
        con = duckdb.connect()
        con.execute("SET TimeZone = 'UTC'")
        con.execute(SCHEMA)
        for name in ("a", "b"):
            if current[name]:
                con.executemany(f"INSERT INTO {name} VALUES (?, ?, ?)", [list(r) for r in current[name]])
        for name, q in VIEWS.items():
            expected = bag(con.execute(q).fetchall())
            got = bag(tuple(r.values()) for r in p.query(f"SELECT * FROM {name}"))
            assert not diff(got, expected), f"step {i} ({t}), view {name}: {diff(got, expected)}"
    assert len(current["a"]) > 25 and len(current["b"]) > 25


def test_asof_join_ties_on_the_right_all_match(make_pipeline):
    p = make_pipeline(SCHEMA + f"CREATE MATERIALIZED VIEW v AS {VIEWS['left_ge']};")
    s = pd.Timedelta(seconds=1)
    p.input_pandas("a", frame([(1, T0 + 5 * s, 1), (1, T0 + 1 * s, 2), (2, T0 + 5 * s, 3)], ["k", "t", "x"]))
    p.input_pandas("b", frame([(1, T0 + 3 * s, 10), (1, T0 + 3 * s, 11), (1, T0 + 2 * s, 12)], ["k", "t", "y"]))
    p.wait_for_idle()
    got = bag(tuple(r.values()) for r in p.query("SELECT * FROM v"))
    expected = bag([(1, 10, T0 + 3 * s), (1, 11, T0 + 3 * s), (2, None, None), (3, None, None)])
    assert not diff(got, expected), diff(got, expected)
    p.input_pandas("b", frame([(1, T0 + 3 * s, 10), (1, T0 + 3 * s, 11)], ["k", "t", "y"]), delete=True)
    p.wait_for_idle()
    got = bag(tuple(r.values()) for r in p.query("SELECT * FROM v"))
    expected = bag([(1, 12, T0 + 2 * s), (2, None, None), (3, None, None)])
    assert not diff(got, expected), diff(got, expected)


@pytest.mark.parametrize("view, error, fragment, at", [
    ("SELECT a.x FROM a ASOF JOIN b ON a.k <> b.k AND a.t >= b.t", UnsupportedError,
     "ASOF JOIN condition a.k <> b.k", "a.k <>"),
    ("SELECT a.x FROM a ASOF JOIN b ON a.k = b.k", UnsupportedError,
     "ASOF JOIN without an inequality", "b ON"),
    ("SELECT a.x FROM a ASOF JOIN b ON a.k = b.k AND a.t >= b.t AND b.y > 3", UnsupportedError,
     "ASOF JOIN condition b.y > 3", "b.y > 3"),
    ("SELECT a.x FROM a ASOF JOIN b ON a.k = b.k AND a.t >= b.t AND a.x <= b.y", UnsupportedError,
     "a second inequality in an ASOF JOIN condition", "a.x <="),
    ("SELECT a.x FROM a ASOF JOIN b ON a.k = b.k OR a.t >= b.t", UnsupportedError,
     "ASOF JOIN condition", "a.k = b.k OR"),
    ("SELECT a.x FROM a ASOF JOIN b USING (k, t)", UnsupportedError, "ASOF JOIN with USING", "b USING"),
    ("SELECT a.x FROM a ASOF RIGHT JOIN b ON a.k = b.k AND a.t >= b.t", UnsupportedError,
     "ASOF RIGHT JOIN is not supported", "b ON"),
    ("SELECT a.x FROM a ASOF JOIN b ON a.k = b.t AND a.t >= b.t", EngineError, "", "a.k = b.t"),
])
def test_asof_join_unsupported_forms_fail_at_compile_time(view, error, fragment, at):
    sql = SCHEMA + f"CREATE VIEW v AS {view}"
    if error is EngineError:   # a type error of a key: whichever class the type checker raises
        with pytest.raises(EngineError) as info:
            compile_program(sql)
        assert "INT" in info.value.message and "TIMESTAMP" in info.value.message, str(info.value)
        return
    compile_error(sql, error, fragment, sql.count("\n") + 1, at)   # the view is the last line


def test_asof_join_plan_uses_maintained_operators():
    prog = compile_program(SCHEMA + f"CREATE VIEW v AS {VIEWS['inner_ge']}")
    from planner.logical import Aggregate, Distinct, Join, walk
    nodes = walk(prog.views["v"].bound)
    assert any(isinstance(n, Aggregate) and n.aggs[0].func == "MAX" for n in nodes)
    assert any(isinstance(n, Distinct) for n in nodes)
    assert sum(isinstance(n, Join) for n in nodes) == 3
    assert [f.name for f in prog.views["v"].plan.fields] == ["k", "t", "x", "bt", "y"]


def test_match_condition_spelling_is_the_same_join():
    """Snowflake's and Feldera's ``LEFT ASOF JOIN b MATCH_CONDITION (a.t >= b.t) ON keys`` plans exactly like
    DuckDB's ``ASOF LEFT JOIN b ON keys AND a.t >= b.t`` (inner too)."""
    from planner import compile_program
    base = "CREATE TABLE t (k INT, ts TIMESTAMP, x INT); CREATE TABLE q (k INT, ts TIMESTAMP, p INT);\n"
    for kind, duck in (("LEFT ASOF JOIN", "ASOF LEFT JOIN"), ("ASOF JOIN", "ASOF JOIN")):
        a = compile_program(base + f"CREATE VIEW v AS SELECT t.x, q.p FROM t {kind} q MATCH_CONDITION (t.ts >= q.ts) "
                                   "ON t.k = q.k WHERE t.x > 1")
        b = compile_program(base + f"CREATE VIEW v AS SELECT t.x, q.p FROM t {duck} q ON t.k = q.k AND t.ts >= q.ts "
                                   "WHERE t.x > 1")
        assert a.views["v"].plan == b.views["v"].plan
