"""What every part of the executor reads about the circuit it runs: one :class:`StepContext` per engine.

The driver executor (:mod:`.local_step`), the Spark step (:mod:`.spark_step`), Spark's state reads
(:mod:`.spark_state`), the input clamps (:mod:`.input_changes`) and the merges (:mod:`.merges`) each take the
context rather than the engine: the ops and who consumes them, each op's state key and schemas, the store, the
placement, and the counters they keep.  The engine (:mod:`.runtime`) composes them; none of them reaches into
another's private members.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Dict, List, Optional, Set

import pyarrow as pa

from planner.circuit import Op
from planner.program import Program

from sqlengine.executor import keyed_reads
from sqlengine.executor.derived import derivation
from sqlengine.executor.op_schemas import derive as derive_schemas
from planner.user_functions import python_functions
from sqlengine.executor.ops import aggregate as agg_op, source
from sqlengine.executor.placement import Placement
from sqlengine.executor.sum_bounds import SumBounds
from sqlengine.state.store import StateStore


def state_key(op: Op, fingerprints: Optional[Dict[str, str]] = None) -> str:
    """The name of ``op``'s state in the store: a digest of what the op computes, so that a program change
    keeps the state of the operators it leaves as they were.  ``fingerprints``: the program's Python functions'
    code digests (:func:`python_fingerprints`): an op that calls one whose code changed is a changed op."""
    text = f"{op.kind}|{op.mode}|{op.node!r}"
    digest = hashlib.sha1((text + calls_of(text, fingerprints)).encode()).hexdigest()[:16]
    if op.kind == "integrate" and op.node.algebra == "source":
        return f"table-{op.node.table}-{digest[:8]}"
    return f"{'acc' if op.kind == 'aggregate' else 'int'}-{digest}"


def calls_of(text: str, fingerprints: Optional[Dict[str, str]]) -> str:
    """The fingerprints of the Python functions ``text`` (a plan's or an op's repr) calls, as text ("" for none)."""
    if not fingerprints:
        return ""
    return "".join(f"|{n}={d}" for n, d in sorted(fingerprints.items())
                   if re.search(rf"\b{re.escape(n)}\(", text, re.IGNORECASE))


def python_fingerprints(functions) -> Dict[str, str]:
    """name -> a digest of the code of each Python function (``planner.user_functions.UserFunction``)."""
    return {n: f.impl.fingerprint for n, f in functions.items() if f.python and f.impl is not None}


@dataclass
class Stats:
    """What the executor counts, for ``Pipeline.metrics()`` and the tests that check where work ran."""
    steps_local: int = 0            # steps run on the driver (local_step) ...
    steps_spark: int = 0            # ... and on Spark (spark_step)
    spark_fallbacks: int = 0        # Spark steps that failed (e.g. on a row) and were re-run on the driver
    last_spark_error: Optional[str] = None
    driver_attempts_failed: int = 0  # driver steps that could not read uncached state by key: run on Spark
    ops_on_driver: int = 0          # ops of Spark steps that ran on the driver (placement.ops_on_driver())
    ops_declined: int = 0           # ops of Spark steps tried there that ran on Spark (their reads were too wide)
    narrowed_reads: int = 0         # Spark state reads narrowed to a change's keys (keyed_reads)
    spark_scans: int = 0            # reads of the state rows of a change's keys run as Spark jobs
    rows_scanned: int = 0           # state rows DuckDB's scans of runs returned (LocalExecutor.scan_runs)
    state_rows_dropped: int = 0     # closed rows dropped from state (event time)
    spark_merges: int = 0           # merges of runs not cached, run as Spark jobs
    # what passes through the driver on the Spark path (issue 34): Arrow rows and bytes brought from Spark to
    # the driver (a step's change, scans of state, merged runs, a recursion's inputs) and shipped from it
    rows_from_spark: int = 0
    bytes_from_spark: int = 0
    rows_to_spark: int = 0
    bytes_to_spark: int = 0

    def from_spark(self, t: pa.Table) -> pa.Table:
        """``t``, collected from Spark to the driver, counted."""
        self.rows_from_spark += t.num_rows
        self.bytes_from_spark += t.nbytes
        return t

    def to_spark(self, t: pa.Table) -> pa.Table:
        """``t``, shipped from the driver to Spark, counted."""
        self.rows_to_spark += t.num_rows
        self.bytes_to_spark += t.nbytes
        return t


class StepContext:
    """The circuit of ``program`` as the executors read it, its ``store`` and ``placement`` (replaceable:
    read at each use), and the counters.  ``master``: the Spark master the pipeline was given (None: local)."""

    def __init__(self, program: Program, store: StateStore, placement: Optional[Placement] = None,
                 master: Optional[str] = None):
        self.program = program
        self.circuit = program.circuit
        self.ops = self.circuit.ops
        self.store = store
        self.placement = placement if placement is not None else Placement.from_dict(None)
        self.master = master
        self.stats = Stats()
        self.functions = python_functions(program.functions)   # the program's Python functions, for the backends
        self.keys: Dict[int, str] = {op.id: state_key(op, python_fingerprints(self.functions))
                                     for op in self.ops if op.owns_state}
        self.sums = SumBounds(store, self.keys)
        self.derived = {op.id: derivation(self.circuit, op) for op in self.ops
                        if source.integrates(op) and op.mode == "derived"}
        pks = {t: self.key_columns(t, s.primary_key) for t, s in program.tables.items()}
        self.sort_columns = keyed_reads.sort_columns(self.circuit, self.derived, pks)   # op id -> its runs' order
        self.consumers: Dict[int, List[int]] = {op.id: [] for op in self.ops}
        for op in self.ops:
            for i in op.inputs:
                self.consumers[i].append(op.id)
        # the types are the driver executor's (DuckDB's binder over empty tables): no Spark analysis at start
        self.arrow_schemas, self.state_arrow = derive_schemas(self.circuit, self.functions)
        self.op_views = self._views_of_ops()

    def _views_of_ops(self) -> Dict[int, List[str]]:
        """The views each op feeds (whose change or contents depend on it)."""
        out: Dict[int, List[str]] = {op.id: [] for op in self.ops}
        for v, o in sorted(self.circuit.outputs.items()):
            for op in self.circuit.upstream(o.delta):
                out[op.id].append(v)
        return out

    @property
    def local_master(self) -> bool:
        return str(self.master or "local").startswith("local")

    def key_columns(self, table: str, names) -> List[str]:
        """The state columns (``c<n>``) of ``table``'s columns ``names``."""
        fields = [f.name for f in self.program.tables[table].fields]
        return [f"c{fields.index(k)}" for k in names]

    def table_integral(self, table: str) -> int:
        return self.circuit.tables[table][1]

    def table_input(self, table: str) -> int:
        return self.circuit.tables[table][0]

    def op_of(self, key: str) -> Optional[int]:
        """The op whose state ``key`` is (None: not this circuit's)."""
        return next((i for i, k in self.keys.items() if k == key), None)

    # ------------------------------------------------------------ which ops a step runs
    def needed_ops(self, listened: Set[str]) -> Set[int]:
        """The ops a step runs: every op upstream of a state and of a listened view's change."""
        roots = [op.id for op in self.ops if op.owns_state]
        roots += [self.circuit.outputs[v].delta for v in listened]
        return self._upstream(roots)

    def backfill_ops(self, new_keys: Set[str], views: Set[str]) -> Set[int]:
        """The ops a backfill runs: upstream of the new states ``new_keys`` and of ``views``' changes."""
        roots = [op.id for op in self.ops if op.owns_state and self.keys[op.id] in new_keys]
        roots += [self.circuit.outputs[v].delta for v in views]
        return self._upstream(roots)

    def _upstream(self, roots: List[int]) -> Set[int]:
        need: Set[int] = set()
        for r in roots:
            need |= {o.id for o in self.circuit.upstream(r)}
        return need

    def emits(self, op: Op, need: Set[int], out_ids: Set[int]) -> bool:
        """Is the change of ``op`` wanted in this step: listened to, or read by an op that runs."""
        return op.id in out_ids or any(c in need for c in self.consumers[op.id])

    def consolidates(self, op: Op, need: Set[int], out_ids: Set[int]) -> bool:
        """Is ``op``'s change consolidated when it is made?  Users get consolidated changes, and a non-linear op's
        change is consolidated so that its rows that cancel go no further; operators accept duplicate rows (as
        linear ops pass them on), so that is skipped where every op the change reaches only sums it: accumulating
        aggregates, through linear ops that are not delivered (a join's million rows summed into a thousand groups
        need not be consolidated first)."""
        if op.id in out_ids:
            return True
        return op.algebra != "linear" and not self._summed(op.id, need, out_ids)

    def _summed(self, op_id: int, need: Set[int], out_ids: Set[int]) -> bool:
        cons = [self.ops[c] for c in self.consumers[op_id] if c in need]
        return bool(cons) and all(
            agg_op.accumulates(c)
            or (c.algebra == "linear" and not source.integrates(c) and c.id not in out_ids
                and self._summed(c.id, need, out_ids))
            for c in cons)
