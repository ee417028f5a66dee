"""The step controller of one pipeline: the thread that reads the input log, applies event time, runs the
engine, commits the step, writes the outbox and delivers the outputs.

:class:`sqlengine.Pipeline` (the embedded API) owns one :class:`Controller` and delegates to it; the server and
:class:`sqlengine.api.client.RemotePipeline` sit on top of ``Pipeline``.  A step:

1. takes every pending entry of the input log, up to ``max_step_bytes`` of it (RuntimeConfig; a backlog is taken
   in big steps, input that comes as fast as it is stepped in small ones; :meth:`Controller.take_batch`);
2. takes out the rows that came after their table's watermark (:meth:`Controller.drop_late`);
3. runs the circuit on the tables' changes, and the clock's of ``NOW()`` (``Engine.run_step``);
4. adds the rows that the watermark closed to emit-final views (:meth:`Controller.emit_final`);
5. writes the sinks' outputs to the outbox, commits the manifest, then delivers the outputs to callbacks
   (:meth:`Controller.commit_step`);
6. drops state that the watermarks closed, and puts in place the runs of a background merge.

A commit that fails on storage (disk full, read-only) is retried after ``STORAGE_RETRY_S``; any other error
fails the pipeline (:attr:`Controller.error`).
"""
from __future__ import annotations

import hashlib
import logging
import threading
import time
from typing import Dict, List, Optional

import pyarrow as pa
import pyarrow.compute  # noqa: F401 - pa.compute

from planner.clock import CLOCK
from planner.errors import PipelineError

from sqlengine.executor.compaction import Compactor
from sqlengine.executor.context import calls_of, python_fingerprints
from sqlengine.executor.row_errors import ERRORS_KEY
from sqlengine.state.faults import SimulatedCrash, crash_point
from sqlengine.state.store import Manifest, StorageError
from sqlengine.zset import W, WEIGHT

STORAGE_RETRY_S = 1.0   # wait before retrying a step whose commit failed (disk full, read-only storage)
log = logging.getLogger(__name__)


