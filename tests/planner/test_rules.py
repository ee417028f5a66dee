"""The planner's rewrite rules: golden plans per rule, the pass manager's checks, and the fixtures' views
against DuckDB.

``tests/fixtures/rules/<rule>.sql`` holds, in the style of sqlglot's optimizer fixtures, a schema (the
CREATE TABLE statements at the top) and titled cases: one CREATE VIEW and, after ``-- plan:``, the view's
plan after that rule alone (run on the bound plan, before any rule), as ``format_plan`` prints it, each
line behind ``-- ``.  Cases after the line ``-- leaves alone:`` are programs the rule must not change (their
plan is the bound plan).  ``python -m tests.planner.test_rules --update`` rewrites the plans from the rules; read
every changed plan before keeping it.
"""
from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from typing import List, Optional

import duckdb
import pytest
from hypothesis import given
from hypothesis import strategies as st

from planner import compile_program
from planner.errors import InternalError
from planner.logical import Expr, Filter, format_plan
from planner.rules import RULES, Context, check_plan, optimize
from planner.rules.fold_constants import fold_expr
from planner.types import SqlType

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "rules")
RULE_NAMES = sorted({r.__name__ for r in RULES})
_VIEW = re.compile(r"CREATE\s+(?:MATERIALIZED\s+)?VIEW\s+(\w+)\s+AS\s+(.*?);?\s*$", re.I | re.S)


@dataclass
class Case:
    rule: str
    title: str
    view_sql: str           # the CREATE VIEW statement
    plan: Optional[str]     # expected plan text (None: not written yet)
    unchanged: bool         # in the "leaves alone" section
    line: int

    @property
    def select(self) -> str:
        return _VIEW.match(self.view_sql).group(2)


def parse_fixture(path: str):
    """(schema SQL, cases) of one fixture file."""
    rule = os.path.basename(path)[:-len(".sql")]
    schema: List[str] = []
    cases: List[Case] = []
    unchanged = False
    cur = None
    for no, line in enumerate(open(path).read().splitlines(), start=1):
        if line.startswith("-- title:"):
            cur = {"title": line[len("-- title:"):].strip(), "sql": [], "plan": None, "line": no}
            cases.append(cur)
        elif line.strip() == "-- leaves alone:":
            unchanged, cur = True, None
            continue
        elif cur is None:
            if not line.startswith("--"):
                schema.append(line)
        elif line.strip() == "-- plan:":
            cur["plan"] = []
        elif cur["plan"] is not None:
            if line.startswith("-- "):
                cur["plan"].append(line[3:])
        elif not line.startswith("--"):
            cur["sql"].append(line)
        if cur is not None:
            cur["unchanged"] = unchanged
    out = []
    for c in cases:
        plan = "\n".join(c["plan"]).rstrip() if c["plan"] is not None else None
        out.append(Case(rule, c["title"], "\n".join(c["sql"]).strip(), plan, c["unchanged"], c["line"]))
    return "\n".join(schema).strip(), out


def fixture_files():
    return sorted(os.path.join(FIXTURES, f) for f in os.listdir(FIXTURES) if f.endswith(".sql"))


def all_cases():
    for path in fixture_files():
        schema, cases = parse_fixture(path)
        for c in cases:
            yield pytest.param(schema, c, id=f"{c.rule}:{c.line}")


def rule_by_name(name: str):
    return next(r for r in RULES if r.__name__ == name)


def run_case(schema: str, case: Case):
    """(bound plan, plan after the rule alone)."""
    prog = compile_program(schema + "\n" + case.view_sql, disabled_rules=frozenset({"*"}))
    (view,) = prog.views.values()
    ctx = Context(tables=prog.tables, views={})
    return view.bound, rule_by_name(case.rule)(view.bound, ctx)


def test_every_rule_has_golden_plans():
    have = {os.path.basename(p)[:-4] for p in fixture_files()}
    assert set(RULE_NAMES) <= have, f"rules without tests/fixtures/rules/<rule>.sql: {set(RULE_NAMES) - have}"
    for path in fixture_files():
        _, cases = parse_fixture(path)
        assert any(not c.unchanged for c in cases) and any(c.unchanged for c in cases), path


