"""Append-only tables (``WITH ('append_only' = 'true')``): a table that nothing reads is a stream and keeps no state;
it takes no deletes; it cannot be queried ad hoc unless materialized, nor start being read by a later program.

The views over it are checked after every step against DuckDB recomputing them from scratch, as bags with exact
multiplicities, on the driver and (``tests/executor/test_spark_path.py``) with every step on Spark.
"""
from __future__ import annotations

import random

import pandas as pd
import pytest

from planner import compile_program
from planner.errors import BindError, InputError, PipelineError, UnsupportedError

from ..support.oracle import Model, bag, bag_from_changes, diff

DUCK_SCHEMA = ("CREATE TABLE bid (auction BIGINT, price DOUBLE, bidder VARCHAR, n INT);"
               "CREATE TABLE seller (auction BIGINT, name VARCHAR);")
SCHEMA = ("CREATE TABLE bid (auction BIGINT, price DOUBLE, bidder VARCHAR, n INT) WITH ('append_only' = 'true');"
          "CREATE TABLE seller (auction BIGINT, name VARCHAR);")
COLUMNS = {"bid": ["auction", "price", "bidder", "n"], "seller": ["auction", "name"]}
VIEWS = [   # (name, select, materialized)
    ("proj", "SELECT auction, price * 2 AS doubled, UPPER(bidder) AS who FROM bid", False),
    ("filt", "SELECT auction, price FROM bid WHERE price > 1.5 OR bidder IS NULL", True),
    ("per_auction", "SELECT auction, COUNT(*) AS bids, SUM(n) AS total, AVG(n) AS mean FROM bid GROUP BY auction",
     True),
]
JOIN = ("named", "SELECT s.name, b.price FROM bid b JOIN seller s ON b.auction = s.auction", True)


def _program(views, schema=SCHEMA) -> str:
    return schema + "".join(f"CREATE {'MATERIALIZED ' if m else ''}VIEW {n} AS {q};" for n, q, m in views)


def _bid_rows(rng: random.Random, k: int):
    return [(rng.choice([1, 2, 3, None]), rng.choice([0.5, 1.5, 2.0, float("nan"), None, -0.0]),
             rng.choice(["a", "b", None, "é"]), rng.choice([1, 2, None])) for _ in range(k)]


def test_a_table_nothing_reads_is_a_stream(make_pipeline):
    """Views over an append-only table that only filter, project and sum keep no copy of it: no state runs for
    the table, and every view equals DuckDB's after every step, inserts in batches with duplicates and NULLs."""
    p = make_pipeline(_program(VIEWS), start=False)
    streams = {n: p.listen(n) for n, _, _ in VIEWS}
    p.start()
    circuit = p.program.circuit
    assert circuit.ops[circuit.tables["bid"][1]].mode == "stream"
    assert "tables: bid (stream: not stored)" in p.explain("proj").splitlines()
    model = Model(DUCK_SCHEMA, COLUMNS)
    rng = random.Random(5)
    for step in range(6):
        rows = _bid_rows(rng, rng.randint(1, 30))
        rows += rows[: rng.randint(0, 3)]   # duplicates
        p.input_pandas("bid", pd.DataFrame(rows, columns=COLUMNS["bid"], dtype=object))
        model.insert("bid", rows)
        p.wait_for_idle()
        con = model.duck([(n, q) for n, q, _ in VIEWS])
        for name, select, materialized in VIEWS:
            want = model.view(con, select)
            problem = diff(bag_from_changes(streams[name].to_pandas()), want)
            assert not problem, f"step {step}, view {name}: {problem}"
            if materialized:
                problem = diff(bag(tuple(r.values()) for r in p.query(f"SELECT * FROM {name}")), want)
                assert not problem, f"step {step}, view {name} (query): {problem}"
        con.close()
    assert circuit.tables["bid"][1] not in p.engine.keys, "the stream's integral owns state"
    assert not [k for k in p.store.current.runs if k.startswith("table-bid-")], p.store.current.runs.keys()


def test_a_join_keeps_only_the_columns_it_reads_of_an_append_only_table(make_pipeline):
    """An append-only table read by a join is a stream all the same: the join keeps the columns it reads of
    the table's rows (its own narrowed state), not the rows whole; the other side takes deletes."""
    p = make_pipeline(_program(VIEWS + [JOIN]), start=False)
    stream = p.listen("named")
    p.start()
    circuit = p.program.circuit
    assert circuit.ops[circuit.tables["bid"][1]].mode == "stream"
    assert "tables: bid (stream: not stored), seller (stored)" in p.explain("named").splitlines()
    join = next(op for op in circuit.ops if op.kind == "join")
    assert [len(circuit.ops[r].node.fields) for r in join.reads] == [2, 2]   # bid: auction, price of 4
    model = Model(DUCK_SCHEMA, COLUMNS)
    rng = random.Random(9)
    sellers = []
    for step in range(5):
        rows = _bid_rows(rng, rng.randint(1, 20))
        p.input_pandas("bid", pd.DataFrame(rows, columns=COLUMNS["bid"], dtype=object))
        model.insert("bid", rows)
        new = [(rng.choice([1, 2, 3, None]), rng.choice(["x", "y"])) for _ in range(2)]
        p.input_pandas("seller", pd.DataFrame(new, columns=COLUMNS["seller"], dtype=object))
        model.insert("seller", new)
        sellers += new
        if step % 2 and sellers:
            gone = [sellers.pop(0)]
            p.input_pandas("seller", pd.DataFrame(gone, columns=COLUMNS["seller"], dtype=object), delete=True)
            model.delete("seller", gone)
        p.wait_for_idle()
        con = model.duck([(JOIN[0], JOIN[1])])
        want = model.view(con, JOIN[1])
        con.close()
        assert not diff(bag_from_changes(stream.to_pandas()), want), f"step {step}"
        assert not diff(bag(tuple(r.values()) for r in p.query("SELECT * FROM named")), want)
    with pytest.raises(BindError, match="materialized"):   # a stream: declare it materialized to query it
        list(p.query("SELECT * FROM bid"))


