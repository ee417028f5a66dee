"""The durable input log.

Every accepted input batch becomes one entry, or for a batch bigger than one
chunk several: an Arrow IPC file named by its sequence number, holding the
table's columns (positional, ``c0..``) and the weight.  A call returns only
after its files and their directory entries are on disk, so an acknowledged
batch survives a crash.  A step's commit records the log position it consumed
up to; a restart replays the entries after it.

A batch of several chunks is atomic: its chunk files are named
``<seq>-b<batch>.arrow`` and count only once the commit record
``batch-<batch>.commit`` is on disk.  Until then the step loop does not see
them (``next_seq`` is not advanced), an error discards them, and a restart
deletes chunk files without a commit record.
"""
from __future__ import annotations

import json
import os
import threading
import uuid
from dataclasses import dataclass
from typing import Dict, List, Optional

import pyarrow as pa
import pyarrow.ipc as ipc

from planner.errors import InputError, PipelineError

from sqlengine.state.faults import describe
from sqlengine.state.store import atomic_write_arrow, atomic_write_bytes, fsync_dir, synced_write_arrow


@dataclass
class Entry:
    seq: int
    table: str
    data: pa.Table
    meta: Optional[dict] = None   # a connector's batch: {"source": "<table>.<connector>", "position": ...}


def _schema_meta(table: str, meta: Optional[dict]) -> Dict[bytes, bytes]:
    out = {b"table": table.encode()}
    if meta is not None:
        out[b"source"] = json.dumps(meta).encode()
    return out


def _entry_meta(md) -> Optional[dict]:
    raw = (md or {}).get(b"source")
    return json.loads(raw) if raw else None


class InputLog:
    def __init__(self, root: str, first_seq: int = 0):
        self.root = root
        os.makedirs(root, exist_ok=True)
        self.lock = threading.RLock()          # held by an append or a whole batch
        self.files_lock = threading.Lock()     # guards ``files``: the step thread trims while a batch is written
        self.cache: Dict[int, Entry] = {}
        self.files: Dict[int, str] = {}
        self.atomic_ends: Dict[int, int] = {}   # an entry of a transaction -> its last entry: a step takes it whole
        self._recover()
        seqs = sorted(self.files)
        self.next_seq = max((seqs[-1] + 1) if seqs else 0, first_seq)

    def _recover(self) -> None:
        """Index the entries on disk; delete temporary files and chunks of batches that never committed."""
        names = os.listdir(self.root)
        committed = {n[len("batch-"):-len(".commit")] for n in names if n.startswith("batch-") and n.endswith(".commit")}
        removed = False
        batches_alive = set()
        for n in names:
            full = os.path.join(self.root, n)
            if n.endswith(".tmp"):
                os.remove(full)
                removed = True
            elif n.endswith(".arrow"):
                stem = n[:-len(".arrow")]
                seq, _, batch = stem.partition("-b")
                if batch and batch not in committed:
                    os.remove(full)
                    removed = True
                    continue
                batches_alive.add(batch)
                self.files[int(seq)] = n
        for b in committed - batches_alive:
            os.remove(os.path.join(self.root, f"batch-{b}.commit"))
            removed = True
        for b in committed & batches_alive:   # a transaction's entries stay one step's
            try:
                with open(os.path.join(self.root, f"batch-{b}.commit")) as f:
                    record = json.load(f)
            except (OSError, ValueError):
                continue
            if record.get("atomic"):
                self._mark_atomic(record["first"], record["chunks"])
        if removed:
            fsync_dir(self.root)

    def _error(self, table: str, path: str, e: OSError) -> InputError:
        return InputError(f"input for table {table} was not accepted: cannot write the input log: {path}: "
                          f"{describe(e)}")

    def _write(self, name: str, table: str, data: pa.Table, meta: Optional[dict] = None, chunk: bool = False) -> None:
        """Write one entry file durably (temporary file, fsync, rename); nothing remains on error.  A batch's
        ``chunk`` is written in place, its data fsynced: it is visible (and its name made durable) only by the
        batch's commit record, and a restart removes the chunks of a batch without one."""
        path = os.path.join(self.root, name)
        write = synced_write_arrow if chunk else atomic_write_arrow
        try:
            write(path, data.replace_schema_metadata(_schema_meta(table, meta)), fault="log_write")
        except OSError as e:
            raise self._error(table, path if chunk else path + ".tmp", e) from e

    def append(self, table: str, data: pa.Table, meta: Optional[dict] = None) -> int:
        """Durably append one batch; returns its sequence number.  ``meta``: the source and the position
        the batch ends at (a connector's batch)."""
        with self.lock:
            seq = self.next_seq
            name = f"{seq:012d}.arrow"
            self._write(name, table, data, meta)
            with self.files_lock:
                self.files[seq] = name
            self.cache[seq] = Entry(seq, table, data, meta)
            self.next_seq = seq + 1
            return seq

    def batch(self, table: Optional[str], meta: Optional[dict] = None, empty: Optional[pa.Table] = None,
              atomic: bool = False) -> "Batch":
        """An atomic multi-chunk batch: ``with log.batch(t) as b: b.append(chunk) ...; b.commit()``.
        With ``meta`` (a connector's source and position) a batch without rows still logs ``empty`` (a
        zero-row table), so that its position commits.  ``atomic``: a transaction, whose chunks (of any
        tables) one step takes whole (``atomic_ends``); a big input call's batch may be split."""
        return Batch(self, table, meta, empty, atomic)

    def read(self, seq: int) -> Entry:
        e = self.cache.get(seq)
        if e is not None:
            return e
        try:
            with self.files_lock:
                name = self.files[seq]
            with ipc.open_file(pa.memory_map(os.path.join(self.root, name))) as r:
                t = r.read_all()
        except (OSError, KeyError, pa.ArrowInvalid) as err:
            raise PipelineError(f"input log entry {seq} is unreadable: {err}") from err
        table = t.schema.metadata[b"table"].decode()
        e = Entry(seq, table, t.replace_schema_metadata(None), _entry_meta(t.schema.metadata))
        self.cache[seq] = e
        return e

    def _mark_atomic(self, first: int, n: int) -> None:
        for i in range(n):
            self.atomic_ends[first + i] = first + n - 1

    def pending(self, start: int) -> List[int]:
        return list(range(start, self.next_seq))

    def backlog_rows(self, start: int) -> int:
        """Rows logged at or after ``start`` (entries of this process; bounds what sources may add)."""
        return sum(e.data.num_rows for s, e in list(self.cache.items()) if s >= start)

    def source_positions(self, start: int) -> Dict[str, object]:
        """The position of each source's last entry at or after ``start`` (uncommitted input, replayed)."""
        out: Dict[str, object] = {}
        for seq in self.pending(start):
            e = self.cache.get(seq)
            if e is not None:
                meta = e.meta
            else:
                with self.files_lock:
                    name = self.files.get(seq)
                if name is None:
                    continue
                with ipc.open_file(pa.memory_map(os.path.join(self.root, name))) as r:
                    meta = _entry_meta(r.schema.metadata)
            if meta is not None:
                out[meta["source"]] = meta["position"]
        return out

    def truncate_before(self, seq: int) -> None:
        """Forget entries before ``seq`` (committed ones), and commit records of batches wholly before it."""
        for s in [s for s in list(self.cache) if s < seq]:
            self.cache.pop(s, None)
        for s in [s for s in list(self.atomic_ends) if s < seq]:
            self.atomic_ends.pop(s, None)
        with self.files_lock:
            gone = [self.files.pop(s) for s in sorted(s for s in self.files if s < seq)]
            alive = {n.partition("-b")[2][:-len(".arrow")] for n in self.files.values()}
        for name in gone:
            try:
                os.remove(os.path.join(self.root, name))
            except OSError:
                pass
        # commit records of batches whose chunks are all consumed (never of a batch being committed now)
        for b in {n.partition("-b")[2][:-len(".arrow")] for n in gone} - alive - {""}:
            try:
                os.remove(os.path.join(self.root, f"batch-{b}.commit"))
            except OSError:
                pass


