"""Delivering view changes to Python: ``listen`` handlers and ``foreach_chunk`` callbacks.

Chunks are delivered on one background thread, in step order.  A callback
that raises is recorded; the pipeline reports it in ``status()`` and the next
API call raises it.
"""
from __future__ import annotations

import queue
import threading
from typing import Callable, Dict, List, Optional, Tuple

import pandas as pd
import pyarrow as pa

from sqlengine.zset import WEIGHT


class OutputHandler:
    """Collects the changes of one view since it was attached."""

    def __init__(self, view: str, columns: List[str]):
        self.view = view
        self.columns = list(columns) + [WEIGHT]
        self._chunks: List[pd.DataFrame] = []
        self._lock = threading.Lock()

    def _push(self, chunk: pd.DataFrame, seq_no: int) -> None:
        with self._lock:
            self._chunks.append(chunk)

    def to_pandas(self) -> pd.DataFrame:
        """All changes so far, one row per changed row, with a ``__weight`` column."""
        with self._lock:
            if not self._chunks:
                return pd.DataFrame({c: pd.Series(dtype=object) for c in self.columns})
            return pd.concat(self._chunks, ignore_index=True)

    def to_dict(self) -> List[dict]:
        return self.to_pandas().to_dict(orient="records")


def check_format(format: str) -> str:
    """A ``foreach_chunk`` format: "pandas" or "arrow"."""
    if format not in ("pandas", "arrow"):
        raise ValueError(f"foreach_chunk format must be 'pandas' or 'arrow', not {format!r}")
    return format


class Dispatcher:
    """A queue of (view, chunk, seq_no) consumed by one thread that calls the registered callbacks."""

    def __init__(self, on_error: Callable[[str, BaseException], None]):
        self.callbacks: Dict[str, List[Tuple[Callable, str]]] = {}   # view -> (callback, format)
        self.queue: "queue.Queue" = queue.Queue()
        self.on_error = on_error
        self.thread: Optional[threading.Thread] = None
        self.lock = threading.Lock()

    def add(self, view: str, cb: Callable, format: str = "pandas") -> None:
        """Call ``cb(chunk, seq_no)`` for each change of ``view``: ``chunk`` a pandas DataFrame (``format``
        "pandas", made once per chunk on this thread, not the step's) or the ``pyarrow.Table`` ("arrow")."""
        with self.lock:
            self.callbacks.setdefault(view, []).append((cb, format))

    def views(self):
        with self.lock:
            return {v for v, cbs in self.callbacks.items() if cbs}

    def start(self) -> None:
        if self.thread is None or not self.thread.is_alive():
            self.thread = threading.Thread(target=self._run, name="sqlengine-output", daemon=True)
            self.thread.start()

    def put(self, view: str, chunk: pa.Table, seq_no: int) -> None:
        self.queue.put((view, chunk, seq_no))

    def drain(self, timeout: Optional[float] = None) -> bool:
        """Wait until every queued chunk has been delivered."""
        import time
        end = None if timeout is None else time.monotonic() + timeout
        while self.queue.unfinished_tasks:
            if end is not None and time.monotonic() > end:
                return False
            time.sleep(0.005)
        return True

    def stop(self) -> None:
        if self.thread is not None and self.thread.is_alive():
            self.queue.put(None)
            self.thread.join(timeout=30)
        self.thread = None

    def _run(self) -> None:
        while True:
            item = self.queue.get()
            try:
                if item is None:
                    return
                view, chunk, seq = item
                with self.lock:
                    cbs = list(self.callbacks.get(view, []))
                frame = None
                for cb, fmt in cbs:
                    try:
                        if fmt == "arrow":
                            cb(chunk, seq)
                            continue
                        if frame is None:   # an integer column with NULLs as Python ints and None, not float64
                            frame = chunk.to_pandas(integer_object_nulls=True)
                        cb(frame, seq)
                    except BaseException as e:  # noqa: BLE001 - reported to the caller
                        self.on_error(view, e)
            finally:
                self.queue.task_done()