@pytest.mark.parametrize("schema, case", list(all_cases()))
def test_golden_plan(schema, case):
    bound, out = run_case(schema, case)
    assert case.plan is not None, f"{case.title}: no expected plan"
    assert [(f.name, f.type) for f in out.fields] == [(f.name, f.type) for f in bound.fields]
    assert check_plan(out) is None, check_plan(out)
    if case.unchanged:
        assert out == bound, f"{case.title}: the rule must leave this plan alone, but made\n{format_plan(out)}"
    assert format_plan(out) == case.plan, f"{case.title}\n--- expected\n{case.plan}\n--- got\n{format_plan(out)}"
    # running the rule again changes nothing more
    assert rule_by_name(case.rule)(out, Context()) == out, f"{case.title}: not idempotent"


# ---------------------------------------------------------------------------------------- the pass manager
def test_pass_manager_names_the_rule_that_breaks_the_plan(monkeypatch):
    from planner.rules import manager

    def break_filters(plan, ctx):
        return Filter(plan, Expr("c99 > 0", SqlType("BOOLEAN")))

    def rename(plan, ctx):
        from planner.logical import Project, col
        return Project(plan, tuple(Expr(col(i), f.type) for i, f in enumerate(plan.fields)),
                       tuple("x" + f.name for f in plan.fields))

    prog = compile_program("CREATE TABLE t (a INT); CREATE VIEW v AS SELECT a FROM t WHERE a > 1")
    bound = prog.views["v"].bound
    for bad, message in ((break_filters, "rule break_filters made an invalid plan: Filter (Filter c99 > 0): "
                                         "c99 > 0 reads c99, but its input has 1 columns"),
                         (rename, "rule rename changed the view's columns from (a INT) to (xa INT)")):
        monkeypatch.setattr(manager, "RULES", (bad,))
        with pytest.raises(InternalError) as e:
            manager.optimize(bound, Context())
        assert message in str(e.value)


def test_rules_off_by_environment(monkeypatch):
    sql = ("CREATE TABLE t (a INT, b INT, c INT); CREATE TABLE u (a INT, d INT);"
           "CREATE VIEW v AS SELECT * FROM (SELECT t.b, u.d FROM t JOIN u ON t.a = u.a) s WHERE b > 1")
    on = compile_program(sql).views["v"]
    monkeypatch.setenv("SQLENGINE_RULES", "off")
    off = compile_program(sql).views["v"]
    assert off.plan == off.bound and on.plan != on.bound
    monkeypatch.setenv("SQLENGINE_RULES", "-prune_columns,-remove_noop_projects")
    some = compile_program(sql)
    text = some.explain("v", passes=True)
    assert "-- prune_columns: disabled" in text and "-- after push_down_filters (" in text
    assert "Filter c1 > 1" in text.split("logical plan:")[1]
    monkeypatch.setenv("SQLENGINE_RULES", "nope")
    with pytest.raises(ValueError, match="unknown rules"):
        compile_program(sql)


def test_explain_passes_prints_each_rule_with_its_time():
    prog = compile_program("CREATE TABLE t (a INT, b INT); CREATE VIEW v AS SELECT a FROM t WHERE a > 1 AND TRUE")
    text = prog.explain("v", passes=True)
    for r in RULES:
        assert re.search(rf"-- after {r.__name__} \(\d+\.\d\d ms\)", text), r.__name__
    assert text.index("-- bound plan") < text.index("logical plan:") < text.index("incremental circuit:")
    assert "rewrite rules:" not in prog.explain("v")


def test_other_views_plans_are_left_alone():
    """A view over another view reads that view's operators and state; rules do not rewrite inside it."""
    prog = compile_program("CREATE TABLE t (a INT, b INT, c INT);"
                           "CREATE VIEW v1 AS SELECT a, b, c, COUNT(*) AS n FROM t GROUP BY a, b, c;"
                           "CREATE VIEW v2 AS SELECT a FROM v1 WHERE a > 1")
    v1, v2 = prog.views["v1"].plan, prog.views["v2"].plan
    text = format_plan(v2)
    assert format_plan(v1) in "\n".join(line[4:] for line in text.splitlines()), text
    out1 = prog.circuit.outputs["v1"].delta
    assert out1 in {op.id for op in prog.circuit.upstream(prog.circuit.outputs["v2"].delta)}


