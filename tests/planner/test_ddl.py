"""DDL beyond columns and keys: view column lists, FOREIGN KEY / REFERENCES (recorded, checked at compile
time, not enforced, as in Feldera) and Feldera's CREATE LOCAL VIEW (read by other views, with no output)."""
import pytest

from planner.errors import BindError, UnsupportedError
from planner.program import compile_program

from .test_compile_errors import compile_error

U = "CREATE TABLE u (id INT PRIMARY KEY, x INT);\n"


def test_a_view_column_list_names_the_columns_in_order():
    p = compile_program(U + "CREATE VIEW w (a, b) AS SELECT x, id FROM u;\n"
                            "CREATE MATERIALIZED VIEW z (total) AS SELECT SUM(a) FROM w;")
    assert [f.name for f in p.views["w"].plan.fields] == ["a", "b"]
    assert [f.name for f in p.views["z"].plan.fields] == ["total"]


@pytest.mark.parametrize("view, fragment, at", [
    ("CREATE VIEW w (a) AS SELECT x, id FROM u;", "view w names 1 column but its query gives 2", "a)"),
    ("CREATE VIEW w (a, A) AS SELECT x, id FROM u;", "column a is named twice in view w's column list", "A)"),
])
def test_a_view_column_list_must_name_each_column_once(view, fragment, at):
    compile_error(U + view, BindError, fragment, 2, at)


def test_foreign_keys_are_recorded_not_enforced():
    p = compile_program(U + "CREATE TABLE t (k INT REFERENCES u, v INT, w INT,\n"
                            "  FOREIGN KEY (v, w) REFERENCES u (id, x));\nCREATE VIEW j AS SELECT k FROM t;")
    fks = p.tables["t"].foreign_keys
    assert [(f.columns, f.table, f.referenced) for f in fks] == [(("k",), "u", ()), (("v", "w"), "u", ("id", "x"))]


@pytest.mark.parametrize("table, fragment, at", [
    ("CREATE TABLE t (k INT REFERENCES nope (id));", "table t references table nope, which the program does not "
     "declare", "REFERENCES"),
    ("CREATE TABLE t (k INT REFERENCES u (y));", "table t references column 'y', which is not a column of u",
     "REFERENCES"),
    ("CREATE TABLE t (k INT, FOREIGN KEY (k, k) REFERENCES u (id));", "FOREIGN KEY has 2 column(s) and references 1",
     "REFERENCES"),
    ("CREATE TABLE t (k INT, FOREIGN KEY (z) REFERENCES u);", "FOREIGN KEY column 'z' is not a column of t",
     "REFERENCES"),
])
def test_a_foreign_key_names_what_the_program_declares(table, fragment, at):
    compile_error(U + table, BindError, fragment, 2, at)


def test_a_foreign_key_action_is_rejected():
    compile_error(U + "CREATE TABLE t (k INT REFERENCES u (id) ON DELETE CASCADE);", UnsupportedError,
                  "ON DELETE / ON UPDATE actions of a FOREIGN KEY are not supported", 2, "REFERENCES")


def test_a_local_view_is_read_by_views_and_has_no_output(make_pipeline):
    p = make_pipeline(U + "CREATE LOCAL VIEW big AS SELECT id, x FROM u WHERE x > 1;\n"
                          "CREATE MATERIALIZED VIEW n AS SELECT COUNT(*) AS c FROM big;")
    assert p.program.views["big"].local and not p.program.views["n"].local
    with pytest.raises(BindError, match="'big' is a LOCAL view"):
        p.listen("big")
    with pytest.raises(BindError, match="'big' is a LOCAL view"):
        p.foreach_chunk("big", lambda chunk, seq: None)
    p.execute("INSERT INTO u VALUES (1, 5), (2, 0), (3, 7)")
    p.wait_for_idle()
    assert [r["c"] for r in p.query("SELECT * FROM n")] == [2]


@pytest.mark.parametrize("view, word", [
    ("CREATE LOCAL MATERIALIZED VIEW big AS SELECT id FROM u;", "MATERIALIZED"),
    ("CREATE LOCAL VIEW big WITH ('connectors' = '[]') AS SELECT id FROM u;", "given connectors"),
])
def test_a_local_view_cannot_be_an_output(view, word):
    with pytest.raises(UnsupportedError) as e:
        compile_program(U + view)
    assert f"a LOCAL view has no output, so view big cannot be {word}" in str(e.value), str(e.value)
