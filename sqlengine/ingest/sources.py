"""Running a table's source connectors: one thread each, feeding the durable input log.

Each batch a source returns is converted and logged together with the position it ends at
(``Ingest.push(source=...)``).  The step that consumes it records that position in its manifest
(``meta["sources"]``).  On start a source reopens at the position of its last logged batch, or, if
the log holds none, at the committed one, so no input is lost or read twice.

A source waits while the input backlog is full (``MAX_BACKLOG_ROWS`` unprocessed rows), so a fast
source cannot fill memory.  A source that fails (a broker down, an unreadable file) reports the error
in ``status()`` and retries with backoff; the pipeline and its other sources go on.

Errors are of two kinds.  A ``ConnectorError`` (or any other exception) is *transient*: state
``retrying``, retried with backoff, logged at WARNING to the ``sqlengine.connectors`` logger (the first
one, then at most once per ``WARN_EVERY_S`` per connector, with the count).  A ``PermanentConnectorError``
(a missing table or topic, a type mismatch, bad credentials, output of another pipeline) and a rejected
input record (``on_error`` ``reject``) are *permanent*: the connector is closed, its state is ``failed``
with the reason in ``last_error``, logged once at ERROR, and not retried (``Pipeline.wait_for_completion``
raises it) until ``resume_connector()`` or a new run of the pipeline (``restart()``) tries it again.
"""
from __future__ import annotations

import logging
import os
import threading
import time
import traceback
from typing import Any, Callable, Optional

from planner.errors import ConnectorError, EngineError, InputError, PermanentConnectorError

from sqlengine.ingest.inputs import Errors

MAX_BACKLOG_ROWS = 2_000_000   # unprocessed logged rows at which sources wait
BATCH_ROWS = 100_000           # rows a source is asked for at a time
MAX_BACKOFF_S = 10.0
WARN_EVERY_S = 30.0            # transient errors of one connector are logged at most this often

log = logging.getLogger("sqlengine.connectors")


def describe_error(e: BaseException) -> str:
    if isinstance(e, EngineError):
        return e.message
    return f"{type(e).__name__}: {e}"


class ConnectorRunner:
    """A connector's thread and its controls (pause, resume, stop), shared by sources and sinks."""
    kind = "connector"

    def __init__(self, declared):
        self.d = declared
        self.paused = bool(declared.options["paused"])
        self.state = "paused" if self.paused else "starting"
        self.errors = 0
        self.last_error: Optional[str] = None
        self.reason: Optional[str] = None       # why the connector failed for good (state "failed")
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._opened = False
        self._failing = 0                       # transient errors since the connector last worked
        self._warned_at: Optional[float] = None

    @property
    def key(self) -> str:
        return self.d.key

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"sqlengine-{self.kind}-{self.key}", daemon=True)
        self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    def pause(self) -> None:
        self.paused = True
        self._wake.set()

    def resume(self) -> None:
        """Resume a paused connector; one that failed for good is tried again (its thread had ended)."""
        self.paused = False
        if self.state == "failed" and self._thread is not None and not self._thread.is_alive() \
                and not self._stop.is_set():
            self.state, self.reason = "starting", None
            self.start()
        self._wake.set()

    def signal_stop(self) -> None:
        """Ask the thread to end (without waiting for it)."""
        self._stop.set()
        self._wake.set()

    def stop(self, timeout: float = 10.0) -> None:
        self.signal_stop()
        if self._thread is not None:
            self._thread.join(timeout)
        self._close()

    def _close(self) -> None:
        """Close the connector (best effort); the next round of the loop opens it again."""
        self._opened = False
        try:
            self.d.connector.close()
        except Exception:   # noqa: BLE001 - closing is best effort
            pass

    def _sleep(self, seconds: float) -> None:
        self._wake.wait(seconds)
        self._wake.clear()

    def _error(self, e: BaseException) -> None:
        """A transient error: recorded for ``status()`` and logged at WARNING, rate-limited per connector."""
        self.last_error = f"connector {self.key} ({self.d.connector.transport}): {describe_error(e)}"
        self.errors += 1
        self._failing += 1
        now = time.monotonic()
        if self._warned_at is None or now - self._warned_at >= WARN_EVERY_S:
            more = f" ({self._failing} errors since it last worked)" if self._failing > 1 else ""
            log.warning("%s %s; retrying with backoff%s", self.kind, self.last_error, more)
            self._warned_at = now

    def _worked(self) -> None:
        """The connector works (again) after transient errors."""
        if self._failing:
            log.info("%s connector %s (%s) works again after %d error(s)", self.kind, self.key,
                     self.d.connector.transport, self._failing)
            self._failing = 0
            self._warned_at = None

    def _fail(self, e: BaseException) -> None:
        """A permanent error: the connector is closed and stays ``failed`` with the reason (logged once)."""
        self.reason = describe_error(e)
        self.last_error = f"connector {self.key} ({self.d.connector.transport}): {self.reason}"
        self.errors += 1
        self.state = "failed"
        log.error("%s connector %s (%s) failed and is not retried: %s", self.kind, self.key,
                  self.d.connector.transport, self.reason)
        self._close()

    def _run(self) -> None:
        raise NotImplementedError


