"""One writer per storage directory: an exclusive lock, and the epoch that fences commits and sinks.

A pipeline locks ``<storage>/lock`` (``flock``, exclusive) when it opens its storage and keeps it until
``stop()``; the operating system releases it when the process exits, however it exits (SIGKILL too).
The holder writes its PID, host and start time into the file, for the error that a second opener gets.

Each acquisition increments the number in ``<storage>/epoch`` (written by atomic rename) and keeps the
new value as its own.  Before a step's manifest is published the store checks that the file still
holds that value (:meth:`StorageLock.check`): a process that lost its lock without noticing (a network
file system that expired it) finds a newer epoch there and stops instead of committing over its
successor.  Sinks get the epoch too, write it with their output, and refuse to write for an epoch older
than one they already hold.
"""
from __future__ import annotations

import datetime as dt
import errno
import fcntl
import json
import os
import socket
import time

from planner.errors import PipelineError

from sqlengine.errors import StorageFencedError, StorageLockedError
from sqlengine.state.store import atomic_write_bytes

LOCK_FILE = "lock"
EPOCH_FILE = "epoch"
RETRY_S = 0.1   # how often a waiting opener tries the lock again


def read_epoch(storage_dir: str) -> int:
    """The storage's current epoch (0 if it was never locked)."""
    path = os.path.join(storage_dir, EPOCH_FILE)
    try:
        with open(path) as f:
            text = f.read().strip()
    except FileNotFoundError:
        return 0
    try:
        return int(text)
    except ValueError:
        raise PipelineError(f"{path} does not hold an epoch number ({text[:40]!r}); it is written only by "
                            "sqlengine: restore it, or remove it if no other process uses this storage") from None


def read_holder(storage_dir: str) -> dict:
    """What the lock's holder wrote into the lock file ({} if nothing readable yet)."""
    try:
        with open(os.path.join(storage_dir, LOCK_FILE)) as f:
            return json.loads(f.read() or "{}")
    except (OSError, ValueError):
        return {}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def locked_message(storage_dir: str, holder: dict, waited: float) -> str:
    """The error a second opener gets: who holds the storage, and how to wait for it or take over."""
    path = os.path.join(storage_dir, LOCK_FILE)
    pid, host = holder.get("pid"), holder.get("host")
    since = holder.get("started_at")
    who = (f"PID {pid} on host {host}" + (f", open since {since}" if since else "") +
           (f", epoch {holder['epoch']}" if "epoch" in holder else "")) if pid else "a process that has not " \
        "written its PID yet"
    waited_text = f" after waiting {waited:g} s" if waited else ""
    msg = (f"storage {storage_dir} is in use by another pipeline ({who}){waited_text}: one process at a time "
           f"may write a storage directory. To wait until it stops, run with `sqlengine run --wait-for-lock "
           f"SECONDS` or RuntimeConfig(wait_for_lock_secs=SECONDS). There is no option to force it: the "
           f"operating system releases the lock the moment its holder exits (even when killed with SIGKILL), so "
           f"a live holder cannot be forced out on a local file system; stop it")
    if pid and host == socket.gethostname():
        if _alive(int(pid)):
            msg += f" (kill {pid}) or use another storage directory."
        else:
            msg += (f". PID {pid} is not running any more, so a process it started holds the lock file open: "
                    f"find it with `fuser -v {path}`.")
    else:
        msg += (f"{' on ' + host if host else ''}, or use another storage directory. On a network file system "
                "the lock of a host that crashed is released when the file server's lease expires (usually within "
                "a minute or two): wait for it.")
    return msg


class StorageLock:
    """The exclusive lock of one storage directory and the epoch it was acquired with."""

    def __init__(self, storage_dir: str, fd: int, epoch: int):
        self.storage_dir, self._fd, self.epoch = storage_dir, fd, epoch

    @classmethod
    def acquire(cls, storage_dir: str, wait_secs: float = 0.0) -> "StorageLock":
        """Lock ``storage_dir`` (waiting up to ``wait_secs`` for its holder to stop) and start a new epoch;
        ``StorageLockedError`` if another process still holds it."""
        path = os.path.join(storage_dir, LOCK_FILE)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as e:
            raise PipelineError(f"cannot open the lock file {path}: {e.strerror}") from e
        start = time.monotonic()
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except OSError as e:
                    if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                        raise PipelineError(f"cannot lock {path}: {e.strerror} (the file system must support "
                                            "flock)") from e
                    waited = time.monotonic() - start
                    if waited >= wait_secs:
                        raise StorageLockedError(locked_message(storage_dir, read_holder(storage_dir),
                                                                round(wait_secs, 1)))
                    time.sleep(min(RETRY_S, wait_secs - waited))
            epoch = read_epoch(storage_dir) + 1
            atomic_write_bytes(os.path.join(storage_dir, EPOCH_FILE), f"{epoch}\n".encode())
            holder = {"pid": os.getpid(), "host": socket.gethostname(), "epoch": epoch,
                      "started_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(holder).encode(), 0)
        except BaseException as e:
            os.close(fd)
            if isinstance(e, OSError):
                raise PipelineError(f"cannot start a new epoch in {storage_dir}: {e}") from e
            raise
        return cls(storage_dir, fd, epoch)

    @property
    def held(self) -> bool:
        return self._fd is not None

    def check(self) -> None:
        """Raise ``StorageFencedError`` unless the storage's epoch is still this lock's (called before every
        commit and every sink write)."""
        current = read_epoch(self.storage_dir)
        if current != self.epoch or self._fd is None:
            raise StorageFencedError(
                f"storage {self.storage_dir} was opened by another process since this pipeline opened it (the "
                f"storage's epoch is {current}, this pipeline's {self.epoch}): this pipeline no longer owns it and "
                "stops without committing or writing to sinks")

    def release(self) -> None:
        """Unlock (idempotent); the epoch file keeps the number, so that this lock's holder is fenced off."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            os.ftruncate(fd, 0)
        except OSError:
            pass
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def __del__(self):
        fd = getattr(self, "_fd", None)
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass
