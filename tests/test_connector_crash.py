"""SIGKILL a pipeline at random moments while a source feeds it and file sinks write its view, restart
it each time: every batch is applied once, and the changelog and snapshot files equal the view.
(``benchmarks/connector_crash_stress.py`` runs the same with 100 kills.)"""
import os
import random

from tests import connector_crash_child as child

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