def test_a_materialized_append_only_table_is_stored_whole_and_shared(make_pipeline):
    schema = SCHEMA.replace("WITH ('append_only' = 'true')", "WITH ('append_only' = 'true', 'materialized' = 'true')")
    p = make_pipeline(_program([JOIN], schema))
    circuit = p.program.circuit
    assert circuit.ops[circuit.tables["bid"][1]].mode == ""
    p.input_pandas("bid", pd.DataFrame([(1, 2.0, "a", 1), (2, 3.0, "b", 2)], columns=COLUMNS["bid"]))
    p.input_pandas("seller", pd.DataFrame([(1, "x")], columns=COLUMNS["seller"]))
    p.wait_for_idle()
    assert sorted(tuple(r.values()) for r in p.query("SELECT * FROM named")) == [("x", 2.0)]
    assert sorted(tuple(r.values()) for r in p.query("SELECT auction, n FROM bid")) == [(1, 1), (2, 2)]


def test_deletes_are_rejected_and_nothing_of_the_input_is_kept(make_pipeline):
    p = make_pipeline(_program(VIEWS))
    p.input_pandas("bid", pd.DataFrame([(1, 2.0, "a", 1)], columns=COLUMNS["bid"]))
    p.wait_for_idle()
    before = bag(tuple(r.values()) for r in p.query("SELECT * FROM per_auction"))
    mixed = pd.DataFrame([(2, 3.0, "b", 1)], columns=COLUMNS["bid"])
    with pytest.raises(InputError, match="append-only"):
        p.input_pandas("bid", mixed, delete=True)
    with pytest.raises(InputError, match="append-only"):
        p.input_json("bid", [{"insert": {"auction": 3, "price": 1.0, "bidder": "c", "n": 1}},
                             {"delete": {"auction": 1, "price": 2.0, "bidder": "a", "n": 1}}],
                     update_format="insert_delete")
    with pytest.raises(InputError, match="append-only") as e:
        p.execute("DELETE FROM bid WHERE auction = 1")
    assert "line 1" in str(e.value)
    p.wait_for_idle()
    assert bag(tuple(r.values()) for r in p.query("SELECT * FROM per_auction")) == before   # the insert of 3 too


def test_queries_need_the_table_stored(make_pipeline):
    p = make_pipeline(_program(VIEWS))
    with pytest.raises(Exception, match="append-only and not stored"):
        p.query_arrow("SELECT COUNT(*) FROM bid")
    q = make_pipeline(_program(VIEWS, SCHEMA.replace("('append_only' = 'true')",
                                                     "('append_only' = 'true', 'materialized' = 'true')")))
    q.input_pandas("bid", pd.DataFrame([(1, 2.0, "a", 1), (1, 2.0, "a", 1)], columns=COLUMNS["bid"]))
    q.wait_for_idle()
    assert q.query_arrow("SELECT COUNT(*) AS n FROM bid").to_pylist() == [{"n": 2}]


def test_a_stream_cannot_start_being_read_by_a_changed_program(make_pipeline, tmp_path):
    storage = str(tmp_path / "s")
    p = make_pipeline(_program(VIEWS), storage_dir=storage)
    p.input_pandas("bid", pd.DataFrame([(1, 2.0, "a", 1)], columns=COLUMNS["bid"]))
    p.wait_for_idle()
    p.stop()
    changed = make_pipeline(_program(VIEWS + [JOIN]), storage_dir=storage, start=False)
    with pytest.raises(UnsupportedError, match="table bid is append-only and was not stored"):
        changed.start()   # the join's state would need the stream's past rows
    changed.stop(force=True)   # (the storage stays locked from the Pipeline's creation to its stop)
    stored = make_pipeline(_program(VIEWS, SCHEMA.replace("'append_only' = 'true'", "'append_only' = 'true', "
                                                          "'materialized' = 'true'")), storage_dir=storage, start=False)
    with pytest.raises(PipelineError, match="append-only table that was not stored"):
        stored.start()   # a table that starts to keep its rows would lack its past ones
    stored.stop(force=True)
    new_view = make_pipeline(_program(VIEWS + [("later", "SELECT price FROM bid", True)]), storage_dir=storage,
                             start=False)
    with pytest.raises(UnsupportedError, match="table bid is append-only and was not stored"):
        new_view.start()   # its contents would need the stream's past rows
    new_view.stop(force=True)
    again = make_pipeline(_program(VIEWS), storage_dir=storage)   # the same program goes on
    again.input_pandas("bid", pd.DataFrame([(1, 4.0, "b", 2)], columns=COLUMNS["bid"]))
    again.wait_for_idle()
    assert {r["auction"]: r["bids"] for r in again.query("SELECT * FROM per_auction")} == {1: 2}


def test_append_only_and_a_primary_key_are_rejected_at_compile_time():
    with pytest.raises(UnsupportedError, match="PRIMARY KEY") as e:
        compile_program("CREATE TABLE t (k INT PRIMARY KEY, v INT) WITH ('append_only' = 'true');")
    assert e.value.line == 1
    with pytest.raises(UnsupportedError, match="'append_only' must be one of false, true"):
        compile_program("CREATE TABLE t (k INT) WITH ('append_only' = 'yes');")
