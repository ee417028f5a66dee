"""A real Spark standalone cluster on localhost, started from the pyspark package: one master and N workers
(``spark-class org.apache.spark.deploy.master.Master`` / ``...worker.Worker``) on free ports, each a JVM whose
PID is recorded, stopped by PID.  Used by the cluster tests and ``benchmarks/scale.py``.

>>> with SparkCluster(workers=2) as c:      # doctest: +SKIP
...     c.master_url                           # 'spark://127.0.0.1:PORT'
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from typing import List, Optional

from tests.support.net import free_port


def spark_home() -> str:
    import pyspark
    return os.path.dirname(os.path.abspath(pyspark.__file__))


class SparkCluster:
    """``workers`` one-core workers with ``worker_memory`` each, registered with a master, all on 127.0.0.1."""

    def __init__(self, workers: int = 2, worker_memory: str = "2g", work_dir: Optional[str] = None):
        self.n_workers = workers
        self.worker_memory = worker_memory
        self._own_dir = work_dir is None
        self.work_dir = work_dir or tempfile.mkdtemp(prefix="sqlengine-cluster-")
        self.port = free_port()
        self.ui_port = free_port()
        self.master: Optional[subprocess.Popen] = None
        self.workers: List[subprocess.Popen] = []
        self._logs = []

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def env(self) -> dict:
        env = dict(os.environ)
        env.update(SPARK_HOME=spark_home(), SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable,
                   SPARK_LOG_DIR=self.work_dir, SPARK_NO_DAEMONIZE="1")
        return env

    def _spawn(self, name: str, args: List[str], hide: Optional[str] = None) -> subprocess.Popen:
        log = open(os.path.join(self.work_dir, f"{name}.log"), "wb")
        self._logs.append(log)
        cmd = [os.path.join(spark_home(), "bin", "spark-class"), *args]
        if hide:   # a worker on "another machine": an empty tmpfs over ``hide`` in its own mount namespace
            cmd = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                   'mount -t tmpfs none "$0" && exec "$@"', hide, *cmd]
        # spark-class execs java: the PID is the JVM's.  Its own process group, so a kill reaches nothing else.
        return subprocess.Popen(cmd, env=self.env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def start(self, timeout: float = 90) -> "SparkCluster":
        self.master = self._spawn("master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                             "--port", str(self.port), "--webui-port", str(self.ui_port)])
        for i in range(self.n_workers):
            self.add_worker()
        self.wait_for_workers(self.n_workers, timeout)
        return self

    def add_worker(self, hide: Optional[str] = None) -> subprocess.Popen:
        """Start one more worker; with ``hide``, that directory is an empty tmpfs for the worker and its
        executors (a worker that does not see the driver's local files; needs root for ``unshare``)."""
        i = len(self.workers)
        d = os.path.join(self.work_dir, f"worker-{i}")
        os.makedirs(d, exist_ok=True)
        w = self._spawn(f"worker-{i}", ["org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                                        "--cores", "1", "--memory", self.worker_memory,
                                        "--webui-port", "0", "--work-dir", d, self.master_url],
                        hide=hide)
        self.workers.append(w)
        return w

    def ui_url(self) -> Optional[str]:
        """The master's web UI as the master logged it once bound (None before): Spark moves to the next port
        when the one asked for was taken meanwhile, so the asked-for port may be another process's."""
        try:
            with open(os.path.join(self.work_dir, "master.log"), errors="replace") as f:
                found = re.findall(r"Bound MasterWebUI to \S+ and started at (http://\S+)", f.read())
        except OSError:
            return None
        return found[-1].replace("localhost", "127.0.0.1") if found else None

    def state(self) -> dict:
        """The master's view of the cluster (its web UI's JSON)."""
        url = self.ui_url()
        if url is None:
            raise ConnectionError("the master's web UI is not bound yet")
        with urllib.request.urlopen(f"{url}/json/", timeout=5) as r:
            return json.loads(r.read())

    def alive_workers(self) -> int:
        try:
            return sum(1 for w in self.state().get("workers", []) if w.get("state") == "ALIVE")
        except (OSError, ValueError):   # not up yet, or not yet answering with its JSON
            return 0

    def wait_for_workers(self, n: int, timeout: float = 90) -> None:
        end = time.monotonic() + timeout
        running = [p for p in [self.master, *self.workers] if p.poll() is None]   # not those killed before
        while self.alive_workers() < n:
            for p in running:
                if p.poll() is not None:
                    raise RuntimeError(f"a cluster JVM exited ({p.returncode}); logs in {self.work_dir}")
            if time.monotonic() > end:
                raise RuntimeError(f"{n} workers did not register with {self.master_url} within {timeout} s; "
                                   f"logs in {self.work_dir}")
            time.sleep(0.3)

    def kill_worker(self, i: int) -> int:
        """SIGKILL worker ``i``'s JVM and the executor it launched (the executor is in its process group);
        returns the worker's PID."""
        w = self.workers[i]
        try:
            os.killpg(w.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        w.wait()
        return w.pid

    def stop(self) -> None:
        for p in [*self.workers, self.master]:
            if p is None or p.poll() is not None:
                continue
            try:
                os.killpg(p.pid, signal.SIGTERM)
                p.wait(timeout=15)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait()
        for log in self._logs:
            log.close()
        if self._own_dir:
            shutil.rmtree(self.work_dir, ignore_errors=True)

    def __enter__(self) -> "SparkCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