class Controller:
    """The step loop of one pipeline and its state: lifecycle state (``created``, ``running``, ``paused``,
    ``stopped``, ``read-only``), the error that failed it, the step thread, the background merges and the
    step counters.

    ``cv`` guards the state and is notified on every change (new input, a step done, a failure);
    ``commit_lock`` is held around every commit, so that readers see one committed step.  The pipeline's
    collaborators are shared, not copied: ``sources`` and ``sink_runners`` (filled when connectors start) and
    ``declared`` (the declared connectors; ``output_parquet`` adds to it before start).
    """

    def __init__(self, name: str, program, store, log_, event_time, outbox, dispatcher, *, storage_dir: str,
                 declared: list, sources: dict, sink_runners: dict, pipeline_id: str, lock, max_step_bytes: int,
                 batching=(0, 0), clock_resolution_usecs: int = 1):
        self.name = name
        self.program = program
        self.store = store
        self.log = log_
        self.event_time = event_time
        self.outbox = outbox
        self.dispatcher = dispatcher
        self.storage_dir = storage_dir
        self.declared = declared
        self.sources = sources
        self.sink_runners = sink_runners
        self.pipeline_id = pipeline_id
        self.lock = lock   # the storage's StorageLock: released when a simulated crash "kills the process"
        # (rows, seconds): how long a step waits for input to accumulate (RuntimeConfig); (0, 0): not at all
        self.batching = batching
        self.max_step_bytes = max_step_bytes   # how much of a backlog one step takes (RuntimeConfig)
        # NOW() in views (planner/clock.py): the clock table, its resolution, and a manual clock (set_clock)
        self.clock = CLOCK if CLOCK in program.tables else None
        self.clock_resolution = clock_resolution_usecs
        self.manual_clock: Optional[int] = None
        self.engine = None
        self.compactor: Optional[Compactor] = None
        self.state = "created"
        self.cv = threading.Condition()
        self.commit_lock = threading.RLock()
        self.thread: Optional[threading.Thread] = None
        self.stop_requested = False
        self.stepping = False
        self.error: Optional[BaseException] = None
        self.storage_error: Optional[str] = None
        self.latencies: List[float] = []
        self.rows_in: Dict[str, int] = {t: 0 for t in program.tables}
        self.rows_out: Dict[str, int] = {v: 0 for v in program.views}
        self.last_step_jobs = 0

    # ------------------------------------------------------------------ lifecycle
    def attach(self, engine, merges: bool = True) -> None:
        """Use ``engine`` for the steps (``merges``: with background merges of its state runs)."""
        self.engine = engine
        if merges:
            self.compactor = Compactor(engine, self.wake)

    def start(self) -> None:
        """Start the step thread."""
        self.stop_requested = False
        self.state = "running"
        self.thread = threading.Thread(target=self.loop, name=f"sqlengine-{self.name}", daemon=True)
        self.thread.start()

    def pause(self) -> None:
        with self.cv:
            self.state = "paused"
            self.cv.notify_all()

    def resume(self) -> None:
        with self.cv:
            self.state = "running"
            self.cv.notify_all()

    def stop(self, force: bool) -> None:
        """End the step thread; put in place (unless ``force`` or failed) the last background merge."""
        with self.cv:
            self.stop_requested = True
            self.cv.notify_all()
        if self.thread is not None:
            self.thread.join()
        if self.compactor is not None and (force or self.error is not None):
            self.compactor.close(wait=False)
        elif self.compactor is not None:   # a clean stop leaves the state merged
            try:
                self.install_merges(wait=True)
            except Exception as e:  # noqa: BLE001 - the steps are committed; the runs are merged after a restart
                log.warning("pipeline %s: a background merge failed at stop: %s", self.name, e)
            self.compactor.close()

    def wake(self) -> None:
        with self.cv:
            self.cv.notify_all()

    def fail(self, e: BaseException) -> None:
        """Record the pipeline's failure (the first one); a failed pipeline takes no more input."""
        with self.cv:
            if self.error is None:
                self.error = e
            self.cv.notify_all()
        for r in list(self.sources.values()):   # a failed pipeline takes no more input (sinks still deliver)
            r.signal_stop()

    def sink_views(self) -> set:
        return {d.relation for d in self.declared if d.kind == "sink"}

    # ------------------------------------------------------------------ program changes
    def objects(self) -> Dict[str, str]:
        """A digest of every table's and view's definition (kept in each manifest: a restart compares them)."""
        out = {f"table {t}": repr(d.fields) + ("|stream" if self.program.circuit.stream(t) else "")
               for t, d in self.program.tables.items()}   # (a stream keeps no rows: it cannot become stored)
        calls = python_fingerprints(self.program.functions)   # a view calling a changed Python function changed
        out.update({f"view {v}": f"{d.materialized}|{d.plan!r}" + calls_of(repr(d.plan), calls)
                    for v, d in self.program.views.items()})
        return {k: hashlib.sha1(v.encode()).hexdigest()[:16] for k, v in out.items()}

    def apply_program_change(self) -> None:
        """Reopening a storage_dir with a changed program: keep the state of unchanged operators, drop
        that of removed views, backfill new or changed views from the tables' committed contents (one
        step, committed like any other).  A changed or removed table raises ``PipelineError`` naming it."""
        m = self.store.current
        if m.step == 0 and not m.runs:
            return
        old, new = m.meta.get("objects", {}), self.objects()
        changed = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
        if not changed:
            self.drop_unowned_state(m)
            return
        tables = [k for k in changed if k.startswith("table ") and k in old]
        if tables:
            raise PipelineError(
                f"the program differs from the one that wrote {self.storage_dir}: changed or removed tables: "
                f"{', '.join(k[len('table '):] for k in tables)} (their stored rows do not fit the new program; "
                f"changed objects: {', '.join(changed)}; an append-only table that was not stored, because nothing read it, "
                f"cannot start being read: its past rows are gone). Use a new storage_dir, or the original table "
                f"definitions.")
        old_keys = set(m.meta.get("keys", m.runs))
        new_keys = set(self.engine.keys.values()) - old_keys
        views = {k[len("view "):] for k in changed if k.startswith("view ") and k in new}
        listened = (self.dispatcher.views() | self.sink_views()) & views
        step = m.step + 1
        result = self.engine.backfill(step, new_keys, listened)
        result.manifest.log_position = list(m.log_position)
        self.commit_step(step, result, {}, list(m.log_position))

    def drop_unowned_state(self, m) -> None:
        """Runs of operators that this engine does not store (an earlier version stored an integral that is now
        read through other state, see ``planner.rules.share_table_state``) are dropped from the manifest; their
        files go when no kept manifest lists them any more."""
        live = set(self.engine.keys.values()) | {ERRORS_KEY}
        if all(k in live for k in m.runs):
            return
        with self.commit_lock:
            self.store.commit(Manifest(step=m.step, log_position=list(m.log_position),
                                       runs={k: v for k, v in m.runs.items() if k in live}, meta=dict(m.meta)))

    # ------------------------------------------------------------------ waiting
    def idle(self) -> bool:
        """No step running, all logged input committed and the clock of ``NOW()`` not behind."""
        m = self.store.current if self.store else None
        pos = m.log_position if m else [0, 0]
        return not self.stepping and pos[0] >= self.log.next_seq and (m is None or m.step > 0) and \
            not self.clock_due()

    def wait_until_idle(self, end: Optional[float], timeout_s: Optional[float]) -> None:
        """Block until :meth:`idle` and every sink runner caught up, or the pipeline failed (``end``: the
        ``time.monotonic()`` deadline, else ``None``)."""
        with self.cv:
            while (not self.idle() or not all(r.caught_up() for r in self.sink_runners.values())) \
                    and self.error is None:
                if self.state == "paused":
                    raise PipelineError(f"pipeline {self.name} is paused with unprocessed input; resume() it")
                left = None if end is None else end - time.monotonic()
                if left is not None and left <= 0:
                    raise TimeoutError(f"pipeline {self.name} not idle after {timeout_s} s")
                self.cv.wait(timeout=0.05 if left is None else min(0.05, left))

    # ------------------------------------------------------------------ the clock of NOW()
    def clock_now(self) -> int:
        """The clock's time in microseconds: the manual clock, or wall time truncated to the resolution."""
        if self.manual_clock is not None:
            return self.manual_clock
        now = time.time_ns() // 1000
        return now - now % self.clock_resolution

    def clock_due(self) -> bool:
        """A program with NOW() whose committed clock is behind: a step has to run, even without input."""
        if self.clock is None or self.store is None or self.store.current is None:
            return False
        committed = self.store.current.meta.get("clock")
        return committed is None or self.clock_now() > committed

    def _committed_clock(self) -> Optional[int]:
        return self.store.current.meta.get("clock") if self.store and self.store.current else None

    def set_clock(self, us: int) -> None:
        """A manual clock at ``us`` microseconds from the next step on (never before the committed clock)."""
        with self.cv:
            committed = self._committed_clock()
            self.manual_clock = max(us, committed or us)
            self.cv.notify_all()

    def advance_clock(self, seconds: float) -> None:
        """Move the manual clock forward (from the committed clock, else wall time, if there is none yet)."""
        with self.cv:
            base = self.manual_clock
            if base is None:
                committed = self._committed_clock()
                base = committed if committed is not None else self.clock_now()
            self.manual_clock = base + int(round(seconds * 1_000_000))
            self.cv.notify_all()

    def clock_delta(self, meta: dict):
        """This step's change of the clock table (-old, +new) and the new clock, or (None, old)."""
        old = meta.get("clock")
        now = self.clock_now()
        if old is not None and now <= old:
            return None, old
        values = ([old] if old is not None else []) + [now]
        weights = ([-1] if old is not None else []) + [1]
        schema = self.engine.arrow_schemas[self.engine.table_input(self.clock)]
        return pa.table([pa.array(values, pa.int64()).cast(pa.timestamp("us")), pa.array(weights, pa.int64())],
                        schema=schema), now

    # ------------------------------------------------------------------ the step loop
    def loop(self) -> None:
        while True:
            with self.cv:
                while not self.stop_requested and self.nothing_to_step() and not self.compactor.done():
                    self.cv.wait(timeout=0.2)
                if self.stop_requested:
                    return
                stepping = not self.nothing_to_step()
                if stepping:
                    self.wait_for_batch()
                    self.stepping = True
            try:
                if not stepping:   # a background merge ended: its runs replace those it merged
                    self.install_merges()
                    continue
                self.step()
                self.storage_error = None
            except StorageError as e:   # disk full, read-only: the step did not commit; retry it later
                self.storage_error = str(e)
                with self.cv:
                    self.stepping = False
                    self.cv.notify_all()
                    self.cv.wait(timeout=STORAGE_RETRY_S)
                continue
            except BaseException as e:  # noqa: BLE001 - surfaced through status() and the next call
                if isinstance(e, SimulatedCrash):   # a killed process: the OS would release its lock (before
                    self.lock.release()             # the failure is seen: a test then reopens the storage)
                self.fail(e)
                with self.cv:
                    self.stepping = False
                    self.cv.notify_all()
                return
            with self.cv:
                self.stepping = False
                self.cv.notify_all()

    def nothing_to_step(self) -> bool:
        return self.state == "paused" or (self.idle() and self.store.current.step > 0)

    def install_merges(self, wait: bool = False) -> None:
        """Commit the runs of a background merge that has ended (``wait``: once the running one ends), see
        ``sqlengine.executor.compaction``.  A storage error is reported like a step's and the merge is redone
        later: merging is an optimization."""
        try:
            merged = self.compactor.take(wait=wait)
            if merged is not None:
                with self.commit_lock:
                    self.store.commit(merged)
        except StorageError as e:
            self.storage_error = str(e)

    def wait_for_batch(self) -> None:
        """With a RuntimeConfig's min_batch_size_records: let input accumulate until that many rows are pending
        or the first of them waited max_buffering_delay_usecs (called holding ``cv``)."""
        rows, delay = self.batching
        if not rows or self.store.current.step == 0:
            return
        end = time.monotonic() + delay
        while not self.stop_requested and time.monotonic() < end and self.state != "paused" and \
                self.log.backlog_rows(self.store.current.log_position[0]) < rows:
            self.cv.wait(timeout=min(0.01, max(0.0, end - time.monotonic())))

    def take_batch(self):
        """Entries for the next step: everything pending, up to ``max_step_bytes`` of Arrow data (a bigger
        backlog is split across steps, but a transaction, ``Pipeline.transaction``, is taken whole).  Per
        table, the batches stay in order: deletes see earlier inserts."""
        m = self.store.current
        seq, offset = m.log_position
        per_table: Dict[str, List[pa.Table]] = {}
        size = 0
        positions = {}   # source -> the position its last consumed batch ends at
        whole = -1       # the last entry of a transaction being taken
        while seq < self.log.next_seq and (size < self.max_step_bytes or seq <= whole):
            whole = max(whole, self.log.atomic_ends.get(seq, -1))
            e = self.log.read(seq)
            if e.meta is not None:
                positions[e.meta["source"]] = e.meta["position"]
            if not e.data.num_rows:
                seq, offset = seq + 1, 0
                continue
            data = e.data.slice(offset) if offset else e.data
            nbytes = data.nbytes
            take = data.num_rows
            if seq > whole and size + nbytes > self.max_step_bytes:   # the rows that fit (at least one)
                take = max(1, (self.max_step_bytes - size) * data.num_rows // max(nbytes, 1))
            if take < data.num_rows:
                per_table.setdefault(e.table, []).append(data.slice(0, take))
                offset += take
                break
            per_table.setdefault(e.table, []).append(data)
            size += nbytes
            seq, offset = seq + 1, 0
        return per_table, [seq, offset], positions

    def step(self) -> None:
        t0 = time.perf_counter()
        sc = self.engine.spark.sparkContext if self.engine.spark_ready else None   # never wait for Spark here
        group = f"sqlengine-{self.name}-{id(self)}-step-{self.store.current.step + 1}"
        if sc is not None:
            sc.setJobGroup(group, f"pipeline {self.name} step {self.store.current.step + 1}")
        per_table, new_pos, positions = self.take_batch()
        step = self.store.current.step + 1
        watermarks, late = self.drop_late(per_table, step)
        deltas = {}
        for table, parts in per_table.items():
            if not parts:
                continue
            if self.program.tables[table].primary_key:
                deltas[table] = self.engine.inputs.upsert(table, parts, self.program.tables[table].primary_key)
            else:
                deltas[table] = self.engine.inputs.clamp_deletes(table, parts)
        clock = None
        if self.clock is not None:
            change, clock = self.clock_delta(self.store.current.meta)
            if change is not None:
                deltas[self.clock] = change
        listened = self.dispatcher.views() | self.sink_views() | set(self.event_time.final)
        crash_point("step_start", step)
        old_watermarks = dict(self.store.current.meta.get("watermarks", {}))
        result = self.engine.run_step(step, deltas, listened, initial=(step == 1))
        result.manifest.log_position = new_pos
        if positions:
            result.manifest.meta["sources"] = {**result.manifest.meta.get("sources", {}), **positions}
        if clock is not None:
            result.manifest.meta["clock"] = clock
        if self.event_time:
            result.manifest.meta["watermarks"] = watermarks
            if late:
                counts = dict(result.manifest.meta.get("late_rows", {}))
                for t, n in late.items():
                    counts[t] = counts.get(t, 0) + n
                result.manifest.meta["late_rows"] = counts
            self.emit_final(result, old_watermarks, watermarks)
        self.commit_step(step, result, deltas, new_pos)
        if self.event_time.gc:
            closed = self.event_time.closed(self.engine.state_arrow, watermarks)
            if closed:
                try:
                    trimmed = self.engine.merges.drop_closed(step, closed)
                    if trimmed is not None:
                        with self.commit_lock:
                            self.store.commit(trimmed)
                except StorageError as e:   # like compaction: an optimization, retried after the next step
                    self.storage_error = str(e)
        self.last_step_jobs = len(sc.statusTracker().getJobIdsForGroup(group)) if sc is not None else 0
        self.latencies.append((time.perf_counter() - t0) * 1000)
        self.install_merges(wait=self.compactor.behind())   # one that ended (or, if behind, wait for it)
        self.compactor.start(step)   # state runs merged in the background, off the steps' path

    def drop_late(self, per_table: Dict[str, List[pa.Table]], step: int):
        """Take late rows out of the step's batches (see :mod:`sqlengine.executor.watermarks`); the watermarks
        after the step and the late rows per table."""
        watermarks = dict(self.store.current.meta.get("watermarks", {}))
        late: Dict[str, int] = {}
        for table in list(per_table):
            if table not in self.event_time.columns:
                continue
            kept, rows, newest = self.event_time.split_late(table, per_table[table], watermarks.get(table))
            per_table[table] = kept
            if newest is not None:
                watermarks[table] = newest
            if rows is not None:
                late[table] = rows.num_rows
                try:
                    self.event_time.write_late(table, rows, step)
                except OSError as e:
                    raise StorageError(f"cannot write the late rows of table {table}: {e}") from e
        return watermarks, late

    def emit_final(self, result, before: Dict[str, int], after: Dict[str, int]) -> None:
        """An emit-final view's output in this step: the rows of its integral that the watermark closed."""
        from sqlengine.executor.watermarks import bound_of, final_rows
        from sqlengine.zset import consolidate_arrow
        for v, b in self.event_time.final.items():
            out = self.program.circuit.outputs[v]
            hi, lo = bound_of(b.terms, after), bound_of(b.terms, before)
            if hi is None or (lo is not None and hi <= lo):
                result.outputs[v] = None
                continue
            rows = self.engine.state_rows(out.integral)
            delta = result.outputs.get(v)
            if delta is not None and delta.num_rows:
                rows = pa.concat_tables([rows, delta.cast(rows.schema)])
            rows = consolidate_arrow(rows) if rows.num_rows else rows
            result.outputs[v] = final_rows(rows, f"c{b.column}", lo, hi)

    def commit_step(self, step: int, result, deltas: Dict[str, pa.Table], new_pos) -> None:
        """Write sink files, commit the step's manifest, then deliver its outputs to listeners."""
        result.manifest.meta["objects"] = self.objects()
        result.manifest.meta["pipeline_id"] = self.pipeline_id
        result.manifest.meta["keys"] = sorted(set(self.engine.keys.values()))
        for v in self.sink_views():
            t = result.outputs.get(v)
            if t is not None and t.num_rows:
                chunk = t.rename_columns(list(self.program.circuit.outputs[v].names) + [WEIGHT])
                try:
                    self.outbox.write(v, step, chunk)
                except OSError as e:
                    raise StorageError(f"cannot write the outbox of view {v}: {e}") from e
        crash_point("runs_written", step)
        with self.commit_lock:
            self.store.commit(result.manifest)
        crash_point("committed", step)
        for key, position in result.manifest.meta.get("sources", {}).items():
            r = self.sources.get(key)
            if r is not None:
                r.source.committed(position)
        for r in self.sink_runners.values():
            r.wake()
        for table, d in deltas.items():
            self.rows_in[table] += int(pa.compute.sum(pa.compute.abs(d.column(W))).as_py() or 0)
        self.log.truncate_before(new_pos[0])
        for v, t in result.outputs.items():
            if t is None or v not in self.dispatcher.views():
                continue
            names = list(self.program.circuit.outputs[v].names)
            self.dispatcher.put(v, t.rename_columns(names + [WEIGHT]), step)   # (pandas made on its thread)
        for v, n in result.changed_rows.items():
            self.rows_out[v] += n
        crash_point("delivered", step)


__all__ = ["Controller", "STORAGE_RETRY_S"]
