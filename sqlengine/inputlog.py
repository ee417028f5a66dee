"""The durable input log.

Every accepted input batch becomes one entry: an Arrow IPC file named by its
sequence number, holding the table's columns (positional, ``c0..``) and the
weight.  ``append`` returns only after the file and its directory entry are on
disk, so an acknowledged batch survives a crash.  A step's commit records the
log position it consumed up to; a restart replays the entries after it.
"""
from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import Dict, List, Optional

import pyarrow as pa
import pyarrow.ipc as ipc

from planner.errors import InputError, PipelineError

from .state import fsync_dir


@dataclass
class Entry:
    seq: int
    table: str
    data: pa.Table


class InputLog:
    def __init__(self, root: str, first_seq: int = 0):
        self.root = root
        os.makedirs(root, exist_ok=True)
        self.lock = threading.Lock()
        self.cache: Dict[int, Entry] = {}
        seqs = self._seqs()
        self.next_seq = max((seqs[-1] + 1) if seqs else 0, first_seq)

    def _seqs(self) -> List[int]:
        return sorted(int(n.split(".")[0]) for n in os.listdir(self.root) if n.endswith(".arrow"))

    def _path(self, seq: int) -> str:
        return os.path.join(self.root, f"{seq:012d}.arrow")

    def append(self, table: str, data: pa.Table) -> int:
        """Durably append one batch; returns its sequence number."""
        with self.lock:
            seq = self.next_seq
            path = self._path(seq)
            tmp = path + ".tmp"
            schema = data.schema.with_metadata({b"table": table.encode()})
            try:
                with open(tmp, "wb") as f:
                    with ipc.new_file(f, schema) as w:
                        w.write_table(data.replace_schema_metadata(schema.metadata), max_chunksize=1 << 20)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, path)
                fsync_dir(self.root)
            except OSError as e:
                try:
                    os.remove(tmp)
                except OSError:
                    pass
                raise InputError(f"input for table {table} was not accepted: cannot write the input log "
                                 f"under {self.root}: {e.strerror or e}") from e
            self.cache[seq] = Entry(seq, table, data)
            self.next_seq = seq + 1
            return seq

    def read(self, seq: int) -> Entry:
        e = self.cache.get(seq)
        if e is not None:
            return e
        try:
            with ipc.open_file(self._path(seq)) as r:
                t = r.read_all()
        except (OSError, pa.ArrowInvalid) as err:
            raise PipelineError(f"input log entry {seq} is unreadable: {err}") from err
        table = t.schema.metadata[b"table"].decode()
        e = Entry(seq, table, t.replace_schema_metadata(None))
        self.cache[seq] = e
        return e

    def pending(self, start: int) -> List[int]:
        with self.lock:
            return list(range(start, self.next_seq))

    def truncate_before(self, seq: int) -> None:
        """Forget entries before ``seq`` (committed ones)."""
        for s in [s for s in self.cache if s < seq]:
            del self.cache[s]
        for s in self._seqs():
            if s < seq:
                try:
                    os.remove(self._path(s))
                except OSError:
                    pass
