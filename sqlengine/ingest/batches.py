"""Taking one input call into the durable log: chunked, atomic, with an error policy.

An input call converts its rows chunk by chunk (``CHUNK_ROWS`` rows at a time, so
a huge DataFrame or CSV file is never converted whole in memory) and appends each
chunk to one atomic log batch: either every chunk is committed, or, if a chunk
fails (a bad row under ``on_error="reject"``, a full disk), none is.  Under
``on_error="dead_letter"`` bad rows are written to a JSON-lines dead-letter file
(durably, before the batch commits) and the good rows are applied.

A crash after a batch's dead-letter records are written but before the batch commits would leave them
in the file while the batch is read again (a connector re-reads from its last logged position) and its
records are written a second time.  So before appending, ``push`` durably notes the file, its size and
the log's next sequence number (``PENDING``); opening the storage again truncates the file back to that
size unless the log holds an entry at that number, that is, unless the batch committed.  (Batches are
written under the log's lock, one at a time, so the next entry is this batch's.)  Each bad row is then
in the dead letter exactly once.
"""
from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from typing import Callable, Dict, Iterator, Optional

import pyarrow as pa

from planner.bind import TableDef
from planner.errors import InputError

from sqlengine.state.faults import describe, io_point
from sqlengine.state.inputlog import InputLog
from sqlengine.ingest.inputs import Chunk, Errors
from sqlengine.state.store import atomic_write_bytes, fsync_dir
from sqlengine.zset import W, WEIGHT_TYPE, with_weight

CHUNK_ROWS = 1_000_000   # rows converted and logged at a time; bounds an input call's memory
PENDING = "dead_letter.pending"   # in the storage directory: dead-letter records of a batch not yet committed


def empty_batch(t: TableDef) -> pa.Table:
    """A log entry without rows: the table's positional columns and the weight."""
    from sqlengine.types import arrow_type
    from planner.logical import col
    arrays = [pa.array([], arrow_type(f.type)) for f in t.fields] + [pa.array([], WEIGHT_TYPE)]
    return pa.Table.from_arrays(arrays, names=[col(i) for i in range(len(t.fields))] + [W])