class Batch:
    """Chunks of one input call, appended under the log's lock and made visible together by ``commit``.

    A batch of one chunk is written as a plain entry; bigger ones as chunk files plus a commit record.
    Leaving the ``with`` block without ``commit()`` (e.g. on a validation error) discards the chunks.
    """

    def __init__(self, log: InputLog, table: Optional[str], meta: Optional[dict] = None,
                 empty: Optional[pa.Table] = None, atomic: bool = False):
        self.log, self.table, self.meta, self.empty, self.atomic = log, table, meta, empty, atomic
        self.id = uuid.uuid4().hex[:16]
        self.buffered: Optional[pa.Table] = None
        self.buffered_table: Optional[str] = None
        self.names: List[str] = []
        self.rows = 0
        self.done = False

    def __enter__(self) -> "Batch":
        self.log.lock.acquire()
        return self

    def __exit__(self, *exc) -> None:
        try:
            if not self.done:
                self.abort()
        finally:
            self.log.lock.release()

    def append(self, data: pa.Table, table: Optional[str] = None) -> None:
        """Add a chunk of ``table``'s changes (default: the batch's table; a transaction's chunks are of any
        table)."""
        if data.num_rows == 0:
            return
        table = table or self.table
        self.rows += data.num_rows
        if self.buffered is None and not self.names and not self.atomic:
            self.buffered, self.buffered_table = data, table   # maybe the only chunk: then a plain entry
            return
        if self.buffered is not None:
            self._write_chunk(self.buffered, self.buffered_table)
            self.buffered = None
        self._write_chunk(data, table)

    def _write_chunk(self, data: pa.Table, table: str) -> None:
        name = f"{self.log.next_seq + len(self.names):012d}-b{self.id}.arrow"
        self.log._write(name, table, data, self.meta, chunk=True)
        self.names.append(name)

    def commit(self) -> int:
        """Make the batch visible (durably); returns the sequence number of its last entry, -1 if empty."""
        log = self.log
        self.done = True
        if not self.names:
            if self.buffered is None and self.meta is not None and self.empty is not None:
                return log.append(self.table, self.empty, self.meta)   # no rows, but the position moves on
            return log.append(self.buffered_table, self.buffered, self.meta) if self.buffered is not None else -1
        first = log.next_seq
        path = os.path.join(log.root, f"batch-{self.id}.commit")
        record = json.dumps({"first": first, "chunks": len(self.names), "rows": self.rows,
                             **({"atomic": True} if self.atomic else {})}).encode()
        try:
            atomic_write_bytes(path, record, fault="log_write")
        except OSError as e:
            self.done = False
            raise log._error(self.table, path + ".tmp", e) from e
        with log.files_lock:
            for i, name in enumerate(self.names):
                log.files[first + i] = name
        if self.atomic:
            log._mark_atomic(first, len(self.names))
        log.next_seq = first + len(self.names)
        return log.next_seq - 1

    def abort(self) -> None:
        """Remove the chunks written so far (uncommitted, so invisible anyway; a restart would remove them)."""
        self.done = True
        for name in self.names:
            try:
                os.remove(os.path.join(self.log.root, name))
            except OSError:
                pass
        self.names = []
        self.buffered = None
        try:
            fsync_dir(self.log.root)
        except OSError:
            pass
