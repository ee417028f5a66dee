"""Crash points for recovery tests.

``SQLENGINE_CRASH_AT=<point>:<step>`` makes the process exit abruptly
(``os._exit``, like SIGKILL: no cleanup, no flush) when step ``<step>``
reaches ``<point>``; ``<point>:+<k>`` counts ``k`` steps from the step at ``start()``.  Points: ``step_start``, ``runs_written`` (state runs and
sink files written, manifest not), ``committed`` (manifest written, outputs
not yet delivered, log not yet trimmed), ``delivered``.
"""
from __future__ import annotations

import os

POINTS = ("step_start", "runs_written", "committed", "delivered")
_base = {"step": 0}


def set_base(step: int) -> None:
    """Record the committed step at start, for relative crash points."""
    _base["step"] = step


def crash_point(point: str, step: int) -> None:
    spec = os.environ.get("SQLENGINE_CRASH_AT")
    if not spec:
        return
    name, _, at = spec.partition(":")
    target = _base["step"] + int(at[1:]) if at.startswith("+") else int(at)
    if name == point and step == target:
        os._exit(137)
