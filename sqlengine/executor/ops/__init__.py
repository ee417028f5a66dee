"""Everything about an operator kind in one place: one module per kind of ``planner.circuit.Op``.

Each module says, for its kind (names at module level):

* ``SKIPS_UNCHANGED``: whether its rule takes ``None`` for an input that did not change this step (and drops
  that input's terms), rather than an empty change;
* ``probes(op)``: the state it reads and by which key (:class:`ProbeSpec`, one per ``op.reads``);
* ``reads_state(op, j, ins)``: whether read ``j`` can meet the changes ``ins`` at all (yes, but for an inner
  join's side whose other side did not change);
* ``change_schema(op, ins, typer)`` and ``state_schema(op, change, ins)``: the Arrow schema of its change and
  of the state it owns (see :mod:`sqlengine.executor.op_schemas`);
* ``local(lw, op, ins, reads, initial)``: its change on the driver (``lw``: a
  :class:`~sqlengine.executor.backends.duckdb.DuckDBBackend`, DuckDB over Arrow), with its Arrow fast path first
  where it has one; ``spark(lw, op, ins, reads, initial)``: its change on Spark (``lw``: a
  :class:`~sqlengine.executor.backends.spark.SparkBackend`).  Both run the rule of :mod:`sqlengine.executor.delta_rules`,
  written once;
* ``merge_rule(op)``: the rule that merges runs of the state it owns (None: a Z-set consolidation).

``reads_state``, ``state_schema`` and ``merge_rule`` have defaults (:data:`DEFAULTS`: every read can meet a
change; no state of its own; runs merged by consolidation), which a module defines only where its kind differs.
Adding an operator kind is one module and one line of ``KINDS``.  The modules are imported on first use, so
that the modules they use (the rules, the lowerers) may import this package's :mod:`.accumulators`.
"""
from __future__ import annotations

import importlib
from typing import List, Tuple

from planner.errors import UnsupportedError

# op kind -> the module (of this package) that holds it
KINDS = {
    "input": "source",
    "constant": "source",
    "integrate": "source",
    "map": "map",
    "union": "union",
    "join": "join",
    "aggregate": "aggregate",
    "distinct": "distinct",
    "setop": "setop",
    "window": "window",
    "recursive": "recursive",
}


class ProbeSpec:
    """How an op reads one state: by key expressions ``spec`` (over the state's columns), with the probe
    keys computed from ``sources``: (input index, key expressions over that input's change).  ``spec``
    empty: the op reads the whole state; None: the op looks the state up by key itself as it runs (its read is
    a :class:`sqlengine.executor.state_lookups.Lookup`)."""

    def __init__(self, spec: Tuple[str, ...], sources: List[Tuple[int, Tuple[str, ...]]]):
        self.spec = spec
        self.sources = sources


def _reads_state(op, j: int, ins) -> bool:
    return True


def _state_schema(op, change, ins):
    return None


def _merge_rule(op):
    return None


DEFAULTS = {"reads_state": _reads_state, "state_schema": _state_schema, "merge_rule": _merge_rule}
_loaded = {}


def of(kind: str):
    """The module of op kind ``kind``."""
    m = _loaded.get(kind)
    if m is None:
        if kind not in KINDS:
            raise UnsupportedError(f"operator kind {kind!r} has no module in sqlengine.executor.ops "
                                   f"(kinds: {', '.join(KINDS)})")
        m = importlib.import_module(f"{__name__}.{KINDS[kind]}")
        for name, default in DEFAULTS.items():
            if not hasattr(m, name):
                setattr(m, name, default)
        _loaded[kind] = m
    return m


def probes(op) -> List[ProbeSpec]:
    """The state ``op`` reads and by which key: one :class:`ProbeSpec` per ``op.reads``."""
    return of(op.kind).probes(op)


def skips_unchanged(op) -> bool:
    return of(op.kind).SKIPS_UNCHANGED
