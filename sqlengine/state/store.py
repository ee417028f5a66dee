"""State on disk: per-operator LSM runs of parquet plus one manifest per committed step.

Layout under ``<storage>/state``::

    <op key>/run-<step>-<n>.parquet   a consolidated run written by one step (or a merge)
    manifest-<step>.json              the commit record of a step

A step writes new run files first, then the manifest; the manifest's atomic
rename is the commit point.  Readers of step *n* see exactly the runs listed in
``manifest-<n>.json``.  Runs never change after they are written: a step adds a
small run per operator it touched, and a merge (``compact``) folds small runs
together when they outnumber a bound, so no step rewrites an operator's whole
state except a merge, whose cost is amortized over the steps that filled it.
"""
from __future__ import annotations

import glob
import json
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Set

import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from planner.errors import InternalError, PipelineError

from sqlengine.state.cache import sidecar_of
from sqlengine.state.faults import describe, io_point

# rows per parquet row group of a run read by key on Spark: small groups let keyed reads skip most (see
# executor.keyed_reads); other runs keep parquet's default groups, which write and load faster
ROW_GROUP_ROWS = 1 << 14
# ... with a page index over pages of this many bytes, so that the reader also skips the pages of a row group
# that cannot hold a key
PAGE_BYTES = 8192


class StorageError(PipelineError):
    """Writing state failed (disk full, read-only, I/O error): the step did not commit and is retried."""


@dataclass
class Run:
    path: str   # relative to the state dir
    rows: int
    bytes: int

    def to_json(self):
        return {"path": self.path, "rows": self.rows, "bytes": self.bytes}


@dataclass
class Manifest:
    step: int = 0
    log_position: List[int] = field(default_factory=lambda: [0, 0])   # [next entry seq, row offset in it]
    runs: Dict[str, List[Run]] = field(default_factory=dict)
    meta: Dict[str, object] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps({"step": self.step, "log_position": self.log_position,
                           "runs": {k: [r.to_json() for r in v] for k, v in self.runs.items()},
                           "meta": self.meta}, indent=1)

    @staticmethod
    def from_json(text: str) -> "Manifest":
        d = json.loads(text)
        return Manifest(d["step"], d["log_position"],
                        {k: [Run(**r) for r in v] for k, v in d["runs"].items()}, d.get("meta", {}))


_SYNC_POOL: List[ThreadPoolExecutor] = []
_SYNC_POOL_LOCK = threading.Lock()


def _sync_pool() -> ThreadPoolExecutor:
    """The threads that fsync a commit's files in parallel, one pool per process (starting threads at each
    commit cost a step milliseconds)."""
    with _SYNC_POOL_LOCK:
        if not _SYNC_POOL:
            _SYNC_POOL.append(ThreadPoolExecutor(max_workers=8, thread_name_prefix="sqlengine-fsync"))
        return _SYNC_POOL[0]


