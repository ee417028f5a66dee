"""State runs are merged in the background while steps go on (sqlengine.executor.compaction).

Merges run whenever an operator has more than 2 runs and each is made slower, so steps commit while merges
run; every view is compared with DuckDB after every round, and a merge that ends is put in place of the runs
it merged in the manifest committed by then.  The crash test SIGKILLs a child process at random moments
while its merges run, and checks that nothing is lost or applied twice and that no merge leaves files behind.
"""
import glob
import json
import os
import random
import re
import time

import pyarrow as pa
import pytest

from sqlengine.executor.merges import Merged, Merger
from sqlengine.state.store import Manifest, Run, StateStore

from ..support import crash_child
from ..support.oracle import Model, bag_from_changes, check_views, diff, feed
from .test_keyed_reads import COLUMNS, SCHEMA, SQL, VIEWS, rounds


@pytest.fixture
def slow_merges(monkeypatch):
    """Merge whenever an operator has more than 2 runs, each merge 0.2 s slower; counts merges that ended
    after a step committed (``overlapped``) and merges put in place (``installed``)."""
    monkeypatch.setattr(StateStore, "MAX_RUNS", 2)
    seen = {"overlapped": 0, "installed": 0}
    merge_runs, apply = Merger.merge_runs, Merger.apply_merges

    def slow(self, *a, **kw):
        time.sleep(0.2)
        return merge_runs(self, *a, **kw)

    def counted(m, merged):
        planned = int(re.search(r"run-(\d+)-m", merged[0].run.path).group(1))
        seen["overlapped"] += m.step > planned
        out = apply(m, merged)
        seen["installed"] += out is not None
        return out

    monkeypatch.setattr(Merger, "merge_runs", slow)
    monkeypatch.setattr(Merger, "apply_merges", staticmethod(counted))
    return seen


def orphans(root: str) -> list:
    """Run files (or their temporary files) that no kept manifest lists."""
    live = set()
    for path in glob.glob(os.path.join(root, "manifest-*.json")):
        with open(path) as f:
            live |= {r.path for runs in Manifest.from_json(f.read()).runs.values() for r in runs}
    out = []
    for path in glob.glob(os.path.join(root, "*", "run-*")):
        rel = os.path.relpath(path, root)
        run = rel.split(".parquet", 1)[0] + ".parquet"
        if run not in live:
            out.append(rel)
    return out


def wait_for_merges(p, timeout=60):
    end = time.monotonic() + timeout
    while p._compactor.running:
        assert time.monotonic() < end, "a background merge did not end"
        time.sleep(0.05)


@pytest.mark.parametrize("path", ["driver", "spark"])
def test_steps_go_on_while_state_runs_merge_in_the_background(make_pipeline, slow_merges, placement, path,
                                                             tmp_path):
    if path == "spark":   # every step on Spark, reading the state from the runs' files as the merges replace them
        placement["local_step_rows"] = 0
    storage = str(tmp_path / "s")
    p = make_pipeline(SQL, storage_dir=storage)
    if path == "spark":
        p.engine.local.cache.hold_nothing()
    changes = p.listen("ja")
    model = Model(SCHEMA, COLUMNS)
    for i, ops in enumerate(rounds(23, 6)):
        feed(p, model, ops, COLUMNS)
        check_views(p, model, VIEWS, f"round {i}")
    assert not diff(bag_from_changes(changes.to_pandas()), model.view(model.duck(), VIEWS["ja"]))
    assert slow_merges["overlapped"] > 0, slow_merges   # steps committed while merges ran
    assert slow_merges["installed"] > 0, slow_merges
    st = p.status()
    assert st["steps_run_on"]["spark" if path == "spark" else "driver"] > 0
    assert st["state_merges"]["installed"] == slow_merges["installed"]
    wait_for_merges(p)
    p.stop()   # a clean stop puts a running merge in place
    root = p.store.root
    assert not orphans(root), orphans(root)
    assert all(len(runs) <= p._compactor.stall_runs() + 1 for runs in p.store.current.runs.values())
    q = make_pipeline(SQL, storage_dir=storage)   # the merged state, read back
    check_views(q, model, VIEWS, "after restart")