def test_rules_keep_the_text_they_do_not_change():
    """Rules edit expression text (sqlglot would write the binder's UNIX_MICROS, for TUMBLE, as DuckDB's
    EPOCH_US, which Spark does not have)."""
    prog = compile_program(
        "CREATE TABLE bid (auction BIGINT, price BIGINT, date_time TIMESTAMP);"
        "CREATE VIEW v AS SELECT * FROM (SELECT auction, window_start, COUNT(*) AS n FROM TUMBLE(bid, date_time, "
        "INTERVAL '10' SECOND) GROUP BY auction, window_start) q WHERE window_start > TIMESTAMP '2024-01-01' "
        "AND n > 1 + 1 AND TRUE")
    text = format_plan(prog.views["v"].plan)
    assert "UNIX_MICROS" in text and "EPOCH_US" not in text, text
    assert "c2 > 2" in text and "TRUE" not in text, text


def test_equal_subplans_are_pruned_alike():
    """The same join used twice with different columns read is narrowed once (one shared integral)."""
    prog = compile_program("CREATE TABLE t (a INT, b INT, c INT); CREATE TABLE u (a INT, d INT, e INT);"
                           "CREATE VIEW v AS SELECT x.b, y.e FROM (SELECT t.b, u.a FROM t JOIN u ON t.a = u.a WHERE "
                           "u.d > 0) x JOIN (SELECT t.c, u.e, u.a FROM t JOIN u ON t.a = u.a WHERE u.d > 0) y "
                           "ON x.a = y.a")
    joins = [op for op in prog.circuit.ops if op.kind == "join"]
    assert len(joins) == 2, prog.explain("v")


# ---------------------------------------------------------------------------------------- fold_constants vs DuckDB
FOLD_TYPES = [SqlType("INT"), SqlType("TINYINT"), SqlType("BOOLEAN"), SqlType("VARCHAR"), SqlType("BIGINT")]
FOLD_CASES = [
    "c0 + (1 + 2)", "c1 + (1 + 2)", "c1 + 2 * 3", "c0 > 1 + 1", "c0 > CAST('5' AS INT) + 1", "c2 AND TRUE",
    "c2 OR FALSE", "c2 AND (1 < 2)", "NOT (2 > 1)", "NOT CAST(NULL AS BOOLEAN)", "c0 > 1 AND NULL = 1",
    "CASE WHEN TRUE THEN c0 ELSE 2 END", "CASE WHEN 1 = 2 THEN c0 ELSE 2 END", "c1 + CASE WHEN FALSE THEN c0 ELSE 2 END",
    "CASE WHEN 1 = 2 THEN c1 WHEN c0 > 0 THEN c1 END", "CASE WHEN FALSE THEN c3 END", "CAST(42 AS VARCHAR) || c3",
    "c3 = CAST(7 AS VARCHAR)", "'b' > 'a' AND c2", "1.5 = 1.50", "CAST('12' AS SMALLINT) + c1", "c4 * (2 - 3)",
    "5 IS NULL", "NULL IS NULL", "c0 IS NULL OR FALSE", "(c0 > 1 OR TRUE) AND c2",
]
FOLD_ROWS = [(1, 3, True, "x", 5), (None, None, None, None, None), (-7, 120, False, "7", -(2 ** 40)), (0, -128, True, "", 0)]


