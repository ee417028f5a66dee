"""The public Pipeline API (modelled on Feldera's Python SDK)."""
from __future__ import annotations

import contextlib
import dataclasses
import os
import tempfile
import time
from typing import Callable, Dict, Iterator, Optional, Sequence

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import sqlglot
from sqlglot import exp

from planner import compile_program
from planner.clock import CLOCK
from planner.user_functions import ad_hoc_calls, python_functions
from planner.bind import DIALECT, name_of, position_of
from planner.interval_literals import ReadDuckDB
from planner.nested_types import empty_map_literals
from planner.types import contains
from planner.errors import BindError, EngineError, InputError, PermanentConnectorError, PipelineError, \
    UnsupportedError

from sqlengine.arrow_memory import use_jemalloc
from sqlengine.ingest import inputs, statement_rows
from sqlengine.state.faults import set_base
from sqlengine.state.lock import EPOCH_FILE, LOCK_FILE, StorageLock
from sqlengine.ingest.batches import Ingest
from sqlengine.state.inputlog import InputLog
from sqlengine.api.output import Dispatcher, OutputHandler, check_format
from sqlengine.controller import Controller
from sqlengine.api.query import Snapshot, check_query, load_relation
from sqlengine.executor.compaction import Compactor
from sqlengine.executor.context import Stats
from sqlengine.executor.row_errors import ERRORS_KEY, ERRORS_RELATION, read_errors
from sqlengine.executor.session import (START_OPTION, check_storage_reachable, is_local, resolve_conf,
                                        spark_master, start_spark)
from sqlengine.api.runtime_config import PipelineStatus, RuntimeConfig
from sqlengine.ingest.sinks import Outbox, SinkRunner
from sqlengine.ingest.sources import SourceRunner
from sqlengine.state.store import StateStore
from sqlengine.executor.watermarks import EventTime
from sqlengine.udf import implemented, python_signatures
from sqlengine.zset import WEIGHT