class SourceRunner(ConnectorRunner):
    """Drives one source connector on its own thread."""
    kind = "source"

    def __init__(self, declared, table_def, ingest, backlog: Callable[[], int], position: Any,
                 committed: Any = None):
        super().__init__(declared)
        declared.connector.committed(committed)
        self.source = declared.connector
        self.table = table_def
        self.ingest = ingest
        self.backlog = backlog
        self.position = position
        self.rows = 0
        self.bytes = 0
        self.batches = 0
        self.dead_letters = 0

    def dead_letter_path(self) -> str:
        path = self.d.options.get("dead_letter")
        return os.path.abspath(path) if path else os.path.join(
            self.ingest.storage_dir, "dead_letter", f"{self.d.relation}.{self.d.name}.jsonl")

    @property
    def done(self) -> bool:
        """Finished reading (a bounded source at its end) or failed for good."""
        return self.state in ("finished", "failed")

    def status(self) -> dict:
        lag = None
        try:
            lag = self.source.lag()
        except Exception:   # noqa: BLE001
            pass
        return {"relation": self.d.relation, "kind": "source", "transport": self.source.transport,
                "state": self.state, "rows": self.rows, "bytes": self.bytes, "batches": self.batches,
                "position": self.position, "lag": lag, "dead_letter_rows": self.dead_letters,
                "dead_letter": self.dead_letter_path(), "errors": self.errors, "last_error": self.last_error}

    # ------------------------------------------------------------ the loop
    def _run(self) -> None:
        backoff = 0.2
        pending = None   # a batch read but not yet logged
        while not self._stop.is_set():
            if self.paused:
                self.state = "paused"
                self._sleep(0.2)
                continue
            if self.backlog() >= MAX_BACKLOG_ROWS:
                self.state = "backpressure"
                self._sleep(0.02)
                continue
            try:
                if not self._opened:
                    self.source.open(self.position)
                    self._opened = True
                if pending is None:
                    pending = self.source.poll(BATCH_ROWS)
                if pending is None:
                    if self.source.finished():
                        self.state = "finished"
                        self.ingest.notify()
                        return
                    self.state = "running"
                    backoff = 0.2
                    self._worked()
                    continue
                errs = Errors(self.d.relation, self.d.options["on_error"])
                n = self.ingest.push(self.table, pending.chunks, self.d.options["on_error"],
                                     self.dead_letter_path() if not errs.reject else None,
                                     source={"source": self.key, "position": pending.position}, errors=errs)
                self.rows += n
                self.bytes += pending.bytes
                self.batches += 1
                self.dead_letters += len(errs.bad)
                if getattr(pending, "warning", None):   # e.g. a file that changed after it was read
                    self.last_error = f"connector {self.key} ({self.source.transport}): {pending.warning}"
                    self.errors += 1
                self.position = pending.position
                pending = None
                self.state = "running"
                backoff = 0.2
                self._worked()
            except (InputError, PermanentConnectorError) as e:   # on_error=reject and a bad record, or a permanent
                self._fail(e)                                     # error: the connector stops
                self.ingest.notify()
                return
            except BaseException as e:  # noqa: BLE001 - reported in status(), retried with backoff
                if not isinstance(e, (ConnectorError, OSError, EngineError)):
                    e = ConnectorError(f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=3)}")
                self._error(e)
                self.state = "retrying"
                pending = None    # the reopened source reads it again from the last logged position
                self._reopen()
                self._sleep(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_S)

    def _reopen(self) -> None:
        """After a failure, read again from the last position that reached the log."""
        if self._opened:
            self._close()
