"""Delivering view changes to sink connectors exactly once: an outbox and one thread per sink.

Before step ``n`` commits, the changes of every view with sinks are written durably to
``<storage>/outbox/<view>/<n>.arrow``.  After the commit, each sink's thread writes the steps it does
not hold yet, in order.  A sink's ``open()`` reads back the last step it holds, so after a crash the
delivery resumes right after it; outbox files of steps that never committed are removed on start
(replay writes them again).  Outbox files are removed once every sink of the view holds their step.

A sink that fails (a broker down, a full disk) reports the error in ``status()`` and retries with
backoff; steps wait in the outbox meanwhile, and the pipeline goes on.  A ``PermanentConnectorError``
(a missing table or topic, a type mismatch, another pipeline's output) or a ``StorageFencedError``
stops the sink in state ``failed`` (see ``sqlengine.ingest.sources``).
"""
from __future__ import annotations

import os
import threading
from typing import Callable, List, Optional

import pyarrow as pa
import pyarrow.ipc as ipc

from planner.errors import PermanentConnectorError
from sqlengine.errors import StorageFencedError
from sqlengine.ingest.sources import MAX_BACKOFF_S, ConnectorRunner
from sqlengine.state.store import atomic_write_arrow


class Outbox:
    """Each committed step's changes of the views that have sinks, until every sink holds them."""

    def __init__(self, root: str):
        self.root = root
        self.lock = threading.Lock()

    def _dir(self, view: str) -> str:
        return os.path.join(self.root, view)

    def recover(self, committed_step: int) -> None:
        """Remove what steps after ``committed_step`` (never committed) and interrupted writes left."""
        if not os.path.isdir(self.root):
            return
        for view in os.listdir(self.root):
            d = self._dir(view)
            for n in os.listdir(d):
                if n.endswith(".tmp") or (n.endswith(".arrow") and int(n[:-len(".arrow")]) > committed_step):
                    os.remove(os.path.join(d, n))

    def write(self, view: str, step: int, changes: pa.Table) -> None:
        d = self._dir(view)
        os.makedirs(d, exist_ok=True)
        atomic_write_arrow(os.path.join(d, f"{step:012d}.arrow"), changes)

    def steps(self, view: str, after: int, upto: int) -> List[int]:
        d = self._dir(view)
        try:
            names = os.listdir(d)
        except FileNotFoundError:
            return []
        steps = (int(n[:-len(".arrow")]) for n in names if n.endswith(".arrow"))
        return sorted(s for s in steps if after < s <= upto)

    def read(self, view: str, step: int) -> pa.Table:
        with ipc.open_file(pa.memory_map(os.path.join(self._dir(view), f"{step:012d}.arrow"))) as r:
            return r.read_all()

    def trim(self, view: str, upto: int) -> None:
        """Forget the steps up to ``upto`` (every sink of the view holds them)."""
        for s in self.steps(view, -1, upto):
            try:
                os.remove(os.path.join(self._dir(view), f"{s:012d}.arrow"))
            except OSError:
                pass


class SinkRunner(ConnectorRunner):
    """Delivers one view's committed changes to one sink, in step order, on its own thread."""
    kind = "sink"

    def __init__(self, declared, outbox: Outbox, committed: Callable[[], int], on_delivered: Callable[[], None],
                 columns: List[str], contents: Callable[[], tuple], fence: Optional[Callable[[], None]] = None):
        super().__init__(declared)
        self.fence = fence           # raises StorageFencedError once another process owns the storage
        self.sink = declared.connector
        self.view = declared.relation
        self.outbox = outbox
        self.committed = committed
        self.on_delivered = on_delivered
        self.columns = list(columns)
        self.contents = contents     # () -> (committed step, the view's consolidated contents with __weight)
        self.delivered = -1          # the last step the sink holds (-1: not opened yet)
        self.rows = 0
        self.steps_written = 0

    def backlog(self) -> List[int]:
        """Committed steps with changes that the sink does not hold yet."""
        if self.delivered < 0:
            return self.outbox.steps(self.view, 0, self.committed())
        return self.outbox.steps(self.view, self.delivered, self.committed())

    def caught_up(self) -> bool:
        """Holds every committed step (a failing or paused sink never counts as behind: nothing waits for it)."""
        if self.paused or self.state in ("retrying", "failed"):
            return True
        return self._opened and not self.backlog()

    def status(self) -> dict:
        return {"relation": self.view, "kind": "sink", "transport": self.sink.transport, "state": self.state,
                "rows": self.rows, "steps": self.steps_written, "position": {"step": max(self.delivered, 0)},
                "lag": len(self.backlog()), "errors": self.errors, "last_error": self.last_error}

    def _run(self) -> None:
        backoff = 0.2
        while not self._stop.is_set():
            if self.paused:
                self.state = "paused"
                self._sleep(0.2)
                continue
            try:
                if not self._opened:
                    self.delivered = int(self.sink.open())
                    if self.delivered == 0 and self.sink.SEEDED and self.committed() > 0:
                        step, rows = self.contents()
                        self.sink.seed(step, rows)
                        self.delivered = step
                    self._opened = True
                todo = self.backlog()
                if not todo:
                    self.state = "running"
                    self._worked()
                    self.on_delivered()
                    self._sleep(0.2)
                    continue
                for step in todo:
                    if self._stop.is_set() or self.paused:
                        break
                    if self.fence is not None:
                        self.fence()
                    changes = self.outbox.read(self.view, step)
                    changes = changes.rename_columns(self.columns + changes.column_names[len(self.columns):])
                    self.sink.write(step, changes)
                    self.delivered = step
                    self.rows += changes.num_rows
                    self.steps_written += 1
                self.state = "running"
                backoff = 0.2
                self._worked()
                self.on_delivered()
            except (StorageFencedError, PermanentConnectorError) as e:   # (fenced: another process owns the
                self._fail(e)                                            # storage and delivers) never retried
                self.on_delivered()
                return
            except BaseException as e:  # noqa: BLE001 - reported in status(), retried with backoff
                self._error(e)
                self.state = "retrying"
                if self._opened:
                    self._close()
                self._sleep(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_S)
                if self._stop.is_set():
                    return