class Pipeline:
    """A SQL program kept up to date incrementally on Spark.

    Create one with :meth:`from_sql`, then :meth:`start` it, push changes with
    ``input_*`` / :meth:`execute`, and read results with ``query*``, :meth:`listen`
    or :meth:`foreach_chunk`.

    The steps run on the thread of a :class:`sqlengine.controller.Controller`; the methods it shares with
    the server's client are listed in :class:`sqlengine.api.protocol.PipelineLike`.
    """

    def __init__(self, sql: str, name: str = "pipeline", storage_dir: Optional[str] = None,
                 spark=None, spark_conf: Optional[Dict[str, str]] = None, runtime_config=None,
                 spark_master: Optional[str] = None, udfs: Sequence = ()):
        use_jemalloc()   # Arrow's pool for the steps (sqlengine.arrow_memory)
        self.program = compile_program(sql, functions=python_signatures(udfs))
        implemented(self.program, sql)   # the Python functions declared in SQL: imported or run now
        self.name = name
        self._args = dict(sql=sql, name=name, storage_dir=storage_dir, spark=spark, spark_conf=spark_conf,
                          runtime_config=runtime_config, spark_master=spark_master, udfs=tuple(udfs))
        runtime_config = RuntimeConfig.coerce(runtime_config)
        storage_dir = runtime_config.storage_for(storage_dir)
        spark_conf = {**runtime_config.session_conf(), **(spark_conf or {})} or None
        self._tmp = None
        if storage_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix=f"sqlengine-{name}-")
            storage_dir = self._tmp.name
        self.storage_dir = os.path.abspath(storage_dir)
        try:
            os.makedirs(self.storage_dir, exist_ok=True)
        except OSError as e:
            raise PipelineError(f"cannot create storage directory {self.storage_dir}: {e}") from e
        # the settings this pipeline runs with (``storage``: its storage directory)
        self.runtime_config = dataclasses.replace(runtime_config, storage=self.storage_dir)
        # one writer per storage: locked from here to stop() (sqlengine.state.lock); commits fence on its epoch
        self._lock = StorageLock.acquire(self.storage_dir, runtime_config.wait_for_lock_secs)
        try:
            self._open_storage(name, spark, spark_conf, spark_master)
        except BaseException:
            self._lock.release()
            raise

    def _open_storage(self, name: str, spark, spark_conf, spark_master) -> None:
        """Everything in the storage directory, opened while holding its lock."""
        from sqlengine.declared import declare_program
        # connectors declared in the program (checked now: a wrong one raises ConnectorError from from_sql)
        self._declared = declare_program(self.program, name, self.storage_dir)
        self._spark = spark
        if spark is not None and spark_master:
            raise PipelineError("give either spark= (a running session) or spark_master=, not both")
        self._spark_conf = dict(spark_conf or {}) if spark is not None else resolve_conf(spark_conf, spark_master)
        # the SparkSession starts in the background: steps on the driver never wait for it
        self._spark_future = None if spark is not None else start_spark(self._spark_conf)
        try:
            self.store = StateStore(os.path.join(self.storage_dir, "state"), fence=self._lock.check)
            # entries before the committed position were trimmed; new ones must number after it
            self.log = InputLog(os.path.join(self.storage_dir, "log"), first_seq=self.store.current.log_position[0])
        except OSError as e:
            raise PipelineError(f"cannot use storage directory {self.storage_dir}: {e}") from e
        self._ingest = Ingest(self.log, self.storage_dir, self.program.tables, self._notify)
        self._event_time = EventTime(self.program, self.storage_dir)
        self._pipeline_id = self._storage_id()
        self._outbox = Outbox(os.path.join(self.storage_dir, "outbox"))
        self._sources: Dict[str, SourceRunner] = {}
        self._sink_runners: Dict[str, SinkRunner] = {}
        self.engine = None
        self._snapshot = Snapshot(python_functions(self.program.functions))
        self._dispatcher = Dispatcher(self._callback_failed)
        # the step loop and its state (sqlengine.controller): shares the connectors' dicts and the declared list
        self._controller = Controller(
            self.name, self.program, self.store, self.log, self._event_time, self._outbox, self._dispatcher,
            storage_dir=self.storage_dir, declared=self._declared, sources=self._sources,
            sink_runners=self._sink_runners, pipeline_id=self._pipeline_id, lock=self._lock,
            batching=self.runtime_config.batching(), max_step_bytes=self.runtime_config.max_step_bytes,
            clock_resolution_usecs=self.runtime_config.clock_resolution_usecs)

    # the controller's state, under the names the server, the CLI and tests read
    @property
    def _state(self) -> str:
        return self._controller.state

    @_state.setter
    def _state(self, value: str) -> None:
        self._controller.state = value

    @property
    def _error(self) -> Optional[BaseException]:
        return self._controller.error

    @property
    def _compactor(self) -> Optional[Compactor]:
        return self._controller.compactor

    def _storage_id(self) -> str:
        """The id of this storage, shown to sinks (they refuse output another pipeline wrote): made once, when
        the storage is new, and kept in ``<storage_dir>/pipeline_id`` (durably, before any sink opens)."""
        import uuid
        from sqlengine.state.store import atomic_write_bytes
        path = os.path.join(self.storage_dir, "pipeline_id")
        try:
            with open(path) as f:
                found = f.read().strip()
            if found:
                return found
        except FileNotFoundError:
            pass
        except OSError as e:
            raise PipelineError(f"cannot read {path}: {e}") from e
        new = str(self.store.current.meta.get("pipeline_id") or uuid.uuid4().hex)
        try:
            atomic_write_bytes(path, (new + "\n").encode())
        except OSError as e:
            raise PipelineError(f"cannot write {path}: {e}") from e
        return new

    @classmethod
    def from_sql(cls, sql: str, name: str = "pipeline", storage_dir: Optional[str] = None, spark=None,
                 spark_conf: Optional[Dict[str, str]] = None, runtime_config=None,
                 spark_master: Optional[str] = None, udfs: Sequence = ()) -> "Pipeline":
        """Compile ``sql`` (CREATE TABLE / CREATE [MATERIALIZED] VIEW statements) into a pipeline.

        Errors in the program raise ``ParseError``, ``BindError`` or ``UnsupportedError`` here,
        with the line and column of the offending construct.

        Spark: ``spark`` is a running SparkSession to use; else the pipeline starts one with ``spark_conf``,
        on ``spark_master`` (e.g. ``spark://host:7077``; default ``$SQLENGINE_SPARK_MASTER``, else
        ``local[2]``).  On a cluster, ``storage_dir`` must be visible to every executor at the same path;
        :meth:`start` checks that.

        The storage directory is locked until :meth:`stop` (one writer per storage, see
        ``sqlengine.state.lock``): if another process has it open this raises ``StorageLockedError`` naming
        it, after waiting up to ``runtime_config.wait_for_lock_secs``.

        ``udfs``: Python functions the SQL calls, declared with :func:`sqlengine.udf`.
        """
        return cls(sql, name=name, storage_dir=storage_dir, spark=spark, spark_conf=spark_conf,
                   runtime_config=runtime_config, spark_master=spark_master, udfs=udfs)

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Start (or restart from ``storage_dir``) the pipeline; pending logged input is processed."""
        self._check()
        if self._state in ("running", "paused"):
            return
        if self._state == "stopped":
            raise PipelineError(f"pipeline {self.name} was stopped; create a new Pipeline to start again")
        from sqlengine.executor.placement import Placement
        from sqlengine.executor.runtime import Engine
        if self._spark is not None:
            source, master = self._spark, self._spark.sparkContext.master
        else:
            source = self._spark_future.result
            master = spark_master({k: v for k, v in self._spark_conf.items() if k != START_OPTION})
        if not is_local(master):   # a cluster: its executors must see the storage (waits for the session)
            check_storage_reachable(self._spark if self._spark is not None else source(), self.storage_dir)
        self.engine = Engine(self.program, source, self.store, master=master,
                             placement=Placement.from_config(self.runtime_config))
        self._controller.attach(self.engine)
        self._outbox.recover(self.store.current.step)
        self._controller.apply_program_change()
        set_base(self.store.current.step)
        self._dispatcher.start()
        self._controller.start()
        self._start_connectors()

    # ------------------------------------------------------------------ connectors
    def _start_connectors(self) -> None:
        """Sinks resume after the last step they hold; sources after the last position that reached the log
        (uncommitted batches are replayed from it), else after the committed one."""
        m = self.store.current
        for d in self._declared:
            d.connector.ctx.pipeline_id = self._pipeline_id
            d.connector.ctx.epoch = self._lock.epoch
            if d.kind == "sink" and d.key not in self._sink_runners:
                names = list(self.program.circuit.outputs[d.relation].names)
                self._sink_runners[d.key] = SinkRunner(d, self._outbox, lambda: self.store.current.step,
                                                       lambda v=d.relation: self._trim_outbox(v), names,
                                                       lambda v=d.relation: self._view_contents(v),
                                                       fence=self._lock.check)
        committed = dict(m.meta.get("sources", {}))
        logged = self.log.source_positions(m.log_position[0])
        for d in self._declared:
            if d.kind == "source" and d.key not in self._sources:
                self._sources[d.key] = SourceRunner(d, self.program.tables[d.relation], self._ingest,
                                                    self._backlog_rows, logged.get(d.key, committed.get(d.key)),
                                                    committed.get(d.key))
        for r in self._sink_runners.values():
            r.start()
        for r in self._sources.values():
            r.start()

    def _view_contents(self, view: str):
        """(committed step, the materialized view's consolidated rows with the weight column, SQL names)."""
        from sqlengine.zset import consolidate_arrow
        out = self.program.circuit.outputs[view]
        with self._controller.commit_lock:
            step = self.store.current.step
            runs = self.engine.state_rows(out.integral)
        t = consolidate_arrow(runs) if runs.num_rows else runs
        return step, t.rename_columns(list(out.names) + [WEIGHT])

    def _backlog_rows(self) -> int:
        return self.log.backlog_rows(self.store.current.log_position[0])

    def _trim_outbox(self, view: str) -> None:
        held = [r.delivered for r in self._sink_runners.values() if r.view == view]
        if held and min(held) > 0:
            with self._outbox.lock:
                self._outbox.trim(view, min(held))
        self._notify()

    def _connector(self, relation: str, name: str):
        key = f"{relation.lower()}.{name}"
        r = self._sources.get(key) or self._sink_runners.get(key)
        if r is None:
            known = ", ".join(sorted(set(self._sources) | set(self._sink_runners))) or "(none)"
            raise InputError(f"no connector {name!r} on {relation}. Connectors: {known}")
        return r

    def pause_connector(self, relation: str, name: str) -> None:
        """Pause one source (it stops reading; its position is kept) or sink (its steps wait in the outbox)."""
        self._check()
        self._require_started()
        self._connector(relation, name).pause()

    def resume_connector(self, relation: str, name: str) -> None:
        """Resume a paused connector (also one declared with ``"paused": true``), or try again one that failed
        for good (state ``failed``, e.g. after creating its missing table)."""
        self._check()
        self._require_started()
        self._connector(relation, name).resume()

    def _stop_connectors(self, sources_only: bool = False) -> None:
        for r in self._sources.values():
            r.stop()
        if not sources_only:
            for r in self._sink_runners.values():
                r.stop()

    def _open_for_queries(self) -> None:
        """Open the committed state for ad-hoc queries only (``sqlengine query`` / ``shell`` on the storage of
        a stopped pipeline): no steps, no connectors, no input; nothing in the storage changes."""
        from sqlengine.executor.placement import Placement
        from sqlengine.executor.runtime import Engine
        source = self._spark if self._spark is not None else self._spark_future.result
        self.engine = Engine(self.program, source, self.store,
                             master=spark_master({k: v for k, v in self._spark_conf.items() if k != START_OPTION}),
                             placement=Placement.from_config(self.runtime_config))
        self._controller.attach(self.engine, merges=False)
        self._state = "read-only"

    def pause(self) -> None:
        """Stop taking steps; input is still accepted and logged."""
        self._check()
        self._require_started()
        self._controller.pause()

    def resume(self) -> None:
        self._check()
        self._require_started()
        self._controller.resume()

    def stop(self, force: bool = False) -> None:
        """Stop the pipeline.  Unless ``force``, first processes all acknowledged input (a checkpoint).  The
        storage directory's lock is released: another process may open it."""
        try:
            self._stop(force)
        finally:
            self._lock.release()

    def _stop(self, force: bool) -> None:
        if self._state in ("created", "stopped"):
            self._state = "stopped"
            return
        self._stop_connectors(sources_only=True)
        if not force and self._error is None:
            if self._state == "paused":
                self.resume()
            self.wait_for_idle()
        self._controller.stop(force)
        self._stop_connectors()
        self._dispatcher.drain(timeout=None if not force else 5)
        self._dispatcher.stop()
        self._state = "stopped"
        self._snapshot = None

    def restart(self) -> None:
        """Stop (processing all acknowledged input) and start again from the same storage, with the same
        callbacks and sinks: the same as ``stop()`` and ``start()`` on a new pipeline over ``storage_dir``."""
        self.stop()
        self._reopen()
        self.start()

    def _reopen(self) -> None:
        """Re-create this stopped object over its storage, keeping callbacks and ``output_parquet`` sinks."""
        callbacks = {v: list(cbs) for v, cbs in self._dispatcher.callbacks.items()}
        added = [d for d in self._declared if d.name.startswith("output_parquet")]
        keep_tmp = self._tmp
        self._lock.release()   # taken again by __init__
        self.__init__(**{**self._args, "storage_dir": self.storage_dir})
        self._tmp = keep_tmp or self._tmp
        for v, cbs in callbacks.items():
            for cb, fmt in cbs:
                self._dispatcher.add(v, cb, fmt)
        self._declared += added

    def storage_status(self) -> str:
        """``"in_use"`` while the storage holds state or logged input, ``"cleared"`` otherwise."""
        m = self.store.current
        empty = m.step == 0 and not m.runs and self.log.next_seq == 0
        return "cleared" if empty else "in_use"

    def clear_storage(self) -> None:
        """Delete the pipeline's state, input log, outbox and dead letters (a stopped or never started
        pipeline only); the object can then be started afresh.  Sinks' own output is not touched."""
        if self._state in ("running", "paused"):
            raise PipelineError(f"pipeline {self.name} is {self._state}; stop() it before clear_storage()")
        import shutil
        if self._compactor is not None:   # a merge left running by stop(force=True) writes no more files
            self._compactor.close(wait=True)
        for n in os.listdir(self.storage_dir):
            if n in (LOCK_FILE, EPOCH_FILE):   # held by this object; the epoch keeps fencing older holders
                continue
            path = os.path.join(self.storage_dir, n)
            try:
                shutil.rmtree(path) if os.path.isdir(path) and not os.path.islink(path) else os.remove(path)
            except OSError as e:
                raise PipelineError(f"cannot clear {path}: {e}") from e
        self._reopen()

    def delete(self, clear_storage: bool = False) -> None:
        """Stop at once (``stop(force=True)``) and, with ``clear_storage``, delete the storage."""
        self.stop(force=True)
        if clear_storage:
            self.clear_storage()
            self.stop()

    def checkpoint(self) -> int:
        """Process all acknowledged input and return the id (step number) of the committed state."""
        acknowledged = self.log.next_seq
        self.wait_for_idle()
        with self._controller.commit_lock:
            self._check()
            m = self.store.current
            if m.log_position[0] < acknowledged:   # never a step that leaves acknowledged input unprocessed
                raise PipelineError(f"pipeline {self.name}: checkpoint found unprocessed input "
                                    f"(log position {m.log_position[0]} < {acknowledged})")
            return m.step

    def status(self) -> dict:
        """State, step, per-table and per-view row counters, latency, backlog, state size and last error."""
        c = self._controller
        lat = sorted(c.latencies[-1000:])
        pct = (lambda q: round(lat[min(len(lat) - 1, int(q * len(lat)))], 1)) if lat else (lambda q: None)
        m = self.store.current if self.store else None
        state_sizes = {}
        st = self.engine.stats if self.engine is not None else Stats()
        if self.engine is not None:
            for op_id, key in self.engine.keys.items():
                state_sizes[key] = self.store.size(key)
        return {
            "name": self.name,
            "state": PipelineStatus("failed" if self._error is not None else self._state),
            "step": m.step if m else 0,
            "rows_in": dict(c.rows_in),
            "rows_out": dict(c.rows_out),
            "step_latency_ms": {"last": round(c.latencies[-1], 1) if c.latencies else None,
                                "p50": pct(0.5), "p99": pct(0.99)},
            "spark_jobs_last_step": c.last_step_jobs,
            "steps_run_on": {"driver": st.steps_local, "spark": st.steps_spark},
            # ops of Spark steps run on the driver where their changes were, and those whose state reads were
            # too wide for it (sqlengine.executor.spark_step: Placement.driver_ops)
            "spark_step_ops": {"on_driver": st.ops_on_driver, "declined": st.ops_declined},
            "spark_fallbacks": {"steps": st.spark_fallbacks, "last_error": st.last_spark_error},
            # what passed through this (the driver's) process on the Spark path: rows and Arrow bytes brought
            # from Spark and shipped to it, and the bytes of state runs it wrote (issue 34)
            "driver_traffic": {"rows_from_spark": st.rows_from_spark, "bytes_from_spark": st.bytes_from_spark,
                               "rows_to_spark": st.rows_to_spark, "bytes_to_spark": st.bytes_to_spark,
                               "state_bytes_written": self.store.bytes_written if self.store else 0},
            "state_cache_bytes": self.engine.local.cache.used if self.engine else 0,
            "backlog_batches": len(self.log.pending(m.log_position[0])) if m else len(self.log.pending(0)),
            "state_size": state_sizes,
            "state_merges": c.compactor.status() if c.compactor else {"running": False, "installed": 0, "stalls": 0},
            "dead_letter_rows": dict(self._ingest.dead_lettered),
            "watermarks": {t: str(pd.Timestamp(w, unit="us")) for t, w in (m.meta.get("watermarks", {}) if m else {}).items()},
            "late_rows": dict(m.meta.get("late_rows", {})) if m else {},
            "closed_state_rows_dropped": st.state_rows_dropped,
            "connectors": {k: r.status() for k, r in list(self._sources.items()) + list(self._sink_runners.items())},
            "errors": dict(m.meta.get("errors", {})) if m else {},
            "spark_started": self._spark is not None or (self._spark_future is not None and
                                                         self._spark_future.done()),
            "storage_error": c.storage_error,
            "error": None if self._error is None else str(self._error),
        }

    def metrics(self) -> dict:
        return self.status()

    # ------------------------------------------------------------------ errors
    def _callback_failed(self, view: str, e: BaseException) -> None:
        self._controller.fail(PipelineError(f"callback for view {view} raised {type(e).__name__}: {e}"))

    def _check(self) -> None:
        """Raise the pipeline's recorded failure: every API call but ``status()`` and ``stop()`` raises it,
        for as long as the pipeline is failed (a failed pipeline processes nothing more)."""
        if self._error is not None:
            err = self._error
            if isinstance(err, EngineError):
                raise type(err)(err.message, sql=err.sql, offset=err.offset) from err
            raise PipelineError(f"pipeline failed: {type(err).__name__}: {err}") from err

    def _require_started(self) -> None:
        if self._state == "read-only":
            raise PipelineError(f"pipeline {self.name} is open read-only, for queries")
        if self._state == "created":
            raise PipelineError(f"pipeline {self.name} is not started; call start() first")
        if self._state == "stopped":
            raise PipelineError(f"pipeline {self.name} is stopped")

    def _require_open(self) -> None:
        """Input is accepted before start() (it is logged) and while running or paused, not after stop()."""
        self._check()
        if self._state in ("stopped", "read-only"):
            raise PipelineError(f"pipeline {self.name} is {self._state}; input is not accepted")

    # ------------------------------------------------------------------ input
    def _table(self, table: str):
        t = self.program.tables.get(table.lower())
        if t is None or t.name == CLOCK:   # the clock of NOW() is the engine's to change
            known = ", ".join(n for n in self.program.tables if n != CLOCK) or "(none)"
            raise InputError(f"unknown table '{table}'. Tables: {known}")
        return t

    def _notify(self) -> None:
        self._controller.wake()

    def input_pandas(self, table: str, df: pd.DataFrame, delete: bool = False, on_error: str = "reject",
                     dead_letter: Optional[str] = None, force: bool = False) -> None:
        """Insert (or with ``delete=True`` delete, one copy per row) the rows of ``df`` into ``table``.

        Returns once the batch is durable in the input log.  A bad row raises ``InputError`` naming the
        table, column and row, and nothing of the batch is applied; with ``on_error="dead_letter"`` bad rows
        go to a JSON-lines file (``dead_letter``, default ``<storage_dir>/dead_letter/<table>.jsonl``) and
        the good ones are applied.  Big frames are converted and logged in chunks, atomically.
        """
        self._require_open()
        t = self._table(table)
        self._ingest.push(t, lambda errs, n: inputs.pandas_chunks(t, df, delete, errs, n), on_error, dead_letter)

    def input_arrow(self, table: str, data, delete: bool = False, on_error: str = "reject",
                    dead_letter: Optional[str] = None, force: bool = False) -> None:
        """Insert (or with ``delete=True`` delete) the rows of ``data``: a ``pyarrow.Table``, a ``RecordBatch``,
        or an iterable of record batches (a ``RecordBatchReader``), without going through pandas.  Columns match
        the table's by name (ignoring case; a missing one is NULL); each is cast to its column's type as Arrow
        casts safely (an INT column takes int8-int64, a TIMESTAMP column strings or timestamps), and a value
        that does not fit is a bad row, as for :meth:`input_pandas` (``on_error``, ``dead_letter``)."""
        self._require_open()
        t = self._table(table)
        if isinstance(data, pa.RecordBatch):
            data = pa.Table.from_batches([data])
        elif not isinstance(data, pa.Table):
            data = pa.Table.from_batches(list(data)) if not isinstance(data, pa.RecordBatchReader) else data.read_all()
        self._ingest.push(t, lambda errs, n: inputs.arrow_chunks(t, data, delete, errs, n), on_error, dead_letter)

    def input_json(self, table: str, data, update_format: str = "raw", on_error: str = "reject",
                   dead_letter: Optional[str] = None, force: bool = False) -> None:
        """Push JSON records: ``raw`` rows are inserts; ``insert_delete`` wraps each row in
        ``{"insert": row}`` or ``{"delete": row}``.  ``data`` is a list, a dict or JSON text (an array or
        one object per line).  ``on_error`` and ``dead_letter`` as for :meth:`input_pandas`.  Field names
        match columns ignoring case; a missing field is NULL; a field that is no column of the table makes its
        record bad (unlike connectors, whose formats skip such fields by default: ``unknown_fields``)."""
        self._require_open()
        t = self._table(table)
        self._ingest.push(t, lambda errs, n: inputs.json_chunks(t, data, update_format, errs, n), on_error,
                          dead_letter)

    def input_csv(self, table: str, data, delete: bool = False, on_error: str = "reject",
                  dead_letter: Optional[str] = None, force: bool = False) -> None:
        """Insert (or delete) the rows of CSV ``data`` (a file path or CSV text) with a header row naming the
        columns; fields are converted to the table's column types, an empty field is NULL.  Read, converted
        and logged in chunks, atomically.  ``on_error`` and ``dead_letter`` as for :meth:`input_pandas`."""
        self._require_open()
        t = self._table(table)
        self._ingest.push(t, lambda errs, n: inputs.csv_chunks(t, data, delete, errs, n), on_error, dead_letter)

    @contextlib.contextmanager
    def transaction(self):
        """Apply the input calls of the ``with`` block together, in one step: no view ever shows some of them
        without the others (an order with its items, an update's delete with its insert)::

            with p.transaction():
                p.input_pandas("orders", new_orders)
                p.input_pandas("items", new_items)
                p.input_pandas("items", old_items, delete=True)

        The calls are durable when the block ends (each is validated as it is made: a bad row raises
        ``InputError`` and rejects that call, and the transaction goes on if the error is caught); if the block
        raises, none of them is applied.  Only the calls made on this thread join the transaction; inputs of
        other threads and connectors wait until it ends.  ``on_error="dead_letter"`` and ``execute()`` are
        not available inside one."""
        self._require_open()
        with self._ingest.transaction():
            yield self

    def execute(self, sql: str) -> int:
        """Run ``INSERT INTO t VALUES ...``, ``INSERT INTO t SELECT ...`` or ``DELETE FROM t WHERE ...``.

        Waits until all earlier input is processed, so the statement sees it.
        Returns the number of rows inserted or deleted.
        """
        self._require_open()
        if self._ingest.in_transaction():
            raise InputError("execute() is not available inside a transaction (it reads the tables as of the "
                             "input processed so far): use the input_* calls")
        try:
            stmts = [empty_map_literals(s) for s in sqlglot.parse(sql, read=ReadDuckDB) if s is not None]
        except sqlglot.errors.ParseError as e:
            raise InputError(f"syntax error: {str(e).splitlines()[0]}") from None
        if len(stmts) != 1:
            raise UnsupportedError("execute() takes exactly one statement")
        stmt = stmts[0]
        if isinstance(stmt, exp.Insert):
            return self._execute_insert(stmt, sql)
        if isinstance(stmt, exp.Delete):
            return self._execute_delete(stmt, sql)
        raise UnsupportedError(f"execute() supports INSERT and DELETE, not {stmt.key.upper()}", sql=sql,
                               offset=position_of(stmt))

    def _execute_insert(self, stmt: exp.Insert, sql: str) -> int:
        target = stmt.this
        cols = None
        if isinstance(target, exp.Schema):
            cols = [name_of(c) for c in target.expressions]
            target = target.this
        t = self._table(name_of(target))
        src = stmt.expression
        if isinstance(src, exp.Values):
            rows = statement_rows.values_rows(t, src, cols)
        else:
            self.wait_for_idle()
            rows = statement_rows.cast_rows(t, self._run_query(src.sql(dialect=DIALECT)), cols)
        return self._ingest.push(t, lambda errs, n: inputs.arrow_chunks(t, rows, False, errs, n))

    def _execute_delete(self, stmt: exp.Delete, sql: str) -> int:
        t = self._table(name_of(stmt.this))
        if t.append_only:
            raise InputError(f"table {t.name} is append-only ('append_only' = 'true'): it takes no deletes",
                             sql=sql, offset=position_of(stmt.this))
        self.wait_for_idle()
        q = exp.select("*").from_(t.name)
        where = stmt.args.get("where")
        if where is not None:
            q = q.where(where.this.copy())
        rows = self._run_query(q.sql(dialect=DIALECT)).rename_columns([f.name for f in t.fields])
        return self._ingest.push(t, lambda errs, n: inputs.arrow_chunks(t, rows, True, errs, n))

    # ------------------------------------------------------------------ output
    def _view(self, view: str) -> str:
        v = view.lower()
        if v not in self.program.views:
            raise BindError(f"unknown view '{view}'. Views: {', '.join(self.program.views) or '(none)'}")
        if self.program.views[v].local:
            raise BindError(f"view '{view}' is a LOCAL view: other views read it, and it has no output of its own "
                            "(declare it CREATE VIEW to listen to it)")
        return v

    def listen(self, view: str) -> OutputHandler:
        """A handler collecting the view's changes from now on (``to_pandas()``, ``to_dict()``)."""
        self._check()
        v = self._view(view)
        h = OutputHandler(v, list(self.program.circuit.outputs[v].names))
        self._dispatcher.add(v, h._push)
        return h

    def foreach_chunk(self, view: str, callback: Callable[[pd.DataFrame, int], None], format: str = "pandas") -> None:
        """Call ``callback(chunk, seq_no)`` on a separate thread once per step that changed ``view``.

        ``chunk`` holds the view's columns plus ``__weight`` (+1 insert, -1 delete), as a pandas DataFrame, or
        with ``format="arrow"`` as a ``pyarrow.Table`` (no conversion; NULL and NaN stay apart in float columns);
        ``seq_no`` is the step number.
        """
        self._check()
        self._dispatcher.add(self._view(view), callback, check_format(format))

    def output_parquet(self, view: str, directory: str) -> None:
        """Write the view's changes exactly once to ``directory``: one ``step-<n>.parquet`` per changed step.

        The same as declaring a ``file_output`` connector in changelog mode with the parquet format: each
        file has the view's columns plus ``__weight`` and ``__step``.  Attach before ``start()``.
        """
        self._check()
        from sqlengine.declared import declare
        v = self._view(view)
        if self._state != "created":
            raise PipelineError("attach output_parquet sinks before start()")
        n = sum(1 for d in self._declared if d.relation == v and d.name.startswith("output_parquet"))
        import json
        decl = json.dumps([{"name": f"output_parquet_{n}", "format": {"name": "parquet"},
                            "transport": {"name": "file_output", "config": {"path": os.fspath(directory)}}}])
        names = [(c, None) for c in self.program.circuit.outputs[v].names]
        self._declared += declare(v, "sink", (decl, None), None, self.name, self.storage_dir, names)

    # ------------------------------------------------------------------ the clock of NOW()
    def set_clock(self, when) -> None:
        """Stop following wall time: the clock that ``NOW()`` reads in views is ``when`` (a timestamp, naive
        UTC) from the next step on.  For tests and replays; it never moves backwards."""
        ts = pd.Timestamp(when)
        us = int((ts.tz_convert("UTC").tz_localize(None) if ts.tzinfo is not None else ts).value // 1000)
        self._controller.set_clock(us)

    def advance_clock(self, seconds: float) -> None:
        """Move the clock of ``NOW()`` forward by ``seconds`` (switching to a manual clock, see ``set_clock``,
        that starts at the committed clock, else at wall time)."""
        if seconds < 0:
            raise PipelineError("advance_clock: the clock does not move backwards")
        self._controller.advance_clock(seconds)

    # ------------------------------------------------------------------ waiting
    def wait_for_idle(self, timeout_s: Optional[float] = None, idle_interval_s: Optional[float] = None) -> None:
        """Block until all acknowledged input is processed and its changes delivered (to callbacks, and to
        sinks that are not failing or paused: a sink retrying after errors or failed for good is not waited
        for, see ``status()["connectors"]``; :meth:`wait_for_completion` raises for failed connectors).  With
        ``idle_interval_s`` (Feldera's meaning), also until no new input arrived for that long, so that
        sources that are still delivering are waited for."""
        if idle_interval_s:
            end = None if timeout_s is None else time.monotonic() + timeout_s
            while True:
                self.wait_for_idle(None if end is None else max(0.0, end - time.monotonic()))
                seen, quiet_until = self.log.next_seq, time.monotonic() + idle_interval_s
                while time.monotonic() < quiet_until and self.log.next_seq == seen:
                    if end is not None and time.monotonic() > end:
                        raise TimeoutError(f"pipeline {self.name} not idle for {idle_interval_s} s within "
                                           f"{timeout_s} s")
                    time.sleep(min(0.05, idle_interval_s))
                if self.log.next_seq == seen:
                    return
        self._check()
        self._require_started()
        end = None if timeout_s is None else time.monotonic() + timeout_s
        self._controller.wait_until_idle(end, timeout_s)
        self._check()
        left = None if end is None else max(0.0, end - time.monotonic())
        if not self._dispatcher.drain(left):
            raise TimeoutError(f"pipeline {self.name}: callbacks still running after {timeout_s} s")
        self._check()

    def _raise_failed_connectors(self) -> None:
        """Raise ``PermanentConnectorError`` naming every connector that stopped for good (state ``failed``)."""
        runners = list(self._sources.values()) + list(self._sink_runners.values())
        failed = [r for r in runners if r.state == "failed"]
        if failed:
            raise PermanentConnectorError(
                f"pipeline {self.name}: " + "; ".join(
                    f"{r.kind} {r.d.name} of {'table' if r.kind == 'source' else 'view'} {r.d.relation} "
                    f"({r.d.connector.transport}) failed: {r.reason or r.last_error}" for r in failed))

    def _retrying(self) -> str:
        """The connectors retrying after errors, and their last errors (for timeout messages)."""
        bad = [r for r in list(self._sources.values()) + list(self._sink_runners.values()) if r.state == "retrying"]
        return "".join(f"; {r.kind} {r.key} is retrying after {r.errors} error(s), the last: {r.last_error}"
                       for r in bad)

    def wait_for_completion(self, timeout_s: Optional[float] = None) -> None:
        """Wait until every source connector has read all its input and everything is processed and delivered
        (to callbacks and to every sink that is not paused: also to sinks retrying after errors).  A source
        that never ends (Kafka, a followed directory) makes this wait for ever; without connectors it is
        :meth:`wait_for_idle`.  A source or sink that failed for good (a permanent error such as a missing
        table or topic or bad credentials, or a rejected input record) raises ``PermanentConnectorError``
        naming it and the reason, as soon as it is seen; one retrying after transient errors is waited for
        (``TimeoutError`` after ``timeout_s``, naming it and its last error)."""
        self._check()
        self._require_started()
        end = None if timeout_s is None else time.monotonic() + timeout_s
        cv = self._controller.cv
        with cv:
            while not all(r.done or r.paused for r in self._sources.values()) and self._error is None:
                self._raise_failed_connectors()
                if end is not None and time.monotonic() >= end:
                    raise TimeoutError(f"pipeline {self.name}: sources not finished after {timeout_s} s"
                                       + self._retrying())
                cv.wait(timeout=0.05)
        self._raise_failed_connectors()
        self.wait_for_idle(timeout_s=None if end is None else max(0.0, end - time.monotonic()))
        with cv:   # sinks retrying after errors: completion is their delivery too
            while not all(r.paused or (r.state != "retrying" and r.caught_up())
                          for r in self._sink_runners.values()) and self._error is None:
                self._raise_failed_connectors()
                if end is not None and time.monotonic() >= end:
                    raise TimeoutError(f"pipeline {self.name}: sinks not caught up after {timeout_s} s"
                                       + self._retrying())
                cv.wait(timeout=0.05)
        self._check()
        self._raise_failed_connectors()

    # ------------------------------------------------------------------ queries
    def _relations(self) -> Dict[str, Optional[bool]]:
        rel = {t: None if self.program.circuit.stream(t) else True for t in self.program.tables}
        rel.update({v: d.materialized for v, d in self.program.views.items()})
        rel[ERRORS_RELATION] = True
        return rel

    def _run_query(self, sql: str) -> pa.Table:
        self._check()
        if self._state != "read-only":
            self._require_started()
        relations = self._relations()
        q = ad_hoc_calls(check_query(sql, relations), self.program.functions, sql)   # the user's functions
        used = {name_of(t.this) for t in q.find_all(exp.Table) if isinstance(t.this, exp.Identifier)} & set(relations)
        eng = self.engine
        with self._snapshot.lock:
            with self._controller.commit_lock:   # every relation of the query from the same committed step
                for name in sorted(used):
                    if name == ERRORS_RELATION:
                        signature = tuple(self.store.paths(ERRORS_KEY))
                        if self._snapshot.needs(name, signature):
                            self._snapshot.load(name, signature, read_errors(self.store))
                        continue
                    op = (eng.ctx.table_integral(name) if name in self.program.tables
                          else self.program.circuit.outputs[name].integral)
                    signature = tuple(eng.state_paths(op))
                    if self._snapshot.needs(name, signature):
                        fields = (self.program.tables[name].fields if name in self.program.tables
                                  else self.program.views[name].plan.fields)
                        names = [f.name for f in fields]
                        self._snapshot.load(name, signature, load_relation(eng.state_rows(op), names),
                                            [(f.name, f.type.sql) for f in fields if contains(f.type, "INTERVAL")])
            return self._snapshot.run(q)

    def query_arrow(self, sql: str) -> pa.Table:
        """Run a read-only SELECT over the materialized tables and views of the last committed step."""
        return self._run_query(sql)

    def query_pandas(self, sql: str) -> pd.DataFrame:
        return self._run_query(sql).to_pandas(integer_object_nulls=True)   # exact integers, NULL as None

    def query(self, sql: str) -> Iterator[dict]:
        """Rows of a SELECT as dicts."""
        t = self._run_query(sql)
        for batch in t.to_batches():
            yield from batch.to_pylist()

    def query_tabular(self, sql: str) -> Iterator[str]:
        """The result as lines of a text table."""
        t = self._run_query(sql)
        names = t.column_names
        rows = [["NULL" if v is None else str(v) for v in r.values()] for r in t.to_pylist()]
        widths = [max([len(n)] + [len(r[i]) for r in rows]) for i, n in enumerate(names)]
        sep = "+" + "+".join("-" * (w + 2) for w in widths) + "+\n"
        yield sep
        yield "| " + " | ".join(n.ljust(w) for n, w in zip(names, widths)) + " |\n"
        yield sep
        for r in rows:
            yield "| " + " | ".join(v.ljust(w) for v, w in zip(r, widths)) + " |\n"
        yield sep

    def query_parquet(self, sql: str, path: str) -> None:
        """Write the result of a SELECT to a parquet file (its directory is created if missing)."""
        t = self._run_query(sql)
        path = os.path.abspath(os.fspath(path))
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            pq.write_table(t, path)
        except OSError as e:
            raise InputError(f"cannot write the query result to {path}: {e}") from e

    def explain(self, view: str, passes: bool = False) -> str:
        """The view's logical plan and its incremental circuit, as text; ``passes``: also the plan after
        each rewrite rule, with its time."""
        return self.program.explain(self._view(view), passes=passes)