def test_a_merge_goes_in_place_of_the_runs_it_merged_or_not_at_all():
    runs = [Run(f"k/run-{i}", 10, 100) for i in range(5)]
    m = Manifest(step=9, log_position=[3, 0], runs={"k": runs[:4], "e": [runs[4]]}, meta={"x": 1})
    x = Run("k/run-m", 20, 150)
    got = Merger.apply_merges(m, [Merged("k", [runs[2].path, runs[3].path], x)])
    assert got.runs == {"k": runs[:2] + [x], "e": [runs[4]]} and got.step == 9 and got.meta == {"x": 1}
    later = Manifest(step=11, log_position=[5, 0], runs={"k": runs[:4] + [Run("k/new", 1, 1)]})
    got = Merger.apply_merges(later, [Merged("k", [runs[1].path, runs[2].path], x)])   # runs added since
    assert [r.path for r in got.runs["k"]] == ["k/run-0", "k/run-m", "k/run-3", "k/new"] and got.step == 11
    assert Merger.apply_merges(m, [Merged("k", [runs[1].path, runs[3].path], x)]) is None   # not in order
    assert Merger.apply_merges(m, [Merged("k", ["k/rewritten", runs[3].path], x)]) is None   # one is gone
    assert Merger.apply_merges(m, [Merged("z", [runs[0].path], x)]) is None
    assert m.runs["k"] == runs[:4]   # m itself is not changed


def test_garbage_collection_spares_what_a_merge_reads_and_writes(tmp_path):
    store = StateStore(str(tmp_path))
    t = pa.table({"c0": [1, 2], "__w": [1, 1]})
    a = store.write_run("k", t, 1)
    store.commit(Manifest(step=1, runs={"k": [a]}))
    b = store.write_run("k", t, 2, tag="m1")   # a merge's output, listed by no manifest yet
    tmp = os.path.join(store.root, store.run_path("k", 3, "m1") + ".tmp")   # one being written
    open(tmp, "w").close()
    store.keep |= {b.path, store.run_path("k", 3, "m1")}
    for step in (2, 3, 4):
        store.commit(Manifest(step=step, runs={"k": []}))   # a drops out of the kept manifests
    names = sorted(os.listdir(os.path.join(store.root, "k")))
    assert names == [os.path.basename(b.path), os.path.basename(tmp)], names
    store.keep.clear()
    store.commit(Manifest(step=5, runs={"k": []}))
    assert not os.path.exists(os.path.join(store.root, "k"))


def test_sigkill_during_background_merges_loses_nothing(spark, tmp_path):
    store, sink, acks = str(tmp_path / "store"), str(tmp_path / "sink"), str(tmp_path / "acks")
    batches = 60
    rng = random.Random(3)
    killed = in_merge = 0
    marker = crash_child.merging_marker(store)
    for _ in range(5):
        code, _ = crash_child.run_child(store, sink, acks, batches, kill_after=rng.uniform(0.5, 2.5),
                                        slow_merges=0.6)
        killed += code in (137, -9)
        if os.path.exists(marker):   # the kill landed in a merge
            in_merge += 1
            os.remove(marker)
    code, line = crash_child.run_child(store, sink, acks, batches, slow_merges=0.6)
    assert code == 0, f"final run failed: {line}"
    assert killed >= 1 and in_merge >= 1, (killed, in_merge)
    assert not orphans(os.path.join(store, "state"))   # what killed merges wrote went with later commits
    problems = crash_child.verify(store, sink, acks, batches, spark=spark)
    assert not problems, problems
    with open(sorted(glob.glob(os.path.join(store, "state", "manifest-*.json")))[-1]) as f:
        runs = json.load(f)["runs"]
    assert any(re.search(r"-m\d+\.parquet$", r["path"]) for rs in runs.values() for r in rs)   # merged runs