@pytest.mark.parametrize("sql", FOLD_CASES)
def test_folding_keeps_duckdb_value_and_type(sql):
    con = duckdb.connect()
    con.execute("CREATE TABLE r (c0 INT, c1 TINYINT, c2 BOOLEAN, c3 VARCHAR, c4 BIGINT)")
    con.executemany("INSERT INTO r VALUES (?, ?, ?, ?, ?)", FOLD_ROWS)
    folded = fold_expr(Expr(sql, SqlType("UNKNOWN")), FOLD_TYPES).sql

    def run(e):
        return con.sql(f"SELECT typeof({e}), {e} FROM r ORDER BY c4 NULLS FIRST").fetchall()

    assert run(folded) == run(sql), f"{sql} -> {folded}"


def test_folding_folds():
    fold = {s: fold_expr(Expr(s, SqlType("UNKNOWN")), FOLD_TYPES).sql for s in FOLD_CASES}
    assert fold["c0 > 1 + 1"] == "c0 > 2" and fold["c2 AND TRUE"] == "c2" and fold["NOT (2 > 1)"] == "FALSE"
    assert fold["c1 + (1 + 2)"] == "c1 + CAST(3 AS INT)" and fold["5 IS NULL"] == "FALSE"
    assert fold["CASE WHEN TRUE THEN c0 ELSE 2 END"] == "c0"
    assert fold["CASE WHEN 1 = 2 THEN c0 ELSE 2 END"] == "CAST(2 AS INT)"


# ---------------------------------------------------------------------------------------- the fixtures' views vs DuckDB
TABLES = {
    "t": st.tuples(st.sampled_from([None, 0, 1, 2, 3]), st.sampled_from([None, -1, 0, 1, 2]),
                   st.sampled_from([None, -0.5, 0.0, 1.5]), st.sampled_from([None, "5", "7", "-1"]),
                   st.sampled_from([None, True, False])),
    "u": st.tuples(st.sampled_from([None, 0, 1, 2, 4]), st.sampled_from([None, -1, 1, 2, 6]),
                   st.sampled_from([None, "x", "y"])),
    "w": st.tuples(st.sampled_from([0, 1, 2]), st.sampled_from([None, -3, 1, 100])),
}


def fixture_program(path: str):
    schema, cases = parse_fixture(path)
    con = duckdb.connect()
    con.execute(schema)
    columns = {t: [r[0] for r in con.execute(f"DESCRIBE {t}").fetchall()] for t in TABLES}
    views = [(f"case_{c.line}", c.select, i % 2 == 0) for i, c in enumerate(cases)]
    return schema, columns, views


@pytest.mark.parametrize("path", fixture_files(), ids=lambda p: os.path.basename(p))
@given(data=st.data())
def test_fixture_views_equal_duckdb(make_pipeline, path, data):
    """Every fixture's view, compiled with all rules, against DuckDB after every step of random changes."""
    from ..support.differential import run_program, steps_strategy
    schema, columns, views = fixture_program(path)
    steps = data.draw(steps_strategy(TABLES, max_steps=3, max_batch=5))
    run_program(make_pipeline, schema, columns, views, steps)


# ---------------------------------------------------------------------------------------- regenerating the plans
def update(path: str) -> None:
    """Rewrite the ``-- plan:`` blocks of a fixture file from the rule's output."""
    schema, cases = parse_fixture(path)
    lines = open(path).read().splitlines()
    by_line = {c.line: c for c in cases}
    out: List[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        out.append(line)
        i += 1
        if line.startswith("-- title:"):
            case = by_line[i]
            while i < len(lines) and lines[i].strip() != "-- plan:" and not lines[i].startswith("-- title:") \
                    and lines[i].strip() != "-- leaves alone:":
                if lines[i].strip():
                    out.append(lines[i])
                i += 1
            while i < len(lines) and not lines[i].startswith("-- title:") and lines[i].strip() != "-- leaves alone:":
                i += 1   # the old plan
            bound, got = run_case(schema, case)
            if case.unchanged and got != bound:
                print(f"{path}:{case.line}: {case.title}: CHANGED by the rule", file=sys.stderr)
            out.append("-- plan:")
            out += ["-- " + p for p in format_plan(got).splitlines()]
            out.append("")
    open(path, "w").write("\n".join(out).rstrip() + "\n")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--update"]:
        for p in sys.argv[2:] or fixture_files():
            update(p)
