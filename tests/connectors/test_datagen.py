"""The ``datagen`` and ``nexmark`` sources: views over generated tables (with deletes) checked against DuckDB
recomputing them over the same generated rows; bounded input completes; restarts continue the stream;
generator specs checked at from_sql."""
import json
import time

import duckdb
import pytest

from connectors import nexmark_gen
from connectors.datagen import Generator
from planner.errors import ConnectorError
from sqlengine import Pipeline
from tests.support.oracle import Model, bag, diff


def decl(*connectors) -> str:
    return json.dumps(list(connectors)).replace("'", "''")


A_SCHEMA = "CREATE TABLE a (id BIGINT NOT NULL, k INT, amt DECIMAL(10, 2), tag VARCHAR, ts TIMESTAMP)"
B_SCHEMA = "CREATE TABLE b (k INT, name VARCHAR, w DOUBLE)"
A_CFG = {"count": 6000, "seed": 11, "deletes": 0.3, "delete_lag": 300, "batch_rows": 1000,
         "columns": {"id": {"sequence": {"start": 1}}, "k": {"zipf": {"n": 40, "s": 1.2}},
                     "amt": {"uniform": {"min": 1, "max": 100}, "null_fraction": 0.1},
                     "tag": {"choice": ["red", "green", None]},
                     "ts": {"timestamp": {"start": "2024-03-01 00:00:00", "rate": 100}}}}
B_CFG = {"count": 400, "seed": 5, "deletes": 0.25, "delete_lag": 20, "batch_rows": 100,
         "columns": {"k": {"uniform": {"min": 1, "max": 40}}, "name": {"zipf": {"n": 5}},
                     "w": {"uniform": {"min": -1, "max": 1}, "null_fraction": 0.2}}}
VIEW = ("SELECT a.tag, b.name, COUNT(*) AS n, SUM(a.amt) AS s, MAX(a.ts) AS last, SUM(b.w) AS sw "
        "FROM a JOIN b ON a.k = b.k GROUP BY a.tag, b.name")


def datagen(name, cfg):
    return decl({"name": name, "transport": {"name": "datagen", "config": cfg}})


def expected_rows(p, table, cfg):
    """The table's contents from the generator itself: every row inserted, minus those deleted."""
    g = Generator(p.program.tables[table], cfg)
    n = cfg["count"]
    rows = [tuple(r.values()) for r in g.named(g.rows(0, n)).to_pylist()]
    gone = g.deleted(0, n)
    assert len(gone) == len(set(gone.tolist()))   # never twice
    return rows, [rows[i] for i in gone.tolist()]


def test_datagen_join_aggregate_with_deletes(make_pipeline):
    sql = (f"{A_SCHEMA} WITH ('connectors' = '{datagen('gen', A_CFG)}');\n"
           f"{B_SCHEMA} WITH ('connectors' = '{datagen('gen', B_CFG)}');\n"
           f"CREATE MATERIALIZED VIEW v AS {VIEW};")
    p = make_pipeline(sql)
    p.wait_for_completion(timeout_s=60)
    model = Model(A_SCHEMA + ";" + B_SCHEMA, {"a": ["id", "k", "amt", "tag", "ts"], "b": ["k", "name", "w"]})
    for table, cfg in (("a", A_CFG), ("b", B_CFG)):
        rows, gone = expected_rows(p, table, cfg)
        model.insert(table, rows)
        model.delete(table, gone)
        assert 0.2 * len(rows) < len(gone) < 0.35 * len(rows)
        actual = bag([tuple(r.values()) for r in p.query(f"SELECT * FROM {table}")])
        assert not diff(actual, bag(list(model.rows[table].elements())))
        st = p.status()["connectors"][f"{table}.gen"]
        assert st["state"] == "finished" and st["position"] == {"rows": cfg["count"], "deletes": len(gone)}
        assert st["rows"] == len(rows) + len(gone)
    con = model.duck()
    expected = model.view(con, VIEW)
    actual = bag([tuple(r.values()) for r in p.query("SELECT * FROM v")])
    assert expected and not diff(actual, expected), diff(actual, expected)
    # NULLs came out at about the requested fraction, and zipf is skewed towards 1
    amts = [r["amt"] for r in p.query("SELECT amt FROM a")]
    assert 0.05 < sum(a is None for a in amts) / len(amts) < 0.15
    ks = [r["k"] for r in p.query("SELECT k FROM a")]
    assert ks.count(1) > ks.count(2) > ks.count(10) > 0


