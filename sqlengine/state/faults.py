"""Fault injection for recovery tests: crash points and storage errors.

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

An I/O point is a place where the engine writes to storage: ``log_write`` (an
input log entry or batch commit record, after its bytes are written and before
they are fsynced), ``dead_letter_write``, ``state_write`` (a state run) and
``state_commit`` (a step's manifest).  ``inject_io(point, errno.ENOSPC)`` makes
the next writes there fail with that ``OSError`` (a full disk, a read-only
file system), as the real system call would; ``SQLENGINE_CRASH_AT=<io point>``
makes the process exit there at once (the bytes written, not yet fsynced).
"""
from __future__ import annotations

import errno as _errno
import os
from typing import Optional, Tuple

POINTS = ("step_start", "runs_written", "committed", "delivered")
IO_POINTS = ("log_write", "dead_letter_write", "state_write", "state_commit")
_base = {"step": 0}
_armed: dict = {}
_io: dict = {}


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
    if spec and ":" in spec:   # (without a step: an I/O point, see ``io_point``)
        name, _, at = spec.partition(":")
        if (name, step) == _target((name, at)):
            os._exit(137)
    if "at" in _armed:
        name, k = _armed["at"]
        if name == point and step == _base["step"] + k:
            _armed.clear()
            raise SimulatedCrash(f"simulated crash at {point} of step {step}")


def inject_io(point: str, err: int = _errno.ENOSPC, times: Optional[int] = None, after: int = 0) -> None:
    """Make writes at I/O point ``point`` fail with ``OSError(err)``: ``times`` of them (all if None), after
    letting ``after`` writes succeed."""
    if point not in IO_POINTS:
        raise ValueError(f"unknown I/O point {point!r}; known: {', '.join(IO_POINTS)}")
    _io[point] = [err, times, after]


def clear_io(point: Optional[str] = None) -> None:
    """Stop injecting I/O errors at ``point`` (everywhere if None)."""
    if point is None:
        _io.clear()
    else:
        _io.pop(point, None)


def io_point(point: str, path: str) -> None:
    if os.environ.get("SQLENGINE_CRASH_AT") == point:
        os._exit(137)
    f = _io.get(point)
    if f is None:
        return
    err, times, after = f
    if after > 0:
        f[2] = after - 1
        return
    if times is not None:
        f[1] = times - 1
        if f[1] <= 0:
            del _io[point]
    raise OSError(err, os.strerror(err), path)


def describe(e: OSError) -> str:
    """``ENOSPC (No space left on device)``: the error's symbolic name and text."""
    name = _errno.errorcode.get(e.errno, f"errno {e.errno}") if e.errno is not None else type(e).__name__
    return f"{name} ({e.strerror or e})"
