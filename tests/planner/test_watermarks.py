"""Event time in the planner: LATENESS / WATERMARK FOR, closing bounds, what state may be dropped.

``tests/fixtures/watermarks/<topic>.sql`` holds a schema (the CREATE TABLE statements at the top) and titled
cases: CREATE VIEW statements and, after ``-- expect:``, the summary :func:`summary` prints, each line behind
``-- ``: the bounded columns of each view, its emit-final bound, and for every state op of the program
whether its rows below a bound may be dropped (``gc``) or not (``keep``).  ``python -m tests.planner.test_watermarks
--update`` rewrites the expectations; read every changed line before keeping it.

Pure planner (no Spark).
"""
from __future__ import annotations

import os
import random
import sys
from dataclasses import dataclass
from typing import List, Optional

import pytest

from planner import compile_program
from planner.errors import BindError, ParseError, UnsupportedError
from planner.logical import Project
from planner.watermarks import Bound, expr_bound, format_terms, node_bounds, event_columns

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "watermarks")


# ---------------------------------------------------------------------------------------- golden fixtures
@dataclass
class Case:
    file: str
    title: str
    sql: str
    expect: Optional[str]
    line: int


def parse_fixture(path: str):
    """(schema SQL, cases) of one fixture file."""
    schema: List[str] = []
    cases: List[dict] = []
    cur = None
    for no, line in enumerate(open(path).read().splitlines(), start=1):
        if line.startswith("-- title:"):
            cur = {"title": line[len("-- title:"):].strip(), "sql": [], "expect": None, "line": no}
            cases.append(cur)
        elif cur is None:
            if not line.startswith("--"):
                schema.append(line)
        elif line.strip() == "-- expect:":
            cur["expect"] = []
        elif cur["expect"] is not None:
            if line.startswith("-- "):
                cur["expect"].append(line[3:])
        elif not line.startswith("--"):
            cur["sql"].append(line)
    name = os.path.basename(path)
    return "\n".join(schema).strip(), [
        Case(name, c["title"], "\n".join(c["sql"]).strip(),
             "\n".join(c["expect"]).rstrip() if c["expect"] is not None else None, c["line"]) for c in cases]


def fixture_files():
    return sorted(os.path.join(FIXTURES, f) for f in os.listdir(FIXTURES) if f.endswith(".sql"))


def all_cases():
    for path in fixture_files():
        schema, cases = parse_fixture(path)
        for c in cases:
            yield pytest.param(schema, c, id=f"{c.file}:{c.line}")


def summary(prog) -> str:
    """Views' bounded columns and emit-final bounds, and every state op: ``gc`` with its bound, or ``keep``."""
    c = prog.circuit
    events = event_columns(prog.tables)
    lines = []
    for name, v in prog.views.items():
        b = node_bounds(v.plan, events)
        cols = ", ".join(f"{v.plan.fields[i].name} >= {format_terms(t)}" for i, t in b.items()) or "(none)"
        lines.append(f"bounds {name}: {cols}")
        if name in prog.final:
            f = prog.final[name]
            lines.append(f"final {name}: {c.outputs[name].names[f.column]} >= {format_terms(f.terms)}")
    readers = {}
    for op in c.ops:
        for r in dict.fromkeys(op.reads):
            readers.setdefault(r, []).append(f"#{op.id} {op.kind}" + (f" {op.mode}" if op.mode else ""))
    tables = {i: t for t, (_, i) in c.tables.items()}
    outputs = {}
    for name, out in c.outputs.items():
        if out.integral is not None:
            outputs.setdefault(out.integral, []).append(name)
    for op in c.ops:
        if not op.owns_state:
            continue
        if op.kind == "integrate":
            what = (f"table {tables[op.id]}" if op.id in tables else
                    f"#{op.inputs[0]} {c.ops[op.inputs[0]].kind}")
            what = "integral of " + what + "".join(f", view {v}" for v in outputs.get(op.id, ()))
            if op.id in readers:
                what += " read by " + ", ".join(readers[op.id])
        else:
            what = f"aggregate keys=[{', '.join(map(str, op.node.keys))}]"
        fate = f"gc {prog.gc[op.id].describe('<')}" if op.id in prog.gc else "keep"
        lines.append(f"#{op.id} {what}: {fate}")
    return "\n".join(lines)