def test_datagen_restart_continues_the_stream(make_pipeline, tmp_path):
    cfg = {"count": 3000, "rate": 3000, "seed": 2, "deletes": 0.5, "delete_lag": 100,
           "columns": {"k": {"uniform": {"min": 0, "max": 9}}}}
    sql = f"CREATE TABLE t (id BIGINT, k SMALLINT) WITH ('connectors' = '{datagen('g', cfg)}');"
    store = str(tmp_path / "store")
    p = make_pipeline(sql, storage_dir=store)
    end = time.monotonic() + 20
    while (p.status()["connectors"]["t.g"]["position"] or {}).get("rows", 0) < 500:
        assert time.monotonic() < end
        time.sleep(0.02)
    p.stop()
    first = p.status()["connectors"]["t.g"]["position"]["rows"]
    assert first < 3000
    p = make_pipeline(sql, storage_dir=store)
    p.wait_for_completion(timeout_s=30)
    rows, gone = expected_rows(p, "t", cfg)
    want = bag(rows)
    want.subtract(bag(gone))
    assert not diff(bag([tuple(r.values()) for r in p.query("SELECT * FROM t")]), +want)
    assert p.status()["connectors"]["t.g"]["rows"] < len(rows) + len(gone)   # the second run did not start over


def test_generator_is_prefix_stable_and_fast():
    from planner import compile_program
    t = compile_program(A_SCHEMA).tables["a"]
    g = Generator(t, A_CFG)
    whole, w = g.batch(0, 3000)
    parts = [g.batch(lo, hi) for lo, hi in ((0, 1000), (1000, 1700), (1700, 3000))]
    assert bag([tuple(r.values()) + (x,) for r, x in zip(whole.to_pylist(), w)]) == \
        bag([tuple(r.values()) + (x,) for part, ws in parts for r, x in zip(part.to_pylist(), ws)])
    t0 = time.perf_counter()
    g.batch(0, 1_000_000)
    assert time.perf_counter() - t0 < 5   # vectorized: ~0.15 s here


NEXMARK = """
CREATE TABLE auction (id BIGINT, itemName VARCHAR, description VARCHAR, initialBid BIGINT, reserve BIGINT,
    date_time TIMESTAMP, expires TIMESTAMP, seller BIGINT, category BIGINT, extra VARCHAR)
    WITH ('connectors' = '{auction}');
CREATE TABLE bid (auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR, date_time TIMESTAMP)
    WITH ('connectors' = '{bid}');
"""
NEX_VIEWS = {
    "by_category": "SELECT a.category, COUNT(*) AS n, MAX(b.price) AS top, SUM(b.price) AS total "
                   "FROM bid b JOIN auction a ON b.auction = a.id GROUP BY a.category",
    "by_channel": "SELECT channel, COUNT(*) AS n, MIN(date_time) AS first FROM bid GROUP BY channel",
}


