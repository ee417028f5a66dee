"""``zset.clamp_in_order`` against applying the batches one by one in Python: random batches with duplicate rows,
a row's inserts and deletes in one batch, NULLs, and deletes of rows with too few stored copies (the windowed
path) or enough of them (the shortcut, which returns the batches as they are)."""
import random
from collections import Counter

import pyarrow as pa
import pytest

from sqlengine.zset import W, clamp_in_order, consolidate_arrow


def reference(parts, stored):
    count = Counter(stored)
    start = Counter(count)
    for batch in parts:
        net = Counter()
        for row, w in batch:
            net[row] += w
        for row, w in net.items():
            count[row] = max(count[row] + w, 0)
    return {r: count[r] - start[r] for r in set(count) | set(start) if count[r] != start[r]}


def table(rows):
    return pa.table({"c0": pa.array([r[0][0] for r in rows], pa.int64()),
                     "c1": pa.array([r[0][1] for r in rows], pa.string()),
                     W: pa.array([r[1] for r in rows], pa.int64())})


@pytest.mark.parametrize("seed", range(40))
def test_clamp_in_order_applies_batches_in_order(seed):
    rng = random.Random(seed)
    values = [(i, s) for i in (1, 2, None) for s in ("a", None)]
    stored = Counter({v: rng.choice([0, 1, 1, 3]) for v in values})
    many = seed % 2 == 0   # even seeds: enough stored copies for every delete (the shortcut), odd: too few
    if many:
        stored = Counter({v: 50 for v in values})
    parts = [[(rng.choice(values), rng.choice([1, 1, -1, -1, -2])) for _ in range(rng.randint(1, 8))]
             for _ in range(rng.randint(1, 4))]
    deleted = table([r for p in parts for r in p if r[1] < 0] or [((1, "a"), -1)])
    stored_t = table([(v, n) for v, n in stored.items() if n])
    if seed % 4 < 2:   # stored copies as a scan may find them: one row each, not consolidated
        stored_t = table([(v, 1) for v, n in stored.items() for _ in range(n)])
    got = clamp_in_order([table(p) for p in parts], deleted, stored_t)
    rows = [((r["c0"], r["c1"]), r[W]) for r in consolidate_arrow(got).to_pylist()]
    assert dict(rows) == reference(parts, [v for v, n in stored.items() for _ in range(n)])
