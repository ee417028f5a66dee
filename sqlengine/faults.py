"""Crash points for recovery tests.

A crash point is a named instant inside a step: ``step_start``,
``runs_written`` (state runs and sink files written, manifest not yet),
``committed`` (manifest written; outputs not delivered, log not trimmed) and
``delivered``.  Two ways to crash there:

* ``SQLENGINE_CRASH_AT=<point>:<step>`` in the environment makes the process
  exit at once (``os._exit``: no cleanup, like SIGKILL); ``<point>:+<k>``
  counts ``k`` steps from the step at ``start()``.
* ``arm(point, k)`` makes the step thread die there with :class:`SimulatedCrash`
  (the pipeline object is then abandoned, and a new one opened on the same
  storage sees exactly what a killed process leaves on disk).
"""
from __future__ import annotations

import os
from typing import Optional, Tuple

POINTS = ("step_start", "runs_written", "committed", "delivered")
_base = {"step": 0}
_armed: dict = {}


class SimulatedCrash(BaseException):
    """Raised at an armed crash point; not an Exception, so nothing on the way catches it."""


def set_base(step: int) -> None:
    """Record the committed step at start, for relative crash points."""
    _base["step"] = step


def arm(point: Optional[str], steps_after_start: int = 1) -> None:
    """Crash the step thread at ``point`` in the ``steps_after_start``-th step from now; None disarms."""
    _armed.clear()
    if point is not None:
        if point not in POINTS:
            raise ValueError(f"unknown crash point {point!r}; known: {', '.join(POINTS)}")
        _armed["at"] = (point, steps_after_start)


def _target(spec: Tuple[str, str]) -> Tuple[str, int]:
    name, at = spec
    return name, (_base["step"] + int(at[1:]) if at.startswith("+") else int(at))


def crash_point(point: str, step: int) -> None:
    spec = os.environ.get("SQLENGINE_CRASH_AT")
    if spec:
        name, _, at = spec.partition(":")
        if (name, step) == _target((name, at)):
            os._exit(137)
    if "at" in _armed:
        name, k = _armed["at"]
        if name == point and step == _base["step"] + k:
            _armed.clear()
            raise SimulatedCrash(f"simulated crash at {point} of step {step}")