def test_nexmark_source(make_pipeline):
    events, seed = 20_000, 4

    def conn(table):
        return decl({"name": "nx", "transport": {"name": "nexmark", "config": {
            "table": table, "events": events, "seed": seed, "batch_events": 6000, "extra_scale": 0.1}}})
    sql = NEXMARK.format(auction=conn("auction"), bid=conn("bid")) + "".join(
        f"CREATE MATERIALIZED VIEW {v} AS {q};\n" for v, q in NEX_VIEWS.items())
    p = make_pipeline(sql)
    p.wait_for_completion(timeout_s=60)
    gen = nexmark_gen.generate(events, seed, extra_scale=0.1)
    st = p.status()["connectors"]
    assert st["bid.nx"]["rows"] == len(gen["bid"]) and st["auction.nx"]["rows"] == len(gen["auction"])
    assert st["bid.nx"]["position"] == events
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.register("auction", gen["auction"])
    con.register("bid", gen["bid"])
    for v, q in NEX_VIEWS.items():
        expected = bag(con.execute(q).fetchall())
        actual = bag([tuple(r.values()) for r in p.query(f"SELECT * FROM {v}")])
        assert expected and not diff(actual, expected), (v, diff(actual, expected))
    got = p.query_pandas("SELECT * FROM auction ORDER BY id")
    assert got["extra"].tolist() == gen["auction"].sort_values("id")["extra"].tolist()


@pytest.mark.parametrize("cfg, needle, message", [
    ({"columns": {"nope": {"sequence": {}}}}, "nope", "'nope' is not a column of table t; columns: id, k, s, ts"),
    ({"columns": {"k": {"gauss": {}}}}, "k", "column k: unknown generator 'gauss'; generators: sequence, uniform, "
                                            "zipf, choice, timestamp"),
    ({"columns": {"s": {"uniform": {"min": 0, "max": 1}}}}, "s",
     "column s (VARCHAR) cannot use the uniform generator; for VARCHAR use: sequence, zipf, choice"),
    ({"columns": {"ts": {"zipf": {"n": 3}}}}, "ts", "for TIMESTAMP use: uniform, choice, timestamp"),
    ({"columns": {"k": {"uniform": {"min": 0, "max": 1e9}}}}, "k", "uniform min and max must be integers for INT"),
    ({"columns": {"k": {"uniform": {"min": 0, "max": 10 ** 10}}}}, "k", "uniform bounds do not fit INT"),
    ({"columns": {"k": {"choice": ["a", 1]}}}, "k", "choice values must be INT"),
    ({"columns": {"id": {"sequence": {}, "null_fraction": 0.5}}}, "id", "column id is NOT NULL"),
    ({"columns": {"k": {"zipf": {"n": 10, "q": 1}}}}, "k", "zipf has no option 'q'; options: n, s"),
    ({"columns": {"ts": {"timestamp": {"start": "yesterday"}}}}, "ts", "timestamp start must be like"),
    ({"deletes": 1.5}, "deletes", '"deletes" must be a fraction in 0..1'),
    ({"cout": 5}, "cout", 'unknown option "cout" (did you mean "count"?)'),
])
def test_datagen_spec_errors(tmp_path, cfg, needle, message):
    sql = f"CREATE TABLE t (id BIGINT NOT NULL, k INT, s VARCHAR, ts TIMESTAMP)\n  WITH ('connectors' = '{datagen('g', cfg)}');"
    with pytest.raises(ConnectorError) as info:
        Pipeline.from_sql(sql, storage_dir=str(tmp_path))
    err = info.value
    assert message in err.message, err.message
    assert err.line == 2
    assert err.column - 1 == sql.split("\n")[1].index(f'"{needle}"'), (str(err), needle)


def test_nexmark_declaration_errors(tmp_path):
    bad = decl({"transport": {"name": "nexmark", "config": {"table": "bids"}}})
    with pytest.raises(ConnectorError, match="must be one of 'person', 'auction', 'bid'"):
        Pipeline.from_sql(f"CREATE TABLE bid (price BIGINT) WITH ('connectors' = '{bad}');", storage_dir=str(tmp_path))
    bad = decl({"transport": {"name": "nexmark", "config": {"table": "bid"}}})
    with pytest.raises(ConnectorError, match="has column 'colour', which bid events do not have"):
        Pipeline.from_sql(f"CREATE TABLE bid (price BIGINT, colour VARCHAR) WITH ('connectors' = '{bad}');",
                          storage_dir=str(tmp_path))
