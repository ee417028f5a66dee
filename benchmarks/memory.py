"""Resident memory of this process (the driver) and of its Spark JVM, and a background sampler of their peaks."""
from __future__ import annotations

import threading
import time
from typing import Dict


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


class Sampler(threading.Thread):
    """Samples :func:`rss` every ``period`` seconds; ``peaks[phase]`` holds the peaks (bytes) per phase, the
    phase being whatever the caller last set ``phase`` to."""

    def __init__(self, period: float = 0.1):
        super().__init__(daemon=True)
        self.period = period
        self.phase = "setup"
        self.peaks = {}
        self.stop_flag = False

    def run(self):
        while not self.stop_flag:
            r = rss()
            pk = self.peaks.setdefault(self.phase, {"driver_rss": 0, "jvm_rss": 0})
            for k, v in r.items():
                pk[k] = max(pk[k], v)
            time.sleep(self.period)

    def finish(self) -> Dict[str, int]:
        """Stop sampling; the peaks over all phases."""
        self.stop_flag = True
        self.join()
        return {k: max((p[k] for p in self.peaks.values()), default=0) for k in ("driver_rss", "jvm_rss")}
