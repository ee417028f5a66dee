"""SIGKILL a pipeline at random moments while a source feeds it and file sinks write its view, restart
it each time: every batch is applied once, and the changelog and snapshot files equal the view.
(``benchmarks/connector_crash_stress.py`` runs the same with 100 kills.)"""
import os
import random
import threading
import time

import pytest

from tests.support import connector_crash_child as child

pytestmark = pytest.mark.slow   # a long real-system or Spark test: ./run.sh test -m "not slow" skips it

KILLS = int(os.environ.get("CONNECTOR_CRASH_KILLS", "10"))


def test_kills_while_a_source_feeds_file_sinks(tmp_path):
    storage, out, count = str(tmp_path / "store"), str(tmp_path / "out"), 500
    rng = random.Random(5)
    killed = 0
    for _ in range(KILLS):
        code = child.run_child(storage, out, count, kill_after=rng.uniform(0.8, 2.5))
        killed += code == -9
    child.run_child(storage, out, count)
    problems = child.verify(storage, out, count)
    assert not problems, problems
    assert killed >= KILLS // 2, f"only {killed} of {KILLS} runs were killed before they finished"


def test_kills_while_files_arrive(tmp_path):
    """The same with a followed file_input directory that files keep arriving in while the child is killed."""
    storage, out, inbox, count = str(tmp_path / "store"), str(tmp_path / "out"), str(tmp_path / "inbox"), 400
    os.makedirs(inbox)
    all_batches = child.batches(count)
    done = threading.Event()

    def producer():
        for i, recs in enumerate(all_batches):
            child.publish(inbox, i, recs)
            time.sleep(0.03)
        done.set()

    threading.Thread(target=producer, daemon=True).start()
    rng = random.Random(6)
    killed = 0
    for _ in range(KILLS):
        killed += child.run_child(storage, out, count, kill_after=rng.uniform(0.8, 2.0), inbox=inbox) == -9
    done.wait(60)
    child.run_child(storage, out, count, inbox=inbox)
    problems = child.verify(storage, out, count, inbox=inbox)
    assert not problems, problems
    assert killed >= KILLS // 2, f"only {killed} of {KILLS} runs were killed before they finished"