def run_case(schema: str, case: Case):
    return compile_program(schema + "\n" + case.sql)


@pytest.mark.parametrize("schema, case", list(all_cases()))
def test_golden_bounds(schema, case):
    prog = run_case(schema, case)
    assert case.expect is not None, f"{case.title}: no expectation"
    got = summary(prog)
    assert got == case.expect, f"{case.title}\n--- expected\n{case.expect}\n--- got\n{got}"
    # the contract: gc only on state ops, bounds name existing columns with at least one term
    for op_id, b in prog.gc.items():
        op = prog.circuit.ops[op_id]
        assert op.owns_state and b.terms and 0 <= b.column < len(op.node.fields)
        assert op.node.fields[b.column].type.base == "TIMESTAMP"
    for name, b in prog.final.items():
        out = prog.circuit.outputs[name]
        assert out.integral is not None and b.terms
        view = prog.views[name]
        if view.materialized:
            assert out.integral not in prog.gc
        elif out.integral in prog.gc:   # kept when another view reads it by other keys
            assert prog.gc[out.integral].column == b.column


def test_fixtures_cover_the_brief():
    titles = [c.values[1].title for c in all_cases()]
    for needed in ("non-equi join", "materialized view keeps", "lateness that is materialized",
                   "not grouped by the bounded column", "q5-shaped", "q7-shaped", "emit final"):
        assert any(needed in t for t in titles), needed


# ---------------------------------------------------------------------------------------- the syntax
@pytest.mark.parametrize("column, micros", [
    ("ts TIMESTAMP LATENESS INTERVAL 4 SECONDS", 4_000_000),
    ("ts TIMESTAMP LATENESS INTERVAL '4' SECOND", 4_000_000),
    ("ts TIMESTAMP LATENESS INTERVAL '4 seconds'", 4_000_000),
    ("ts TIMESTAMP NOT NULL LATENESS INTERVAL 1 MINUTE", 60_000_000),
    ("ts TIMESTAMP LATENESS INTERVAL '2' HOURS", 7_200_000_000),
    ("ts TIMESTAMP LATENESS INTERVAL '1' DAY", 86_400_000_000),
    ("ts TIMESTAMP LATENESS INTERVAL '1:30' MINUTE TO SECOND", 90_000_000),
    ("ts TIMESTAMP LATENESS INTERVAL '1:30' HOUR TO MINUTE", 5_400_000_000),
    ("ts TIMESTAMP LATENESS INTERVAL '250' MILLISECONDS", 250_000),
    ("ts TIMESTAMP LATENESS INTERVAL 0 SECONDS", 0),
    ("ts TIMESTAMP LATENESS INTERVAL 4 SECONDS NOT NULL", 4_000_000),
])
def test_feldera_lateness(column, micros):
    prog = compile_program(f"CREATE TABLE t (id INT, {column}, v DECIMAL(10, 2));")
    t = prog.tables["t"]
    assert t.lateness == ("ts", micros)
    assert [f.name for f in t.fields] == ["id", "ts", "v"] and t.fields[1].type.base == "TIMESTAMP"
    assert t.materialized is False
    if "NOT NULL" in column:
        assert not t.fields[1].type.nullable


@pytest.mark.parametrize("element, micros", [
    ("WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND", 4_000_000),
    ("WATERMARK FOR date_time AS date_time - INTERVAL 5 MINUTES", 300_000_000),
    ("WATERMARK FOR date_time AS (date_time - INTERVAL '1' HOUR)", 3_600_000_000),
    ("WATERMARK FOR DATE_TIME AS date_time", 0),
])
def test_flink_watermark(element, micros):
    for sql in (f"CREATE TABLE bid (price BIGINT, date_time TIMESTAMP, {element})",
                f"CREATE TABLE bid ({element}, price BIGINT, date_time TIMESTAMP)",
                f"CREATE TABLE bid (price BIGINT, {element}, date_time TIMESTAMP) WITH ('connectors' = '[]')"):
        t = compile_program(sql).tables["bid"]
        assert t.lateness == ("date_time", micros), sql
        assert [f.name for f in t.fields] == ["price", "date_time"]