class Ingest:
    def __init__(self, log: InputLog, storage_dir: str, tables, notify: Callable[[], None]):
        self.log = log
        self.storage_dir = storage_dir
        self.notify = notify
        self.dead_lettered: Dict[str, int] = {t: 0 for t in tables}
        self._local = threading.local()   # the transaction open on each thread, if any
        self._recover_dead_letters()

    def _recover_dead_letters(self) -> None:
        """Remove the dead-letter records of a batch that was being written when the process died."""
        pending = os.path.join(self.storage_dir, PENDING)
        try:
            with open(pending) as f:
                note = json.load(f)
        except FileNotFoundError:
            return
        except ValueError:   # torn: written atomically, so it cannot be; be safe and keep the records
            note = None
        if note is not None and self.log.next_seq <= note["seq"]:
            self._truncate(note)
        os.remove(pending)
        fsync_dir(self.storage_dir)

    def _forget_pending(self) -> None:
        try:
            os.remove(os.path.join(self.storage_dir, PENDING))
        except FileNotFoundError:
            pass

    @staticmethod
    def _truncate(note: dict) -> None:
        try:
            with open(note["path"], "r+b") as f:
                if os.fstat(f.fileno()).st_size > note["size"]:
                    f.truncate(note["size"])
                    os.fsync(f.fileno())
        except FileNotFoundError:
            pass

    def dead_letter_path(self, table: str, path: Optional[str]) -> str:
        return os.path.abspath(path) if path else os.path.join(self.storage_dir, "dead_letter", f"{table}.jsonl")

    @contextlib.contextmanager
    def transaction(self):
        """Log the input calls of the ``with`` block (on this thread) as one atomic batch, which one step takes
        whole; nothing of it if the block raises.  Other inputs wait until it ends (it holds the log's lock)."""
        if getattr(self._local, "txn", None) is not None:
            raise InputError("a transaction is already open on this thread (transactions do not nest)")
        with self.log.batch(None, atomic=True) as batch:
            self._local.txn = batch
            try:
                yield
                batch.commit()
            finally:
                self._local.txn = None
        self.notify()

    def in_transaction(self) -> bool:
        return getattr(self._local, "txn", None) is not None

    @staticmethod
    def _changes(t: TableDef, chunks: Callable[[Errors, int], Iterator[Chunk]], errs: Errors) -> Iterator[pa.Table]:
        """The rows of an input call, chunk by chunk, with their weights."""
        for rows, weights in chunks(errs, CHUNK_ROWS):
            if not rows.num_rows:
                continue
            if t.append_only and (weights < 0 if isinstance(weights, int) else min(weights) < 0):
                raise InputError(f"table {t.name} is append-only ('append_only' = 'true'): it takes no "
                                 f"deletes, and this input deletes rows; nothing of it was accepted")
            if isinstance(weights, int):
                yield with_weight(rows, weights)
            else:
                yield rows.append_column(W, pa.array(weights, WEIGHT_TYPE))

    def push(self, t: TableDef, chunks: Callable[[Errors, int], Iterator[Chunk]], on_error: str = "reject",
             dead_letter: Optional[str] = None, source: Optional[dict] = None, errors: Optional[Errors] = None) -> int:
        """Convert and log one input call atomically; returns the number of rows accepted.  ``source``: the
        connector and the position the batch ends at, logged with it (even if no row is accepted).  In a
        transaction (:meth:`transaction`), the call's rows join the transaction's batch once all of them
        converted."""
        errs = errors or Errors(t.name, on_error)
        if dead_letter is not None and errs.reject:
            raise InputError(f"table {t.name}: dead_letter is only used with on_error='dead_letter'")
        txn = getattr(self._local, "txn", None)
        if txn is not None:
            if source is not None or not errs.reject:
                raise InputError(f"table {t.name}: an input in a transaction takes on_error='reject' (a bad row "
                                 f"rejects the call; the transaction goes on if the error is caught)")
            parts = list(self._changes(t, chunks, errs))   # all of the call, or none of it
            for data in parts:
                txn.append(data, t.name)
            return sum(d.num_rows for d in parts)
        accepted = 0
        with self.log.batch(t.name, source, empty_batch(t) if source is not None else None) as batch:
            for data in self._changes(t, chunks, errs):
                batch.append(data)
                accepted += data.num_rows
            note = None
            if errs.bad:
                note = self._write_dead_letters(t.name, errs, self.dead_letter_path(t.name, dead_letter), batch.id)
            try:
                batch.commit()
            except BaseException:
                if note is not None:   # the batch will be read again: so will its bad rows
                    self._truncate(note)
                raise
            finally:
                if note is not None:
                    self._forget_pending()
        self.dead_lettered[t.name] = self.dead_lettered.get(t.name, 0) + len(errs.bad)
        self.notify()
        return accepted

    def _write_dead_letters(self, table: str, errs: Errors, path: str, batch_id: str) -> dict:
        """Append the bad rows to ``path`` (JSON lines) and fsync, before the batch commits; returns the
        note written to ``PENDING``."""
        at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        lines = "".join(json.dumps({**rec, "batch": batch_id, "time": at}, default=str) + "\n"
                        for _, rec in sorted(errs.bad.items()))
        try:
            d = os.path.dirname(path)
            os.makedirs(d, exist_ok=True)
            new = not os.path.exists(path)
            with open(path, "a") as f:
                size = f.tell()
                note = {"path": path, "size": size, "seq": self.log.next_seq, "batch": batch_id}
                atomic_write_bytes(os.path.join(self.storage_dir, PENDING), json.dumps(note).encode())
                try:
                    f.write(lines)
                    f.flush()
                    io_point("dead_letter_write", path)
                    os.fsync(f.fileno())
                except OSError:
                    f.truncate(size)   # no partial records of a batch that is not applied
                    raise
            if new:
                fsync_dir(d)
            return note
        except OSError as e:
            raise InputError(f"input for table {table} was not accepted: cannot write the dead-letter file "
                             f"{path}: {describe(e)}") from e
