"""Egress: each view's changes, encoded once per step and offered to every connected stream.

A :class:`Fanout` is the single ``foreach_chunk`` callback of one view; each egress connection is a
:class:`Subscriber`, a bounded queue that a stream falling too far behind overflows (it is then disconnected).
"""
from __future__ import annotations

import asyncio
import logging
import threading
from collections import deque
from typing import List, Optional

from ..zset import WEIGHT
from .encoding import dumps, json_value
from .errors import error_body

log = logging.getLogger("sqlengine.server")

EGRESS_QUEUE_BYTES = 64 << 20       # a subscriber that falls this far behind is disconnected
EGRESS_QUEUE_LINES = 100_000


class Subscriber:
    """One egress connection: a bounded queue of encoded lines filled by the pipeline's output thread and
    drained by the response's async generator (``loop.call_soon_threadsafe`` wakes it)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, after_step: int, max_bytes: int, max_lines: int):
        self.loop = loop
        self.after_step = after_step
        self.max_bytes, self.max_lines = max_bytes, max_lines
        self.lines: deque = deque()
        self.bytes = 0
        self.lock = threading.Lock()
        self.event = asyncio.Event()
        self.closed = False
        self.error: Optional[dict] = None

    def _wake(self) -> None:
        try:
            self.loop.call_soon_threadsafe(self.event.set)
        except RuntimeError:   # the loop is closed: the server is shutting down
            pass

    def offer(self, step: Optional[int], line: bytes) -> None:
        with self.lock:
            if self.closed or (step is not None and step <= self.after_step):
                return
            if self.lines and (self.bytes + len(line) > self.max_bytes or len(self.lines) >= self.max_lines):
                self.error = error_body(
                    f"egress subscriber fell behind by more than {self.max_bytes} bytes or {self.max_lines} "
                    "steps and was disconnected; reconnect and re-read the view's contents with /query",
                    "EgressQueueOverflow")
                self.closed = True
                self.lines.clear()
            else:
                self.lines.append(line)
                self.bytes += len(line)
        self._wake()

    def close(self, error: Optional[dict] = None) -> None:
        with self.lock:
            if error is not None and self.error is None:
                self.error = error
            self.closed = True
        self._wake()

    def take(self):
        with self.lock:
            lines = list(self.lines)
            self.lines.clear()
            self.bytes = 0
            return lines, self.closed, self.error


class Fanout:
    """The single ``foreach_chunk`` callback of one view: encodes each changed step once and offers the line
    to every subscriber.  It never raises (a raising callback would fail the pipeline)."""

    def __init__(self, names: List[str], kinds: List[str]):
        self.names, self.kinds = names, kinds
        self.subs: List[Subscriber] = []
        self.lock = threading.Lock()

    def add(self, s: Subscriber) -> None:
        with self.lock:
            self.subs.append(s)

    def remove(self, s: Subscriber) -> None:
        with self.lock:
            if s in self.subs:
                self.subs.remove(s)

    def subscribers(self) -> List[Subscriber]:
        with self.lock:
            return list(self.subs)

    def __call__(self, chunk, step: int) -> None:
        subs = self.subscribers()
        if not subs:
            return
        try:
            line = (dumps({"sequence_number": int(step), "json_data": self.encode(chunk)}) + "\n").encode()
        except Exception as e:  # noqa: BLE001 - reported to the subscribers, never to the pipeline
            log.exception("cannot encode a chunk")
            for s in subs:
                s.close(error_body(f"cannot encode step {step}: {e}", "InternalError"))
            return
        for s in subs:
            s.offer(int(step), line)

    def encode(self, chunk) -> List[dict]:
        cols = [chunk[c].tolist() for c in self.names]
        out: List[dict] = []
        for i, w in enumerate(chunk[WEIGHT].tolist()):
            row = {n: json_value(cols[j][i], self.kinds[j]) for j, n in enumerate(self.names)}
            out.extend([{"insert" if w > 0 else "delete": row}] * abs(int(w)))
        return out

    def close_all(self, error: Optional[dict] = None) -> None:
        for s in self.subscribers():
            s.close(error)
