"""The engine on a real Spark standalone cluster: a master and two one-core workers started on localhost from
the pyspark package (``tests/support/spark_cluster.py``), every step forced onto Spark (``RuntimeConfig(placement={"local_step_rows": 0})``).

Each cluster run is a child process (Spark allows one SparkContext per process, and this one runs the
session-scoped local session): ``tests/support/cluster_workload.py`` checks every view against DuckDB's recomputation
after every step; here the same steps run again in local mode and the views must agree step by step.
"""
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from ..support.cluster_workload import run as run_workload, steps as workload_steps, program, UDFS, VIEWS
from ..support.killable import ROOT
from ..support.spark_cluster import SparkCluster

pytestmark = pytest.mark.slow   # a long real-system or Spark test: ./run.sh test -m "not slow" skips it

TPCH_VIEWS = ["tpch_q01", "tpch_q03", "tpch_q05", "tpch_q10"]


@pytest.fixture(scope="module")
def cluster():
    with SparkCluster(workers=2) as c:
        yield c


def child(args, timeout=600) -> dict:
    out = args[args.index("--out") + 1]
    proc = subprocess.run([sys.executable, "-m", "tests.support.cluster_workload", *args], cwd=ROOT,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)
    text = proc.stdout.decode(errors="replace")
    assert proc.returncode == 0, f"cluster run failed ({proc.returncode}):\n{text[-4000:]}"
    with open(out) as f:
        return json.load(f)


def test_tpch_views_on_the_cluster(cluster, tmp_path):
    got = child(["--master", cluster.master_url, "--storage", str(tmp_path / "s"), "--out", str(tmp_path / "r.json"),
                 "--tpch", ",".join(TPCH_VIEWS)])
    assert got["failures"] == {v: [] for v in TPCH_VIEWS}
    assert all(n == 3 for n in got["checked"].values()), got["checked"]   # 2 insert batches, 1 delete batch
    assert got["steps_run_on"]["driver"] == 0 and got["steps_run_on"]["spark"] >= 3


def test_cluster_equals_local_mode_and_survives_a_killed_worker(cluster, make_pipeline, placement, tmp_path):
    n_steps, kill_at = 4, 2
    victim = cluster.workers[1].pid
    got = child(["--master", cluster.master_url, "--storage", str(tmp_path / "s"), "--out", str(tmp_path / "r.json"),
                 "--steps", str(n_steps), "--kill-pgid", str(victim), "--kill-at-step", str(kill_at)])
    assert got["killed"], "the worker was not killed during a step"
    assert cluster.workers[1].wait(timeout=30) is not None
    assert got["steps_run_on"]["driver"] == 0 and got["steps_run_on"]["spark"] >= n_steps
    # the same steps in local mode (this process's session), also on Spark: the same view contents each step
    placement["local_step_rows"] = 0
    local = run_workload(make_pipeline(program(), udfs=UDFS), workload_steps(1, n_steps))
    assert len(local) == len(got["snapshots"]) == n_steps
    for i, (a, b) in enumerate(zip(got["snapshots"], local)):
        for name, _, _ in VIEWS:
            assert a[name] == b[name], f"step {i}: view {name} differs between the cluster and local mode"
    cluster.add_worker()                 # back to two workers for whatever runs next
    cluster.wait_for_workers(2)


def test_a_driver_killed_during_a_spark_step_loses_and_doubles_nothing(cluster, tmp_path):
    """The driver is SIGKILLed while a step (every step on Spark) runs a job on the cluster; a new driver on the
    same storage holds exactly the acknowledged steps (the killed step's input, durable in the input log, is
    applied once), every view equal to DuckDB's recomputation, and runs the remaining steps likewise."""
    n_steps, kill_at = 3, 1
    storage = str(tmp_path / "s")
    proc = subprocess.run([sys.executable, "-m", "tests.support.cluster_workload", "--master", cluster.master_url,
                           "--storage", storage, "--out", str(tmp_path / "killed.json"), "--steps", str(n_steps),
                           "--kill-driver-at-step", str(kill_at)],
                          cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=600)
    text = proc.stdout.decode(errors="replace")
    assert proc.returncode == -9 and "killing the driver" in text, text[-3000:]
    got = child(["--master", cluster.master_url, "--storage", storage, "--out", str(tmp_path / "r.json"),
                 "--steps", str(n_steps), "--resume-after", str(kill_at)])
    assert got["resumed"] and got["steps_run_on"]["driver"] == 0 and got["steps_run_on"]["spark"] >= 2, got


# the Spark path's differential tests run again in a child pytest whose session is on the cluster (conftest's
# ``spark`` fixture with $SQLENGINE_SPARK_MASTER): a small form of them, for CI's time
CLUSTER_DIFFERENTIAL = ["tests/executor/test_spark_path.py::test_joins", "tests/executor/test_backfill_spark.py"]


def test_the_spark_paths_differential_tests_pass_on_the_cluster(cluster):
    from sqlengine.executor.session import MASTER_ENV
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *CLUSTER_DIFFERENTIAL],
                          cwd=ROOT, env=dict(os.environ, **{MASTER_ENV: cluster.master_url}),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=1200)
    text = proc.stdout.decode(errors="replace")
    assert proc.returncode == 0, text[-4000:]
    assert re.search(r"\b3 passed\b", text), text[-2000:]


def test_ops_on_the_driver_with_state_scanned_by_the_cluster(cluster, tmp_path):
    """With a cluster master, a Spark step's ops run on the driver where their changes are, and the state rows
    those changes meet, which the driver does not cache, are found by Spark jobs on the cluster's executors
    (``SparkState.scan``); every view equals DuckDB's recomputation after every step."""
    got = child(["--master", cluster.master_url, "--storage", str(tmp_path / "s"), "--out", str(tmp_path / "r.json"),
                 "--steps", "3", "--driver-ops"])
    assert got["steps_run_on"]["spark"] >= 3
    assert got["spark_step_ops"]["on_driver"] > 0 and got["spark_scans"] > 0, got


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"),
                    reason="hiding a directory from one worker needs root (unshare --mount)")
def test_storage_that_executors_cannot_see_is_an_error_at_start(tmp_path):
    hidden = tmp_path / "driver-only"
    hidden.mkdir()
    with SparkCluster(workers=0) as blind:
        blind.add_worker(hide=str(hidden))   # a worker on "another machine": the driver's directory is not there
        blind.wait_for_workers(1)
        got = child(["--master", blind.master_url, "--storage", str(hidden / "s"), "--out", str(tmp_path / "r.json"),
                     "--start-only"])
    assert not got["started"]
    assert got["error"].startswith(f"PipelineError: the storage directory {hidden / 's'} is not visible to Spark's "
                                   "executors on "), got["error"]
    assert "mounts at the same path" in got["error"]
