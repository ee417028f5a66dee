"""Merging state runs in the background, off the steps' path.

Every step adds a run per changed operator.  When an operator has more than ``StateStore.MAX_RUNS`` runs, its
newest runs are merged into one (size-tiered, so a row is rewritten a logarithmic number of times).  A merge of
big runs takes seconds (it rewrites every row of the runs it merges).  It used to run right after the step's
commit, so the next step waited for it.  Here it runs on a thread of its own while steps go on:

- After a step commits, the step thread plans the merges (``Merger.merge_plan`` over the committed manifest)
  and starts them, unless a merge is still running.  The runs they read and the runs they will write go into
  ``StateStore.keep``, which garbage collection spares.
- The merge thread reads only committed runs, which never change, and writes new run files that no manifest
  lists yet.  A crash leaves files that the next commit's garbage collection removes.
- When it is done, the step thread (between steps, or while idle) puts each merged run in the place of the runs
  it merges, in the manifest committed by then (``Merger.apply_merges``), and commits that manifest.  Steps
  commit on the same thread, so neither commit can lose the other's runs.  A step that ran meanwhile read the
  runs before the merge, which hold the same Z-set.

When steps add runs faster than merges remove them, a step that leaves an operator with more than
``STALL_FACTOR`` × ``MAX_RUNS`` runs waits for the running merge (a write stall, as in an LSM tree), so the
number of runs a read opens stays bounded.

A merge whose runs were rewritten meanwhile (closed rows dropped, see ``watermarks``) is dropped; the next
step plans again.
"""
from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, List, Optional

from sqlengine.executor.backends.duckdb import DuckDBBackend
from sqlengine.executor.merges import merge_tag
from sqlengine.state.store import Manifest


STALL_FACTOR = 3


class Compactor:
    """One background merge at a time for an ``Engine``; driven from the pipeline's step thread."""

    def __init__(self, engine, wake: Callable[[], None]):
        self.engine = engine
        self._wake = wake                 # called on the merge thread when a merge ends
        self._future: Optional[Future] = None
        self._pool: Optional[ThreadPoolExecutor] = None
        self._lowerer: Optional[DuckDBBackend] = None   # DuckDB of its own: a merge never waits for a step's
        self.installed = 0   # merges put in place
        self.stalls = 0      # steps that waited for a merge (``behind``)

    @property
    def running(self) -> bool:
        return self._future is not None

    def done(self) -> bool:
        """Has a merge ended that ``take`` has not taken yet?"""
        f = self._future
        return f is not None and f.done()

    def stall_runs(self) -> int:
        """The most runs an operator may have before a step waits for the running merge."""
        return STALL_FACTOR * self.engine.store.MAX_RUNS

    def behind(self) -> bool:
        """Is a merge running while some operator has more than ``stall_runs`` runs (counted as a stall)?"""
        limit = self.stall_runs()
        if self._future is None or not any(len(rs) > limit for rs in self.engine.store.current.runs.values()):
            return False
        self.stalls += 1
        return True

    def start(self, step: int) -> bool:
        """Start merging the runs that need it as of the committed manifest (after step ``step``); False if a
        merge is still running or none is needed."""
        if self._future is not None:
            return False
        store = self.engine.store
        plan = self.engine.merges.merge_plan(store.current)
        if not plan:
            return False
        for key, part in plan:
            store.keep.update(r.path for r in part)
            store.keep.add(store.run_path(key, step, merge_tag(part)))
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sqlengine-merge")
            self._lowerer = DuckDBBackend(threads=None)   # a bulk job: DuckDB's default parallelism
        self._future = self._pool.submit(self._merge, plan, step)
        self._future.add_done_callback(lambda _: self._wake())
        return True

    def _merge(self, plan, step: int) -> list:
        return [self.engine.merges.merge_runs(key, part, step, self._lowerer) for key, part in plan]

    def take(self, wait: bool = False) -> Optional[Manifest]:
        """When the running merge has ended (or, with ``wait``, once it ends): the committed manifest with its
        runs in place, for the caller to commit (None if nothing applies or no merge ran).  Raises what the
        merge raised."""
        f = self._future
        if f is None or not (wait or f.done()):
            return None
        self._future = None
        try:
            merged: List = f.result()
        finally:
            self.engine.store.keep.clear()
        m = self.engine.merges.apply_merges(self.engine.store.current, merged)
        self.installed += m is not None
        return m

    def status(self) -> dict:
        return {"running": self.running, "installed": self.installed, "stalls": self.stalls}

    def close(self, wait: bool = True) -> None:
        """Stop the merge thread (a running merge is finished first with ``wait``, else left to end alone;
        what it wrote is never listed, and is removed as garbage)."""
        if self._pool is not None:
            self._pool.shutdown(wait=wait)   # may be called again with wait, to join a merge left running
            if wait:
                self._pool = None
        if not wait:
            self._future = None
