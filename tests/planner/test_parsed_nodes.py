"""Nothing parsed is dropped: every sqlglot node type and every argument of the query nodes is either read by
the binder or rejected at compile time with a line and column (planner/parsed_nodes.py).

Pure planner (no Spark).
"""
import pytest
import sqlglot
from sqlglot import exp

from planner import compile_program
from planner.errors import UnsupportedError
from planner.parsed_nodes import ARGS_READ, HANDLED_NODES, all_node_types, check_parsed

T = "CREATE TABLE t (k INT, v VARCHAR);\nCREATE TABLE u (k INT, ts TIMESTAMP);\n"

# A query holding a node of each type whose arguments the binder declares.
QUERY_WITH = {
    exp.Select: "SELECT k FROM t", exp.Union: "SELECT k FROM t UNION SELECT k FROM u",
    exp.Intersect: "SELECT k FROM t INTERSECT SELECT k FROM u", exp.Except: "SELECT k FROM t EXCEPT SELECT k FROM u",
    exp.Subquery: "SELECT k FROM (SELECT k FROM t) s", exp.Join: "SELECT t.k FROM t JOIN u ON t.k = u.k",
    exp.Table: "SELECT k FROM t", exp.Star: "SELECT * FROM t", exp.Column: "SELECT k FROM t",
    exp.Group: "SELECT k FROM t GROUP BY k", exp.Distinct: "SELECT DISTINCT k FROM t",
    exp.Limit: "SELECT k FROM t ORDER BY k LIMIT 1", exp.LimitOptions: "SELECT k FROM t ORDER BY k LIMIT 1 ROWS",
    exp.Fetch: "SELECT k FROM t ORDER BY k FETCH FIRST 1 ROWS ONLY",
    exp.Ordered: "SELECT k FROM t ORDER BY k LIMIT 1", exp.Order: "SELECT k FROM t ORDER BY k LIMIT 1",
    exp.Offset: "SELECT k FROM t ORDER BY k LIMIT 1 OFFSET 1",
    exp.Window: "SELECT RANK() OVER (ORDER BY k) FROM t",
    exp.With: "WITH c AS (SELECT k FROM t) SELECT k FROM c", exp.CTE: "WITH c AS (SELECT k FROM t) SELECT k FROM c",
    exp.Columns: "SELECT COLUMNS('k') FROM t",
    exp.Unnest: "SELECT x FROM t CROSS JOIN UNNEST(t.a) AS u(x)",
}


def rejection(tree: exp.Expression, sql: str) -> UnsupportedError:
    with pytest.raises(UnsupportedError) as info:
        check_parsed(tree, sql)
    err = info.value
    assert err.line is not None and err.column is not None, str(err)
    for internal in ("sqlglot", "<class", "None"):
        assert internal not in err.message, err.message
    return err


def instance(cls: type) -> exp.Expression:
    """A node of type ``cls`` without arguments."""
    try:
        return cls()
    except Exception:   # a class whose constructor needs arguments
        node = cls.__new__(cls)
        exp.Expression.__init__(node)
        return node


def test_handled_types_include_what_views_use():
    for t in (exp.Select, exp.Union, exp.Join, exp.Column, exp.Add, exp.Upper, exp.Sum, exp.Window, exp.Case,
              exp.Cast, exp.AtTimeZone, exp.JSONPathKey, exp.Columns, exp.Star, exp.Qualify):
        assert t in HANDLED_NODES, t
    for t in (exp.Explode, exp.Unnest, exp.Lateral, exp.Pivot, exp.TableSample, exp.Values):
        assert t not in HANDLED_NODES, t


@pytest.mark.parametrize("cls", sorted(all_node_types(), key=lambda c: c.__name__), ids=lambda c: c.__name__)
def test_every_node_type_is_handled_or_rejected_with_its_position(cls):
    if cls in HANDLED_NODES:
        return
    sql = "SELECT k,\n  0 FROM t"
    tree = sqlglot.parse_one(sql, read="duckdb")
    literal = tree.expressions[1]
    node = instance(cls)
    node.meta.update(literal.meta)   # where the parser would have put it
    literal.replace(node)
    err = rejection(tree, sql)
    assert (err.line, err.column) == (2, 3), str(err)