def test_quoted_event_time_column_keeps_its_name():
    t = compile_program('CREATE TABLE t ("dateTime" TIMESTAMP LATENESS INTERVAL 1 SECOND)').tables["t"]
    assert t.lateness == ("dateTime", 1_000_000)
    t = compile_program('CREATE TABLE t ("dateTime" TIMESTAMP, WATERMARK FOR "dateTime" AS "dateTime")').tables["t"]
    assert t.lateness == ("dateTime", 0)


def test_columns_named_like_the_keywords_are_columns():
    prog = compile_program("CREATE TABLE t (lateness INT, watermark INT, ts TIMESTAMP);"
                           "CREATE VIEW v AS SELECT lateness + watermark AS s FROM t")
    assert prog.tables["t"].lateness is None and [f.name for f in prog.tables["t"].fields] == \
        ["lateness", "watermark", "ts"]
    assert prog.gc == {} and prog.final == {}


def test_materialized_table_option():
    sql = ("CREATE TABLE t (ts TIMESTAMP LATENESS INTERVAL 1 SECOND) WITH ('materialized' = '{}', "
           "'connectors' = '[{{\"transport\": {{\"name\": \"datagen\"}}}}]')")
    t = compile_program(sql.format("true")).tables["t"]
    assert t.materialized is True and t.connectors is not None and "datagen" in t.connectors[0]
    assert compile_program(sql.format("FALSE")).tables["t"].materialized is False
    assert compile_program("CREATE TABLE t (a INT) WITH ('materialized' = 'true')").tables["t"].materialized
    compile_error("CREATE TABLE t (a INT) WITH ('materialized' = 'yes')", UnsupportedError,
                  "table option 'materialized' must be one of false, true, not 'yes'", 1, "'materialized'")


def test_table_defs_compare_without_event_time():
    a = compile_program("CREATE TABLE t (ts TIMESTAMP LATENESS INTERVAL 1 SECOND)").tables["t"]
    b = compile_program("CREATE TABLE t (ts TIMESTAMP)").tables["t"]
    assert a == b and a.lateness != b.lateness


def test_no_event_time_no_bounds():
    prog = compile_program("CREATE TABLE bid (auction BIGINT, date_time TIMESTAMP);"
                           "CREATE VIEW v AS SELECT auction, window_end, COUNT(*) AS n FROM TUMBLE(bid, date_time, "
                           "INTERVAL '10' SECOND) GROUP BY auction, window_end")
    assert prog.gc == {} and prog.final == {}
    assert "watermark bounds" not in prog.explain("v")


# ---------------------------------------------------------------------------------------- errors
from tests.planner.test_compile_errors import compile_error  # noqa: E402 - one checker of positions


BID = "CREATE TABLE bid (auction BIGINT, price BIGINT, date_time TIMESTAMP LATENESS INTERVAL '4' SECOND);\n"


