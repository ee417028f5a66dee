"""PRIMARY KEY tables: an insert of an existing key replaces the row (upsert), deletes need only the key,
duplicate keys within one batch are rejected; differential test against DuckDB over the upserted table."""
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sqlengine import InputError

from ..support.oracle import Model, bag, bag_from_changes, diff
from .test_steps import Chunks, push

SQL = """CREATE TABLE p (id INT PRIMARY KEY, g INT, v VARCHAR NOT NULL);
CREATE MATERIALIZED VIEW per_g AS SELECT g, COUNT(*) AS n, MAX(v) AS mv FROM p GROUP BY g;
CREATE VIEW rows_ AS SELECT id, g, v FROM p;"""


def test_upsert_and_delete_by_key(make_pipeline):
    pipe = make_pipeline(SQL, start=False)
    c = Chunks(pipe, "rows_")
    pipe.start()
    push(pipe, "p", [(1, 10, "a"), (2, 10, "b")], ["id", "g", "v"])
    assert c.last() == {(1, 10, "a"): 1, (2, 10, "b"): 1}
    push(pipe, "p", [(1, 20, "z")], ["id", "g", "v"])                     # replaces id 1
    assert c.last() == {(1, 10, "a"): -1, (1, 20, "z"): 1}
    pipe.input_json("p", [{"delete": {"id": 2}}], update_format="insert_delete")   # key only
    pipe.wait_for_idle()
    assert c.last() == {(2, 10, "b"): -1}
    pipe.input_pandas("p", pd.DataFrame({"id": [1]}), delete=True)
    pipe.wait_for_idle()
    assert c.last() == {(1, 20, "z"): -1}
    assert list(pipe.query("SELECT COUNT(*) AS n FROM p")) == [{"n": 0}]


def test_duplicate_key_in_one_batch_is_rejected(make_pipeline):
    pipe = make_pipeline(SQL)
    with pytest.raises(InputError, match=r"duplicate primary key \(id=1\) inserted twice in one batch, rows 0 and 2"):
        pipe.input_pandas("p", pd.DataFrame({"id": [1, 2, 1], "g": [1, 1, 1], "v": ["a", "b", "c"]}))
    with pytest.raises(InputError, match="column id, row 0: NULL in a NOT NULL column"):
        pipe.input_json("p", [{"delete": {"g": 1}}], update_format="insert_delete")
    pipe.input_json("p", [{"delete": {"id": 5}}, {"insert": {"id": 5, "g": 1, "v": "x"}}],
                    update_format="insert_delete")     # an update: delete then insert of one key
    pipe.wait_for_idle()
    assert list(pipe.query("SELECT id, v FROM p")) == [{"id": 5, "v": "x"}]


ROW = st.tuples(st.integers(0, 4), st.sampled_from([None, 1, 2]), st.sampled_from(["a", "b", "c"]))
STEP = st.lists(st.tuples(st.sampled_from(["insert", "delete"]), ROW), min_size=1, max_size=6)


@given(st.lists(STEP, min_size=1, max_size=3))
def test_primary_key_differential(make_pipeline, steps):
    pipe = make_pipeline(SQL, start=False)
    h = {v: pipe.listen(v) for v in ("per_g", "rows_")}
    pipe.start()
    table = {}
    for step in steps:
        for kind, (i, g, v) in step:   # one call per change: keys repeat across calls, not within one
            if kind == "insert":
                pipe.input_json("p", [{"id": i, "g": g, "v": v}])
                table[i] = (i, g, v)
            else:
                pipe.input_json("p", [{"delete": {"id": i}}], update_format="insert_delete")
                table.pop(i, None)
        pipe.wait_for_idle()
        model = Model("CREATE TABLE p (id INT PRIMARY KEY, g INT, v VARCHAR NOT NULL);", {"p": ["id", "g", "v"]})
        model.insert("p", list(table.values()))
        con = model.duck()
        for view, select in (("per_g", "SELECT g, COUNT(*) AS n, MAX(v) AS mv FROM p GROUP BY g"),
                             ("rows_", "SELECT id, g, v FROM p")):
            problem = diff(bag_from_changes(h[view].to_pandas()), model.view(con, select))
            assert not problem, f"{view}: {problem}"
