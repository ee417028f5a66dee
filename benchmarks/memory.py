"""Peak resident memory of this process (the driver) and of its Spark JVM, sampled in the background."""
from __future__ import annotations

import os
import threading
from typing import Optional


def _status_kib(pid: int, field: str) -> Optional[int]:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def jvm_pid() -> Optional[int]:
    """The java child process of this Python process (the local-mode Spark JVM), if any."""
    me = str(os.getpid())
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                parts = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{d}/comm") as f:
                comm = f.read().strip()
        except OSError:
            continue
        if parts[1] == me and comm == "java":
            return int(d)
    return None


class RssSampler:
    """Samples driver and JVM RSS every ``interval_s`` between ``start()`` and ``stop()``; peaks in MiB."""

    def __init__(self, interval_s: float = 0.5):
        self.interval = interval_s
        self.driver_peak_mib = 0.0
        self.jvm_peak_mib = 0.0
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def sample(self) -> None:
        d = _status_kib(os.getpid(), "VmRSS")
        if d:
            self.driver_peak_mib = max(self.driver_peak_mib, d / 1024)
        pid = jvm_pid()
        j = _status_kib(pid, "VmRSS") if pid else None
        if j:
            self.jvm_peak_mib = max(self.jvm_peak_mib, j / 1024)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def start(self) -> "RssSampler":
        self.sample()
        self._thread = threading.Thread(target=self._run, daemon=True, name="rss-sampler")
        self._thread.start()
        return self

    def stop(self) -> "RssSampler":
        self._stop.set()
        if self._thread:
            self._thread.join()
        self.sample()
        return self