def fsync_dir(path: str) -> None:
    """fsync a directory (or a file) by path."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_bytes(path: str, data: bytes, fault: Optional[str] = None) -> None:
    """Write ``path`` atomically and durably; on error nothing but the old file remains."""
    atomic_write(path, lambda f: f.write(data), fault)


def _ipc(table: pa.Table):
    """A ``write(file)`` of ``table`` as an Arrow IPC file (its schema's metadata kept)."""
    def write(f) -> None:
        with ipc.new_file(f, table.schema) as w:
            w.write_table(table, max_chunksize=1 << 20)
    return write


def atomic_write_arrow(path: str, table: pa.Table, fault: Optional[str] = None) -> None:
    """``table`` as an Arrow IPC file at ``path``, atomically and durably."""
    atomic_write(path, _ipc(table), fault)


def synced_write_arrow(path: str, table: pa.Table, fault: Optional[str] = None) -> None:
    """``table`` as an Arrow IPC file at ``path``, its data fsynced, neither renamed into place nor its
    directory fsynced: for a file that something written after it makes visible (an input batch's chunk, made
    visible by its commit record, whose directory fsync makes the chunk's name durable too); on error the file
    is removed and the error raised."""
    synced_write(path, _ipc(table), fault)


def synced_write(path: str, write, fault: Optional[str] = None) -> None:
    """``write(file)`` into ``path``, fsynced; on error the file is removed and the error raised (``fault``: a
    ``faults.io_point`` name, for the tests)."""
    try:
        with open(path, "wb") as f:
            write(f)
            f.flush()
            if fault:
                io_point(fault, path)
            os.fsync(f.fileno())
    except OSError:
        try:
            os.remove(path)
        except OSError:
            pass
        raise


def atomic_write(path: str, write, fault: Optional[str] = None) -> None:
    """``write(file)`` into a temporary file, fsync, rename to ``path``, fsync the directory; on error the
    temporary file is removed and the error raised (``fault``: a ``faults.io_point`` name, for the tests)."""
    tmp = path + ".tmp"
    try:
        synced_write(tmp, write, fault)
        os.replace(tmp, path)
        fsync_dir(os.path.dirname(path))
    except OSError:
        try:
            os.remove(tmp)
        except OSError:
            pass
        raise


class StateStore:
    """Runs and manifests of one pipeline."""

    MAX_RUNS = 8

    def __init__(self, root: str, fence: Optional[Callable[[], None]] = None):
        self.root = root
        self.fence = fence   # raises if this process no longer owns the storage (see sqlengine.state.lock)
        self._unsynced = set()   # directories holding runs renamed since the last commit (fsynced at the next)
        self._live: Dict[int, Set[str]] = {}   # the runs of the manifests this process committed, by step
        self._unsynced_lock = threading.Lock()   # a background merge writes runs while a step commits
        self.keep: Set[str] = set()   # runs a background merge reads or writes: garbage collection spares them
        self.bytes_written = 0   # of the runs this process wrote (what a driver writes: issue 34)
        os.makedirs(root, exist_ok=True)
        self.current = self._load_latest()

    # ------------------------------------------------------------ manifests
    def _manifest_steps(self) -> List[int]:
        out = []
        for n in os.listdir(self.root):
            if n.startswith("manifest-") and n.endswith(".json"):
                out.append(int(n[len("manifest-"):-len(".json")]))
        return sorted(out)

    def _load_latest(self) -> Manifest:
        for step in reversed(self._manifest_steps()):
            try:
                with open(os.path.join(self.root, f"manifest-{step}.json")) as f:
                    return Manifest.from_json(f.read())
            except (ValueError, KeyError, OSError):
                continue  # a torn manifest cannot exist (atomic rename), but be defensive
        return Manifest()

    def _sync_runs(self) -> None:
        """fsync the directories of the runs written since the last commit, in parallel (fsync releases the
        GIL; one after another would add a disk round trip per operator to every step).  The run files
        themselves were fsynced as they were written (:meth:`write_run`, on the thread that writes them while
        the step goes on)."""
        with self._unsynced_lock:
            dirs = sorted(self._unsynced)
        if not dirs:
            return
        list(_sync_pool().map(fsync_dir, dirs))
        with self._unsynced_lock:
            self._unsynced.difference_update(dirs)

    def commit(self, m: Manifest) -> None:
        """Make ``m`` the current manifest (the step's commit point), then drop garbage."""
        if m.step < self.current.step:
            raise InternalError(f"commit of step {m.step} after step {self.current.step}")
        path = os.path.join(self.root, f"manifest-{m.step}.json")
        try:
            self._sync_runs()
            if self.fence is not None:   # the last check before the commit point: a fenced-off process stops here
                self.fence()
            atomic_write_bytes(path, m.to_json().encode(), fault="state_commit")
        except OSError as e:
            raise StorageError(f"step {m.step} did not commit: cannot write {e.filename or path}: {describe(e)}") from e
        self.current = m
        self._live[m.step] = {r.path for runs in m.runs.values() for r in runs}
        for s in sorted(self._live)[:-3]:
            del self._live[s]
        try:
            self.collect_garbage()
        except OSError:
            pass   # garbage is collected again after the next commit

    def collect_garbage(self) -> None:
        """Remove manifests older than the last two and run files no kept manifest lists (nor ``keep``)."""
        steps = self._manifest_steps()
        keep = set(steps[-2:])
        live = set(self.keep)
        for s in keep:
            if s in self._live:   # (a manifest this process committed: its runs, without reading it back)
                live |= self._live[s]
                continue
            try:
                with open(os.path.join(self.root, f"manifest-{s}.json")) as f:
                    live |= {r.path for runs in Manifest.from_json(f.read()).runs.values() for r in runs}
            except (OSError, ValueError):
                pass
        for s in steps:
            if s not in keep:
                os.remove(os.path.join(self.root, f"manifest-{s}.json"))
        for d in os.listdir(self.root):
            full = os.path.join(self.root, d)
            if os.path.isdir(full):
                for n in os.listdir(full):
                    rel = f"{d}/{n}"
                    base = sidecar_of(n)   # a state cache's sidecar lives as long as its run
                    if base is not None and f"{d}/{base}" in live:
                        continue
                    if n.endswith(".tmp"):   # unless a background merge is writing it (a run or its sidecar)
                        if f"{d}/{n.split('.parquet', 1)[0]}.parquet" not in self.keep:
                            os.remove(os.path.join(full, n))
                    elif rel not in live:
                        os.remove(os.path.join(full, n))
                if not os.listdir(full):
                    os.rmdir(full)    # an operator the program no longer has

    # ------------------------------------------------------------ runs
    def runs(self, key: str, m: Optional[Manifest] = None) -> List[Run]:
        return list((m or self.current).runs.get(key, []))

    def paths(self, key: str, m: Optional[Manifest] = None) -> List[str]:
        return [os.path.join(self.root, r.path) for r in self.runs(key, m)]

    @staticmethod
    def run_path(key: str, step: int, tag: str) -> str:
        """The path (relative to the store) of the run of state ``key`` that step ``step`` writes as ``tag``."""
        return f"{key}/run-{step:010d}-{tag}.parquet"

    def write_run(self, key: str, table: pa.Table, step: int, tag: str = "d", small_groups: bool = False) -> Run:
        """Write one immutable run file (not yet visible: the manifest lists it at commit, which first makes
        it durable); ``small_groups``: in row groups of ``ROW_GROUP_ROWS`` rows with a page index (else parquet's default)."""
        d = os.path.join(self.root, key)
        name = os.path.basename(self.run_path(key, step, tag))
        full = os.path.join(d, name)
        tmp = full + ".tmp"
        try:
            created = not os.path.isdir(d)
            os.makedirs(d, exist_ok=True)
            pq.write_table(table, tmp, compression="zstd",
                           **(dict(row_group_size=ROW_GROUP_ROWS, write_page_index=True, data_page_size=PAGE_BYTES)
                              if small_groups else {}))
            io_point("state_write", tmp)
            fsync_dir(tmp)   # (the file's data: its name is made durable with its directory at the commit)
            if os.path.exists(full):   # a failed attempt of this step wrote it: drop that attempt's cache sidecars
                for side in glob.glob(glob.escape(full) + ".*"):
                    if not side.endswith(".tmp"):
                        os.remove(side)
            os.replace(tmp, full)
            with self._unsynced_lock:
                self._unsynced.add(d)
                if created:
                    self._unsynced.add(self.root)
        except OSError as e:
            try:
                os.remove(tmp)
            except OSError:
                pass
            raise StorageError(f"step {step} did not commit: cannot write state {e.filename or tmp}: "
                               f"{describe(e)}") from e
        size = os.path.getsize(full)
        with self._unsynced_lock:
            self.bytes_written += size
        return Run(f"{key}/{name}", table.num_rows, size)

    def needs_merge(self, runs: List[Run]) -> bool:
        return len(runs) > self.MAX_RUNS

    @staticmethod
    def merge_plan(runs: List[Run]) -> int:
        """Index from which to merge: the newest runs, extended while the next older run is at most twice
        their total.

        Merging only small recent runs keeps every row's number of rewrites
        logarithmic in the state size (size-tiered compaction).
        """
        start = len(runs) - 1
        total = runs[start].rows
        while start > 0 and runs[start - 1].rows <= 2 * total:
            start -= 1
            total += runs[start].rows
        return min(start, len(runs) - 2)

    def size(self, key: str) -> Dict[str, int]:
        runs = self.runs(key)
        return {"runs": len(runs), "rows": sum(r.rows for r in runs), "bytes": sum(r.bytes for r in runs)}
