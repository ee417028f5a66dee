"""An exactly-once parquet sink: one file per step that changed the view.

The engine writes ``step-<n>.parquet`` *before* it commits step ``n``.  If the
process dies before the commit, the file belongs to a step that will be
recomputed: on start, files of steps after the last committed one are
removed, and replay writes them again.  So every committed step's change is
in the directory exactly once, and concatenating the files in step order
integrates to the view's contents.
"""
from __future__ import annotations

import os
from typing import List

import pyarrow as pa
import pyarrow.parquet as pq

from planner.errors import ConnectorError


class ParquetSink:
    def __init__(self, directory: str):
        self.directory = os.path.abspath(directory)
        try:
            os.makedirs(self.directory, exist_ok=True)
        except OSError as e:
            raise ConnectorError(f"parquet sink: cannot create {self.directory}: {e}") from e

    def path(self, step: int) -> str:
        return os.path.join(self.directory, f"step-{step:010d}.parquet")

    def files(self) -> List[str]:
        return sorted(os.path.join(self.directory, n) for n in os.listdir(self.directory)
                      if n.startswith("step-") and n.endswith(".parquet"))

    def recover(self, committed_step: int) -> None:
        """Drop files of steps that never committed (and leftovers of interrupted writes)."""
        for n in os.listdir(self.directory):
            full = os.path.join(self.directory, n)
            if n.endswith(".tmp"):
                os.remove(full)
            elif n.startswith("step-") and n.endswith(".parquet") and int(n[5:15]) > committed_step:
                os.remove(full)

    def write(self, step: int, chunk: pa.Table) -> None:
        path = self.path(step)
        tmp = path + ".tmp"
        try:
            pq.write_table(chunk, tmp)
            with open(tmp, "rb") as f:
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except OSError as e:
            raise ConnectorError(f"parquet sink: cannot write {path}: {e}") from e