def test_every_declared_arg_exists():
    for cls, read in ARGS_READ.items():
        assert read <= set(cls.arg_types), (cls.__name__, read - set(cls.arg_types))


@pytest.mark.parametrize("cls, key", [(cls, key) for cls in ARGS_READ for key in cls.arg_types
                                      if key not in ARGS_READ[cls]],
                         ids=lambda v: v.__name__ if isinstance(v, type) else v)
def test_every_other_arg_of_a_query_node_is_rejected_with_its_position(cls, key):
    sql = QUERY_WITH[cls]
    tree = sqlglot.parse_one(sql, read="duckdb")
    node = next(n for n in tree.walk() if type(n) is cls)
    node.set(key, exp.Literal.number(1))
    rejection(tree, sql)


def test_modifiers_the_issue_names_are_not_read():
    select = ARGS_READ[exp.Select]
    for key in ("windows", "sample", "locks", "into", "settings", "options", "laterals", "pivots",
                "connect", "prewhere", "hint", "kind"):
        assert key not in select, key
    assert "sample" not in ARGS_READ[exp.Table] and "pivots" not in ARGS_READ[exp.Table]
    assert "percent" not in ARGS_READ[exp.LimitOptions] and "with_ties" not in ARGS_READ[exp.LimitOptions]


@pytest.mark.parametrize("view, fragment, at", [
    ("SELECT COUNT(*) OVER w FROM t", "a named window (OVER name)", "w FROM"),
    ("SELECT k FROM t FOR UPDATE", "FOR UPDATE / FOR SHARE", "FOR"),
    ("SELECT k INTO x FROM t", "SELECT ... INTO", "x FROM"),
    ("SELECT DISTINCT ON (k) k FROM t", "DISTINCT ON", "k) k"),
    ("SELECT k FROM t PIVOT (SUM(k) FOR v IN ('a'))", "PIVOT / UNPIVOT", "SUM"),
    ("SELECT * FROM t, LATERAL (SELECT 1)", "LATERAL", "1)"),
    ("SELECT * FROM t WITH ORDINALITY", "WITH ORDINALITY", "t WITH"),
    ("SELECT * FROM t AT (VERSION => 1)", "time travel", "1)"),
    ("SELECT UNNEST([k, 2]), UNNEST([k]) AS j FROM t", "a second UNNEST in the SELECT list", "UNNEST([k]) AS"),
    ("SELECT k, UNNEST(LIST(k)) FROM t GROUP BY k", "UNNEST in the SELECT list beside GROUP BY", "UNNEST"),
    ("SELECT PERCENTILE_CONT(0.5) WITHIN GROUP (ORDER BY k DESC) FROM t", "WITHIN GROUP", "PERCENTILE_CONT"),
    ("SELECT * ILIKE 'K%' FROM t", "* ILIKE", "'K%'"),
    ("SELECT *COLUMNS('k') FROM t", "*COLUMNS(...)", "COLUMNS"),
    ("SELECT k FROM t INTERSECT BY NAME SELECT k FROM u", "BY NAME (it applies to UNION only)", "BY NAME"),
    ("SELECT * FROM ((SELECT k FROM t) ORDER BY k LIMIT 1)", "ORDER BY after a parenthesized query", "ORDER"),
    ("SELECT k FROM t ORDER BY k WITH FILL", "WITH FILL", "k WITH"),
])
def test_rejected_clause_is_located(view, fragment, at):
    sql = T + "CREATE VIEW w AS " + view
    with pytest.raises(UnsupportedError) as info:
        compile_program(sql)
    err = info.value
    assert fragment in err.message, str(err)
    line = sql.split("\n")[2]
    assert (err.line, err.column) == (3, line.index(at, len("CREATE VIEW w AS")) + 1), str(err)