@pytest.mark.parametrize("sql, error, fragment, line, at", [
    ("CREATE TABLE t (\n  id INT LATENESS INTERVAL 4 SECONDS\n)", BindError,
     "the event-time column id (LATENESS) must be a TIMESTAMP, not INT", 2, "id"),
    ("CREATE TABLE t (\n  d DATE,\n  WATERMARK FOR d AS d - INTERVAL '1' DAY\n)", BindError,
     "the event-time column d (WATERMARK) must be a TIMESTAMP, not DATE", 3, "d AS"),
    ("CREATE TABLE t (\n  a TIMESTAMP LATENESS INTERVAL 1 SECOND,\n  b TIMESTAMP LATENESS INTERVAL 2 SECOND\n)",
     UnsupportedError, "table t declares a second event-time column (LATENESS on b, after LATENESS on a)", 3,
     "LATENESS"),
    ("CREATE TABLE t (\n  a TIMESTAMP LATENESS INTERVAL 1 SECOND,\n  WATERMARK FOR a AS a\n)",
     UnsupportedError, "a table has at most one", 3, "WATERMARK"),
    ("CREATE TABLE t (\n  ts TIMESTAMP,\n  WATERMARK FOR ts AS ts + INTERVAL '4' SECOND\n)", UnsupportedError,
     "WATERMARK FOR ts AS ts + INTERVAL '4' SECOND is not supported: the watermark must be the column minus a "
     "constant INTERVAL", 3, "ts + INTERVAL"),
    ("CREATE TABLE t (\n  ts TIMESTAMP, u TIMESTAMP,\n  WATERMARK FOR ts AS u - INTERVAL '4' SECOND\n)",
     UnsupportedError, "WATERMARK FOR ts AS u - INTERVAL '4' SECOND is not supported", 3, "u - INTERVAL"),
    ("CREATE TABLE t (\n  ts TIMESTAMP,\n  WATERMARK FOR ts AS ts - INTERVAL '1' MONTH\n)", UnsupportedError,
     "is not supported: the watermark must be the column minus a constant INTERVAL", 3, "ts - INTERVAL"),
    ("CREATE TABLE t (\n  ts TIMESTAMP,\n  WATERMARK FOR ts AS ts - INTERVAL '-4' SECOND\n)", UnsupportedError,
     "is not supported", 3, "ts - INTERVAL"),
    ("CREATE TABLE t (\n  ts TIMESTAMP,\n  WATERMARK FOR nope AS nope\n)", BindError,
     "unknown column 'nope' in WATERMARK. Columns of t: ts", 3, "nope AS"),
    ("CREATE TABLE t (\n  ts TIMESTAMP,\n  WATERMARK FOR ts ts\n)", ParseError,
     "expected AS after WATERMARK FOR ts", 3, 20),
    ("CREATE TABLE t (\n  ts TIMESTAMP LATENESS 4\n)", ParseError,
     "expected an INTERVAL after LATENESS, found '4'", 2, "4"),
    ("CREATE TABLE t (\n  ts TIMESTAMP LATENESS INTERVAL 1 MONTH\n)", UnsupportedError,
     "LATENESS INTERVAL 1 MONTH is not supported: the lateness must be an INTERVAL of fixed length", 2, "INTERVAL"),
    ("CREATE TABLE t (\n  ts TIMESTAMP LATENESS INTERVAL -1 SECOND\n)", UnsupportedError,
     "a negative LATENESS is not supported", 2, "INTERVAL"),
    (BID + "CREATE VIEW v AS SELECT auction FROM bid;\nLATENESS v.ts INTERVAL 1 HOUR;", UnsupportedError,
     "LATENESS is not supported yet here", 3, "LATENESS"),
])
def test_event_time_errors(sql, error, fragment, line, at):
    compile_error(sql, error, fragment, line, at)


@pytest.mark.parametrize("view, error, fragment, at", [
    ("CREATE VIEW v WITH ('emit_final' = 'nope') AS SELECT auction, date_time FROM bid", BindError,
     "emit_final needs a column bounded by a watermark: 'nope' is not a column of view v. Columns: auction, "
     "date_time", "'nope'"),
    ("CREATE VIEW v WITH ('emit_final' = 'n') AS SELECT auction, window_end, COUNT(*) AS n FROM TUMBLE(bid, "
     "date_time, INTERVAL '10' SECOND) GROUP BY auction, window_end", UnsupportedError,
     "emit_final needs a column bounded by a watermark: column n of view v is not", "'n'"),
    ("CREATE VIEW v WITH ('emit_final' = 'auction') AS SELECT auction, date_time FROM bid", UnsupportedError,
     "column auction of view v is not", "'auction'"),
    ("CREATE VIEW v WITH ('emit_final' = 'm') AS SELECT auction, MAX(date_time) AS m FROM bid GROUP BY auction",
     UnsupportedError, "column m of view v is not", "'m'"),
])
def test_emit_final_errors(view, error, fragment, at):
    compile_error(BID + view, error, fragment, 2, at)


def test_emit_final_column_name_is_matched_like_sql_names():
    prog = compile_program(BID + "CREATE VIEW v WITH ('emit_final' = 'WINDOW_END') AS SELECT auction, window_end, "
                           "COUNT(*) AS n FROM TUMBLE(bid, date_time, INTERVAL '10' SECOND) GROUP BY auction, "
                           "window_end")
    v = prog.views["v"]
    assert v.emit_final == "window_end" and ("emit_final", "window_end") in v.options
    assert prog.final["v"] == Bound(1, (("bid", 0),))
    out = prog.circuit.outputs["v"]
    assert out.integral is not None and not v.materialized
    assert prog.gc[out.integral] == Bound(1, (("bid", 0),))


