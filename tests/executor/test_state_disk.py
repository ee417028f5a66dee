"""State larger than the driver's memory budget: the disk tier of the state cache (``sqlengine.state.cache``).

With a budget of 0 bytes no run fits in memory, so every run is read from its memory-mapped Arrow copy and
every key index is built segment by segment into a memory-mapped file (segments of 64 rows here, so that
indexes have many).  Steps must still run on the driver, and every view must equal DuckDB's recomputation
after every step, also after a restart from the same storage.
"""

import pytest

from sqlengine.state import cache as cache_mod

from ..support.oracle import Model, check_views, churn_rounds, feed, materialized

SCHEMA = "CREATE TABLE t (id BIGINT, k INT, v INT); CREATE TABLE d (k INT, name VARCHAR);"
COLUMNS = {"t": ["id", "k", "v"], "d": ["k", "name"]}
VIEWS = {
    "g": "SELECT k, COUNT(*) AS n, SUM(v) AS s, MAX(v) AS top FROM t GROUP BY k",
    "j": "SELECT d.name, COUNT(*) AS n, SUM(t.v) AS s FROM t JOIN d ON t.k = d.k GROUP BY d.name",
    "dv": "SELECT DISTINCT k, v % 3 AS m FROM t",
}
SQL = materialized(SCHEMA, VIEWS)


def rounds(seed, n):
    return churn_rounds(seed, n, {
        "d": ([5], lambda rnd, i: (rnd.choice([None, *range(30)]), rnd.choice(["a", "b", "c", None]))),
        "t": ([20, 300], lambda rnd, i: (i, rnd.choice([None, *range(30)]), rnd.choice([None, *range(50)]))),
    }, duplicates=("t", 3), deletes=("t", "d"), max_gone=80)


def test_state_beyond_the_budget_is_read_from_disk(make_pipeline, monkeypatch, tmp_path):
    monkeypatch.setattr(cache_mod, "SEGMENT_ROWS", 64)
    storage = str(tmp_path / "s")
    model = Model(SCHEMA, COLUMNS)

    def open_pipeline():
        p = make_pipeline(SQL, storage_dir=storage)
        p.engine.local.cache.budget = 0     # nothing fits in memory
        return p

    p = open_pipeline()
    all_rounds = list(rounds(7, 8))
    for i, ops in enumerate(all_rounds):
        if i == 5:                           # a restart: runs and indexes come back from their sidecars
            p.stop()
            p = open_pipeline()
        feed(p, model, ops, COLUMNS)
        check_views(p, model, VIEWS, f"round {i}")
        cache = p.engine.local.cache
        assert cache.used == 0 and not cache.tables and cache.mapped, "state was held in memory"
    assert p.status()["steps_run_on"]["spark"] == 0
    big = [ix for ix in p.engine.local.cache.index.values() if len(ix[0]) > 64]
    assert big, "no index had more than one segment"


def test_without_the_disk_tier_state_beyond_the_budget_is_not_cached(tmp_path):
    import pyarrow as pa
    t = pa.table({"c0": list(range(10)), "__w": [1] * 10})
    (tmp_path / "op").mkdir()     # where the run's parquet file would be
    assert not cache_mod.StateCache(str(tmp_path), budget_bytes=0, disk=False).put("op/run-1.parquet", t)
    on = cache_mod.StateCache(str(tmp_path), budget_bytes=0, disk=True)
    assert on.put("op/run-1.parquet", t) and on.used == 0 and "op/run-1.parquet" in on.mapped
    # a run with no Arrow copy yet is copied from its parquet file, batch by batch
    import pyarrow.parquet as pq
    pq.write_table(t, str(tmp_path / "op" / "run-2.parquet"))
    got = cache_mod.StateCache(str(tmp_path), budget_bytes=0).load("op/run-2.parquet", t.schema)
    assert got.equals(t)
