"""Resident memory of this process (the driver) and of its Spark JVM, and a background sampler of their peaks."""
from __future__ import annotations

import threading
import time
from typing import Callable, Dict


def rss() -> Dict[str, int]:
    """RSS in bytes of this (driver) process and of its JVM child processes."""
    import psutil
    me = psutil.Process()
    jvm = 0
    for c in me.children(recursive=True):
        try:
            if "java" in c.name().lower() or any("java" in x for x in c.cmdline()[:1]):
                jvm += c.memory_info().rss
        except psutil.Error:
            pass
    return {"driver_rss": me.memory_info().rss, "jvm_rss": jvm}


def proc_status() -> Dict[str, int]:
    """This process's resident memory split as the kernel reports it, in bytes: ``RssAnon`` (heap),
    ``RssFile`` (file pages, e.g. memory-mapped files) and ``VmRSS`` (both)."""
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("RssAnon:", "RssFile:", "VmRSS:")):
                k, v = line.split(":")
                out[k] = int(v.split()[0]) * 1024
    return out


class Sampler(threading.Thread):
    """Samples ``measure`` (default :func:`rss`) every ``period`` seconds; ``peaks[phase]`` holds the peaks
    (bytes) per phase, the phase being whatever the caller last set ``phase`` to."""

    def __init__(self, period: float = 0.1, measure: Callable[[], Dict[str, int]] = rss):
        super().__init__(daemon=True)
        self.period = period
        self.measure = measure
        self.phase = "setup"
        self.peaks = {}
        self.stop_flag = False

    def run(self):
        while not self.stop_flag:
            pk = self.peaks.setdefault(self.phase, {})
            for k, v in self.measure().items():
                pk[k] = max(pk.get(k, 0), v)
            time.sleep(self.period)

    def finish(self) -> Dict[str, int]:
        """Stop sampling; the peaks over all phases (0 for a quantity never sampled)."""
        self.stop_flag = True
        self.join()
        keys = set(self.measure()) | {k for p in self.peaks.values() for k in p}
        return {k: max((p.get(k, 0) for p in self.peaks.values()), default=0) for k in keys}