def test_unbounded_view_cannot_emit_final_even_through_a_view():
    sql = BID + ("CREATE VIEW w AS SELECT auction, MAX(date_time) AS t FROM bid GROUP BY auction;\n"
                 "CREATE VIEW v WITH ('emit_final' = 't') AS SELECT t FROM w")
    compile_error(sql, UnsupportedError, "column t of view v is not", 3, "'t'")


# ---------------------------------------------------------------------------------------- explain
def test_explain_prints_bounds_gc_and_emit_final():
    prog = compile_program(BID + "CREATE VIEW v WITH ('emit_final' = 'window_end') AS SELECT auction, window_start, "
                           "window_end, COUNT(*) AS n FROM TUMBLE(bid, date_time, INTERVAL '10' SECOND) GROUP BY "
                           "auction, window_start, window_end")
    text = prog.explain("v")
    tail = text.split("watermark bounds:\n")[1]
    assert "#0 c2 >= min(W(bid))" in tail
    assert "c1 >= min(W(bid) - 10s)" in tail and "c2 >= min(W(bid))" in tail
    gc = tail.split("gc:\n")[1]
    agg = next(op.id for op in prog.circuit.ops if op.kind == "aggregate")
    assert f"#{agg} drop rows with c1 < min(W(bid) - 10s)" in gc
    assert text.rstrip().endswith("emit final: window_end (c2) >= min(W(bid))")


# ---------------------------------------------------------------------------------------- the bounds hold
@pytest.mark.parametrize("window", ["TUMBLE(t, ts, INTERVAL '10' SECOND)",
                                    "TUMBLE(t, ts, INTERVAL '1' MINUTE, INTERVAL '15' SECOND)",
                                    "HOP(t, ts, INTERVAL '2' SECOND, INTERVAL '10' SECOND)",
                                    "HOP(t, ts, INTERVAL '5' MINUTE, INTERVAL '1' HOUR, INTERVAL '1' MINUTE)"])
def test_window_bounds_hold_in_duckdb(window):
    """window_start >= ts - size and window_end >= ts for the binder's own expressions, evaluated by DuckDB
    on random timestamps (before and after the epoch), and the offsets are the brief's (-size, 0)."""
    import duckdb
    prog = compile_program("CREATE TABLE t (k INT, ts TIMESTAMP LATENESS INTERVAL 1 SECOND);"
                           f"CREATE VIEW v AS SELECT k, ts, window_start, window_end FROM {window}",
                           disabled_rules=frozenset({"*"}))
    branches = [n for n in _walk(prog.views["v"].plan) if isinstance(n, Project) and "window_start" in n.names
                and "TIMESTAMP_MICROS" in n.exprs[n.names.index("window_start")].sql]
    assert branches
    rng = random.Random(7)
    stamps = [rng.randrange(-10 ** 15, 10 ** 15) for _ in range(300)] + [0, -1, 1, 10 ** 7, -10 ** 7]
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.execute("CREATE TABLE r (c0 INT, c1 BIGINT, c2 TIMESTAMP)")
    con.executemany("INSERT INTO r VALUES (1, ?, make_timestamp(?))", [(s, s) for s in stamps])
    size = {"TUMBLE(t, ts, INTERVAL '10' SECOND)": 10, "TUMBLE(t, ts, INTERVAL '1' MINUTE, INTERVAL '15' SECOND)": 60,
            "HOP(t, ts, INTERVAL '2' SECOND, INTERVAL '10' SECOND)": 10,
            "HOP(t, ts, INTERVAL '5' MINUTE, INTERVAL '1' HOUR, INTERVAL '1' MINUTE)": 3600}[window] * 10 ** 6
    offsets = {"window_start": [], "window_end": []}
    for p in branches:
        ts_col = p.names.index("ts")
        ts_in = int(p.exprs[ts_col].sql[1:])
        for name in ("window_start", "window_end"):
            e = p.exprs[p.names.index(name)]
            terms = expr_bound(e.sql, {ts_in: (("t", 0),)})
            assert terms is not None and len(terms) == 1, e.sql
            off = terms[0][1]
            offsets[name].append(off)
            sql = in_duckdb(e.sql.replace(f"c{ts_in}", "c2"))
            rows = con.execute(f"SELECT c1, epoch_us({sql}) FROM r").fetchall()
            bad = [(s, v) for s, v in rows if v < s + off]
            assert not bad, (name, e.sql, bad[:3])
    assert min(offsets["window_start"]) == -size and min(offsets["window_end"]) == 0


