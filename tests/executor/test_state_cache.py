"""The state cache's key lookups (``sqlengine.state.cache``): the vectorized helpers against their plain
definitions, and a lookup against a scan of the same run."""
import pytest
import numpy as np
import pyarrow as pa
from hypothesis import given, strategies as st

from sqlengine.state.cache import StateCache, distinct_sorted, expand_ranges


@given(st.lists(st.tuples(st.integers(0, 60), st.integers(0, 6)), max_size=30))
def test_expand_ranges_is_the_concatenation_of_the_ranges(ranges):
    lo = np.array([a for a, _ in ranges], dtype=np.int64)
    hi = lo + np.array([n for _, n in ranges], dtype=np.int64)
    want = [x for a, b in zip(lo, hi) for x in range(a, b)]
    assert expand_ranges(lo, hi).tolist() == want


@given(st.lists(st.integers(0, 2 ** 64 - 1), max_size=40))
def test_distinct_sorted_is_np_unique(values):
    a = np.array(values, dtype=np.uint64)
    assert distinct_sorted(a).tolist() == np.unique(a).tolist()


@given(st.lists(st.tuples(st.integers(0, 20), st.integers(-3, 3)), min_size=1, max_size=200),
       st.lists(st.integers(0, 25), max_size=30))
def test_lookup_returns_every_row_with_a_probed_key(tmp_path_factory, rows, probe_keys):
    root = str(tmp_path_factory.mktemp("cache"))
    run = pa.table({"c0": [k for k, _ in rows], "c1": [v for _, v in rows], "__w": [1] * len(rows)})
    cache = StateCache(root)
    assert cache.put("op/run-1.parquet", run)
    probe = cache.hasher.hashes(pa.table({"c0": probe_keys or [0]}).slice(0, len(probe_keys)), ("c0",))
    got = cache.lookup(["op/run-1.parquet"], run.schema, ("c0",), probe)
    # hashes may collide, so the lookup is a superset of the matching rows; in run order
    want = [r for r in run.to_pylist() if r["c0"] in set(probe_keys)]
    got_rows = got.to_pylist()
    assert [r for r in got_rows if r["c0"] in set(probe_keys)] == want


def test_scratch_files_live_until_cleared(tmp_path):
    """A step's scratch parquet files (driver-side changes handed to Spark) are removed by ``clear``."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from sqlengine.state.scratch import Scratch
    s = Scratch(str(tmp_path / "scratch"))
    t = pa.table({"c0": [1, 2, None], "__w": [1, -1, 2]})
    a, b = s.write(t), s.write(t.slice(1))
    assert a != b and pq.read_table(a).equals(t) and pq.read_table(b).equals(t.slice(1))
    s.clear()
    assert not (tmp_path / "scratch").exists()
    assert pq.read_table(s.write(t)).equals(t)   # usable again after a clear


@pytest.mark.parametrize("big", [False, True])
def test_a_merge_cancels_deletes_like_a_consolidation(monkeypatch, big):
    """A merge of a table's runs (``LocalExecutor._cancel_deletes``) gives the Z-set a full consolidation gives,
    NULLs and duplicates included, by DuckDB's aggregation for big runs (``big``) and Arrow's otherwise."""
    import random
    from collections import Counter
    import pyarrow as pa
    from sqlengine.executor import local_step
    from sqlengine.executor.backends.duckdb import DuckDBBackend
    from sqlengine.zset import consolidate_arrow
    rng = random.Random(7)
    rows = [(rng.choice([None, 1, 2, 3]), rng.choice([None, "a", "b", "é"]), rng.choice([1, 2, -1, -2]))
            for _ in range(60)]   # some rows cancel, some end negative (deletes of rows in older runs)
    t = pa.table({"c0": pa.array([r[0] for r in rows], pa.int32()), "c1": pa.array([r[1] for r in rows]),
                  "__w": pa.array([r[2] for r in rows], pa.int64())})
    from types import SimpleNamespace
    from sqlengine.executor.placement import Placement
    ex = object.__new__(local_step.LocalExecutor)
    ex.ctx = SimpleNamespace(placement=Placement(bulk_rows=0 if big else 1 << 40))
    duck = DuckDBBackend()

    def zset(x):
        c = Counter()
        for a, b, w in zip(*(x.column(n).to_pylist() for n in ("c0", "c1", "__w"))):
            c[(a, b)] += w
        return {k: v for k, v in c.items() if v}

    out = ex._cancel_deletes(t, duck)
    assert out.schema == t.schema
    want = zset(consolidate_arrow(t))
    assert any(v < 0 for v in want.values()) and zset(out) == want and len(out) == len(want)
    ins = t.filter(pa.compute.greater(t.column("__w"), 0))
    assert ex._cancel_deletes(ins, duck) is ins   # insert-only runs are kept as they are
