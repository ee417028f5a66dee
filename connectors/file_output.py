"""``file_output``: a view's changes as files, exactly once.

``changelog`` mode writes one file per step that changed the view, ``step-<n>.<ext>``, holding the
changed rows with ``__weight`` (+1 insert, -1 delete) and ``__step``.  Files appear atomically
(written under a hidden temporary name, then renamed); the last step present is where delivery resumes
after a crash, and rewriting a step replaces its file with the same contents.  Concatenating the files
integrates to the view's contents.

``snapshot`` mode keeps one file, ``snapshot.<ext>``, holding the view's current contents (a row that
occurs n times is written n times), replaced atomically after every step that changed the view.  Its
consolidated state, with the step it holds, is kept beside it in ``_sqlengine_snapshot.parquet``
(readers of the directory skip names starting with ``_`` or ``.``).

``_sqlengine_epoch`` holds the newest storage epoch (``sqlengine.state.lock``) that opened the directory: a
process of an older epoch (one that lost its storage to another process) is refused with
``StorageFencedError`` instead of writing.
"""
from __future__ import annotations

import os
from typing import List

import pyarrow as pa
import pyarrow.parquet as pq

from planner.errors import ConnectorError, PermanentConnectorError

from .base import Sink, opt, register_sink

WEIGHT = "__weight"
STEP = "__step"
STATE = "_sqlengine_snapshot.parquet"
OWNER = "_sqlengine_pipeline"   # the id of the pipeline whose output the directory holds
EPOCH = "_sqlengine_epoch"      # the newest storage epoch (sqlengine.state.lock) that wrote here


@register_sink
class FileOutput(Sink):
    transport = "file_output"
    OPTIONS = {"path": opt(str, required=True, doc="the directory the files go to (created if missing)"),
               "mode": opt(str, default="changelog", choices=("changelog", "snapshot"),
                           doc="one file of changes per step, or one file with the current contents")}
    FORMATS = ("parquet", "csv", "json")

    def validate(self) -> None:
        if self.config["mode"] == "snapshot" and not self.ctx.materialized:
            raise self.ctx.where.error(f"file_output: snapshot mode needs a MATERIALIZED VIEW ({self.ctx.relation} "
                                       "is not): its contents are what the snapshot starts from", "mode")

    def __init__(self, config, fmt, ctx):
        super().__init__(config, fmt, ctx)
        self.directory = os.path.abspath(config["path"])
        self.SEEDED = config["mode"] == "snapshot"   # a snapshot starts from the view's contents
        self.state = None   # snapshot mode: the consolidated contents (view columns + __weight)

    def _ext(self) -> str:
        return self.format.extension

    def path(self, step: int) -> str:
        return os.path.join(self.directory, f"step-{step:010d}.{self._ext()}")

    def files(self) -> List[str]:
        """The changelog's files, in step order."""
        suffix = f".{self._ext()}"
        return sorted(os.path.join(self.directory, n) for n in os.listdir(self.directory)
                      if n.startswith("step-") and n.endswith(suffix))

    def open(self) -> int:
        try:
            os.makedirs(self.directory, exist_ok=True)
            for n in os.listdir(self.directory):
                if n.startswith(".") and n.endswith(".tmp"):
                    os.remove(os.path.join(self.directory, n))
            self._claim()
            self._check_epoch(claim=True)
        except OSError as e:
            raise ConnectorError(f"file_output: cannot use {self.directory}: {e}") from e
        if self.config["mode"] == "changelog":
            steps = [int(os.path.basename(f)[5:15]) for f in self.files()]
            return max(steps, default=0)
        state_path = os.path.join(self.directory, STATE)
        if not os.path.exists(state_path):
            self.state = None
            return 0
        t = pq.read_table(state_path)
        self.state = t.replace_schema_metadata(None)
        self._export()   # a crash may have come between the state and the file: write the file again
        return int((t.schema.metadata or {}).get(b"sqlengine.step", b"0"))

    def _claim(self) -> None:
        """The directory holds this pipeline's output (or nothing yet): another pipeline's steps would be taken
        for this one's, so that is an error rather than a silent mix."""
        owner = os.path.join(self.directory, OWNER)
        me = self.ctx.pipeline_id
        if os.path.exists(owner):
            with open(owner) as f:
                other = f.read().strip()
            if other and me and other != me:
                raise PermanentConnectorError(f"file_output: {self.directory} holds the output of another "
                                              f"pipeline ({other}); remove it or use another path")
            return
        if me:
            from sqlengine.state.store import atomic_write_bytes
            atomic_write_bytes(owner, (me + "\n").encode())

    def _check_epoch(self, claim: bool = False) -> None:
        """Refuse to write for an older epoch of the storage than the newest that wrote here (a process that
        lost the storage to another one); ``claim``: record this process's epoch as the newest."""
        mine = self.ctx.epoch
        if not mine:
            return
        path = os.path.join(self.directory, EPOCH)
        try:
            with open(path) as f:
                newest = int(f.read().strip() or 0)
        except FileNotFoundError:
            newest = 0
        except ValueError:
            newest = 0
        if newest > mine:
            from sqlengine.errors import StorageFencedError
            raise StorageFencedError(f"file_output: {self.directory} holds steps written at epoch {newest} of the "
                                     f"pipeline's storage, newer than this process's epoch {mine}: another process "
                                     "opened the storage since, so this one writes nothing more")
        if claim and newest < mine:
            from sqlengine.state.store import atomic_write_bytes
            atomic_write_bytes(path, f"{mine}\n".encode())

    def write(self, step: int, changes: pa.Table) -> None:
        self._check_epoch()
        try:
            if self.config["mode"] == "changelog":
                t = changes.append_column(STEP, pa.array([step] * changes.num_rows, pa.int64()))
                self.format.write_file(t, self.path(step))
            else:
                self._apply(step, changes)
        except OSError as e:
            raise ConnectorError(f"file_output: cannot write to {self.directory}: {e}") from e

    # ------------------------------------------------------------ snapshot mode
    def seed(self, step: int, contents: pa.Table) -> None:
        if self.config["mode"] == "snapshot":
            self.state = None
            self._apply(step, contents)
    def _apply(self, step: int, changes: pa.Table) -> None:
        from sqlengine.zset import W, consolidate_arrow

        from .formats import _write_atomically
        both = changes if self.state is None else pa.concat_tables([self.state, changes.cast(self.state.schema)])
        names = both.column_names
        state = consolidate_arrow(both.rename_columns([W if c == WEIGHT else c for c in names])).rename_columns(names)
        meta = {b"sqlengine.step": str(step).encode()}
        _write_atomically(os.path.join(self.directory, STATE),
                          lambda tmp: pq.write_table(state.replace_schema_metadata(meta), tmp))
        self.state = state
        self._export()

    def _export(self) -> None:
        import numpy as np
        state = self.state
        if state is None:
            return
        w = state.column(WEIGHT).to_numpy()
        rows = state.drop_columns([WEIGHT]).take(pa.array(np.repeat(np.arange(len(w)), np.maximum(w, 0))))
        self.format.write_file(rows, os.path.join(self.directory, f"snapshot.{self._ext()}"))