@pytest.mark.parametrize("sql", ["c2 + INTERVAL '1' MINUTE", "c2 - INTERVAL '90' SECOND",
                                 "DATE_TRUNC('HOUR', c2)", "DATE_TRUNC('WEEK', c2)", "DATE_TRUNC('DAY', c2)",
                                 "CAST(c2 AS TIMESTAMP)", "TIMESTAMP_MICROS(UNIX_MICROS(c2) - 5)",
                                 "TIMESTAMP_MICROS(UNIX_MICROS(c2) - UNIX_MICROS(c2) % 7 + 3)"])
def test_expression_bounds_hold_in_duckdb(sql):
    import duckdb
    terms = expr_bound(sql, {2: (("t", 0),)})
    assert terms is not None and len(terms) == 1
    off = terms[0][1]
    rng = random.Random(11)
    stamps = [rng.randrange(-10 ** 15, 10 ** 15) for _ in range(300)]
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.execute("CREATE TABLE r (c1 BIGINT, c2 TIMESTAMP)")
    con.executemany("INSERT INTO r VALUES (?, make_timestamp(?))", [(s, s) for s in stamps])
    bad = [(s, v) for s, v in con.execute(f"SELECT c1, epoch_us({in_duckdb(sql)}) FROM r").fetchall()
           if v < s + off]
    assert not bad, bad[:3]


def test_expressions_without_bounds():
    for sql in ("c2 + c2", "c1", "DATE_TRUNC('MONTH', c2)", "c2 + INTERVAL '1' MONTH", "CAST(c2 AS DATE)",
                "TIMESTAMP_MICROS(UNIX_MICROS(c2) - c1)", "c2 - INTERVAL '1' SECOND * c1", "COALESCE(c2, c3)"):
        assert expr_bound(sql, {2: (("t", 0),)}) is None, sql


def in_duckdb(sql: str) -> str:
    """A bound expression as DuckDB runs it: the binder writes Spark's TIMESTAMP_MICROS for TUMBLE / HOP."""
    import sqlglot
    from sqlglot import exp

    def fn(n):
        if isinstance(n, exp.Anonymous) and n.name.upper() == "TIMESTAMP_MICROS":
            return exp.Anonymous(this="MAKE_TIMESTAMP", expressions=list(n.expressions))
        return n
    return sqlglot.parse_one(sql, read="duckdb").transform(fn).sql(dialect="duckdb")


def _walk(node):
    yield node
    for c in node.inputs:
        yield from _walk(c)


# ---------------------------------------------------------------------------------------- regenerating
def update(path: str) -> None:
    """Rewrite the ``-- expect:`` blocks of a fixture file from the planner's output."""
    schema, cases = parse_fixture(path)
    by_line = {c.line: c for c in cases}
    lines = open(path).read().splitlines()
    out: List[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        out.append(line)
        i += 1
        if line.startswith("-- title:"):
            case = by_line[i]
            while i < len(lines) and lines[i].strip() != "-- expect:" and not lines[i].startswith("-- title:"):
                if lines[i].strip():
                    out.append(lines[i])
                i += 1
            while i < len(lines) and not lines[i].startswith("-- title:"):
                i += 1   # the old expectation
            out.append("-- expect:")
            out += ["-- " + s for s in summary(run_case(schema, case)).splitlines()]
            out.append("")
    open(path, "w").write("\n".join(out).rstrip() + "\n")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--update"]:
        for p in sys.argv[2:] or fixture_files():
            update(p)
