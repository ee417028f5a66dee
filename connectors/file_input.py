"""``file_input``: a table's input from the files of a directory (CSV, JSON lines or Parquet).

    CREATE TABLE t (...) WITH ('connectors' = '[{"transport": {"name": "file_input",
        "config": {"path": "/data/in", "pattern": "*.csv", "follow": true}},
        "format": {"name": "csv", "config": {"weight_column": "w"}}}]')

The files are read in the order of their names, each in batches of its own (the engine converts and
logs a batch in chunks, so a big file does not have to fit in memory).  The position maps each file read
to ``[bytes read, size, modification time in ns]`` as last taken into account (older versions stored the
list of the names read; such a position still opens, its files counting as read), so after a restart no
file (or appended line) is read twice and none is missed, also when a file whose name sorts earlier
arrives late.  With ``follow`` false the connector reads the files present when it starts, then
finishes; with ``follow`` true it keeps looking for new files every ``poll_interval_ms``.

**Settling.**  A file is read once its size and modification time have not changed for ``settle_ms``
(its modification time is that old, or two listings that far apart saw the same size and time), so a
file written in place (``cp``, a slow writer) is not read half-written; files already old when listed
are read at once, so reading a static directory is not slowed down.  After the read the file's size and
modification time are checked again.

**Tailing.**  With ``follow``, local CSV and JSON-lines files (reader arrow) are tailed, as Feldera's
``follow`` does: bytes appended after a read are read from the offset reached.  Only complete lines are
consumed: a line ends at a newline, or at the end of a file that has settled.  A new CSV or JSON-lines
file is read from its first complete lines on without waiting for it to settle (a JSON file holding one
array waits, as do Parquet files and every file read without ``follow`` or through Spark, which are read
whole).  For a CSV file with a header, the names of later parts come from its first line.

**A file that changed after it was read** (any change of a file read whole; a followed CSV/JSON file
that shrank or was rewritten with the same size) is not read again: the change is a dead-letter record
naming the file and the connector's ``last_error`` (``SourceBatch.warning``); under ``on_error`` "reject"
the connector stops with it.  The rows read before stay applied.

**Writing files into a followed directory.**  Best: write a file under a hidden temporary name in the
same directory (``.name.csv.tmp``), then rename it to its final name (a rename inside one directory is
atomic on POSIX file systems and on HDFS; ``settle_ms`` 0 then reads it without delay).  Files whose
names start with ``.`` or ``_`` or end with ``.tmp``, ``.crc`` or ``.inprogress`` are never read, so
half-written files (ours, Spark's ``_temporary``/``_SUCCESS``, Flink's ``.inprogress``) are skipped.
Writing in place works too (see settling and tailing), if the writer never pauses longer than
``settle_ms`` (inside a line, for CSV and JSON lines); CSV and JSON-lines files may then only grow by
appending.

**Deletes.**  JSON lines with ``update_format`` ``insert_delete`` (``{"delete": {...}}``) or ``debezium``;
CSV and Parquet with a ``weight_column`` (a nonzero integer: +n inserts n copies, -n deletes n copies)
or an ``op_column`` (``insert``/``delete``) in the file, which is not a table column.

**Bad input.**  A bad record (a malformed CSV line or JSON line, a value of the wrong type, NULL in a
NOT NULL column) goes to the dead letter with the file's name and the good rows are applied.  Fields and
columns that are not table columns are skipped (the format's ``unknown_fields``, default "ignore"; under
"reject" each record holding one is a bad row naming it).  A file that cannot be read at all (missing
NOT NULL columns, a column of an incompatible type, a corrupt Parquet file) becomes one dead-letter record
naming the file and the problem, and the connector goes on with the next file.  With
``"on_error": "reject"`` the connector stops at the first problem.

**Errors.**  A directory that does not exist (yet) or cannot be listed is a transient error: the
connector retries with backoff, so a directory created after the pipeline started is read.  A path that
is a file, not a directory, is permanent (``PermanentConnectorError``, state ``failed``).

**Readers.**  ``reader`` "arrow" reads local files with pyarrow on the driver (fast); "spark" lists the
directory with the Hadoop file system and reads the new files with Spark batch reads (any URI Spark
can read: ``hdfs://``, ``s3a://``, ``file://``), then converts them on the driver like local files:
Parquet as ``spark.read.parquet(file).toArrow()``, CSV and JSON as the file's bytes
(``spark.read.format("binaryFile")``), so both readers give the same rows and the same dead letters.
"auto" (the default) is "arrow" for local paths and ``file://`` URIs, else "spark".
"""
from __future__ import annotations

import fnmatch
import os
import time
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple
from urllib.parse import urlparse

from planner.errors import InputError, PermanentConnectorError

from .base import Source, SourceBatch, opt, register_source
from .formats import _UNIT_SPAN, unit_chunks

SKIP_PREFIXES = (".", "_")
SKIP_SUFFIXES = (".tmp", ".crc", ".inprogress")


def readable_name(name: str, pattern: str = "*") -> bool:
    """Whether a file name is one the connector reads (not hidden/temporary, matching ``pattern``)."""
    return (not name.startswith(SKIP_PREFIXES) and not name.endswith(SKIP_SUFFIXES)
            and fnmatch.fnmatchcase(name, pattern))


def _local_path(path: str) -> Optional[str]:
    """The local directory a path or ``file://`` URI names, or None for another URI scheme."""
    u = urlparse(path)
    if u.scheme == "file":
        return u.path or "/"
    if u.scheme and len(u.scheme) > 1:   # (a one-letter scheme is a Windows drive)
        return None
    return path


@dataclass
class _Item:
    """One thing to hand the engine: bytes ``[start, end)`` of a file to read, or (``problem``) a change to
    report.  ``size``/``mtime``: the file as listed."""
    name: str
    size: int
    mtime: int
    start: int = 0
    end: int = 0
    whole: bool = True
    problem: Optional[str] = None


_MISSING = object()
LINE_FORMATS = ("csv", "json")


def _when(mtime_ns: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(mtime_ns / 1e9)) + f".{mtime_ns // 1_000_000 % 1000:03d}Z"


@register_source
class FileInput(Source):
    transport = "file_input"
    OPTIONS = {
        "path": opt(str, required=True, doc="the directory: a local path or a URI Spark reads (hdfs://, s3a://, "
                                            "file://)"),
        "pattern": opt(str, default="*", doc="glob the file names must match, e.g. \"*.csv\""),
        "follow": opt(bool, default=False, doc="keep reading new files, and the lines appended to CSV and JSON "
                                               "files read before (else read the files present, then finish)"),
        "poll_interval_ms": opt(int, default=1000, doc="with follow: how often to look for new files"),
        "settle_ms": opt(int, default=500, doc="a file (or what was appended to it) is read once its size and "
                                               "modification time have not changed for this long (0: at once)"),
        "reader": opt(str, default="auto", choices=("auto", "arrow", "spark"),
                      doc="arrow: pyarrow on the driver (local files); spark: Spark batch reads (any URI); "
                          "auto: arrow for local paths"),
    }
    FORMATS = ("csv", "json", "parquet")

    def validate(self) -> None:
        c, where = self.config, self.ctx.where
        if not c["path"]:
            raise where.error("transport file_input: \"path\" must not be empty", "path")
        if c["poll_interval_ms"] <= 0:
            raise where.error("transport file_input: \"poll_interval_ms\" must be positive", "poll_interval_ms")
        if c["settle_ms"] < 0:
            raise where.error("transport file_input: \"settle_ms\" must not be negative", "settle_ms")
        if c["reader"] == "arrow" and _local_path(c["path"]) is None:
            raise where.error(f"transport file_input: reader \"arrow\" reads local paths only, not {c['path']!r}; "
                              f"use \"spark\" (or \"auto\")", "reader")
        fc = self.format.config
        weight, op = fc.get("weight_column"), fc.get("op_column")
        if weight and op:
            raise where.error(f"format {self.format.name}: give \"weight_column\" or \"op_column\", not both",
                              "op_column")
        special = weight or op
        if special and special.lower() in {n.lower() for n, _ in self.ctx.columns}:
            raise where.error(f"format {self.format.name}: {special!r} is a column of table {self.ctx.relation}; "
                              f"the {'weight' if weight else 'op'} column must be another column of the files",
                              "weight_column" if weight else "op_column")

    # ------------------------------------------------------------ reading
    def __init__(self, config, fmt, ctx):
        super().__init__(config, fmt, ctx)
        local = _local_path(config["path"])
        self.reader = config["reader"] if config["reader"] != "auto" else ("arrow" if local is not None else "spark")
        if local is None:
            self.directory = config["path"]   # (with reader "arrow": rejected by validate)
        elif self.reader == "arrow":
            self.directory = os.path.abspath(local)
        else:
            self.directory = "file://" + os.path.abspath(local)
        # appended lines are read (tail) when following a local directory of CSV or JSON lines files
        self.tail = bool(config["follow"]) and self.reader == "arrow" and fmt.name in LINE_FORMATS
        self.settle = config["settle_ms"] / 1000
        # name -> [bytes consumed, size, mtime ns] as last taken into account (None: read by an older version)
        self.files: Dict[str, Optional[List[int]]] = {}
        self.queue: List[_Item] = []
        self.waiting: set = set()          # files (or appended bytes) waiting to settle
        self.seen: Dict[str, Tuple[int, int, float]] = {}   # name -> (size, mtime, since when so, monotonic)
        self.reported: Dict[str, Tuple[int, int]] = {}       # name -> (size, mtime) already reported changed
        self.initial: Optional[set] = None  # without follow: the files present at the first listing
        self.listed_at: Optional[float] = None
        self._spark = None

    def open(self, position: Any) -> None:
        if isinstance(position, dict):
            self.files = {n: (list(v) if v is not None else None) for n, v in position.items()}
        else:   # the list of the names of the files read, of older versions
            self.files = {n: None for n in (position or [])}
        self.queue = []
        self.waiting = set()
        self.initial = None
        self.listed_at = None

    def position(self) -> Dict[str, Optional[List[int]]]:
        return {n: (list(v) if v is not None else None) for n, v in sorted(self.files.items())}

    def _list(self) -> List[Tuple[str, int, int]]:
        """(name, size, mtime in ns) of the readable files of the directory."""
        pattern = self.config["pattern"]
        if self.reader == "arrow":
            out = []
            if os.path.isfile(self.directory):   # (a missing directory stays transient: it may be created later)
                raise PermanentConnectorError(f"file_input: {self.directory} is a file, not a directory")
            with os.scandir(self.directory) as it:
                for e in it:
                    if readable_name(e.name, pattern) and e.is_file():
                        st = e.stat()
                        out.append((e.name, st.st_size, st.st_mtime_ns))
            return out
        fs, path = self._fs()
        try:
            statuses = fs.listStatus(path)
        except Exception as e:   # noqa: BLE001 - py4j wraps FileNotFoundException
            raise OSError(f"cannot list {self.directory}: {str(e).splitlines()[0]}") from None
        return [(s.getPath().getName(), int(s.getLen()), int(s.getModificationTime()) * 1_000_000)
                for s in statuses if s.isFile() and readable_name(s.getPath().getName(), pattern)]

    def _stat(self, name: str) -> Optional[Tuple[int, int]]:
        """(size, mtime in ns) of one file now, or None if it is gone."""
        if self.reader == "arrow":
            try:
                st = os.stat(os.path.join(self.directory, name))
            except FileNotFoundError:
                return None
            return st.st_size, st.st_mtime_ns
        fs, path = self._fs()
        jvm = self._session().sparkContext._jvm
        try:
            s = fs.getFileStatus(jvm.org.apache.hadoop.fs.Path(path, name))
        except Exception:   # noqa: BLE001 - FileNotFoundException
            return None
        return int(s.getLen()), int(s.getModificationTime()) * 1_000_000

    def _fs(self):
        spark = self._session()
        jvm = spark.sparkContext._jvm
        path = jvm.org.apache.hadoop.fs.Path(self.directory)
        return path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()), path

    def _session(self):
        if self._spark is None:
            from sqlengine.executor.session import get_spark   # SparkSession.builder.getOrCreate(), process-wide
            self._spark = get_spark()
        return self._spark

    def _settled(self, name: str, size: int, mtime: int) -> bool:
        """Whether a file's size and modification time have not changed for ``settle_ms``: its modification
        time is that old, or two listings that far apart saw the same size and time."""
        now = time.monotonic()
        prev = self.seen.get(name)
        if prev is None or prev[:2] != (size, mtime):
            prev = self.seen[name] = (size, mtime, now)
        return (self.settle <= 0 or time.time() - mtime / 1e9 >= self.settle
                or now - prev[2] >= self.settle)

    def _last_line_end(self, name: str, start: int, end: int) -> int:
        """The end of the last complete line in bytes ``[start, end)`` of a local file (``start`` if none)."""
        block = 1 << 16
        with open(os.path.join(self.directory, name), "rb") as f:
            pos = end
            while pos > start:
                lo = max(start, pos - block)
                f.seek(lo)
                data = f.read(pos - lo)
                i = data.rfind(b"\n")
                if i >= 0:
                    return lo + i + 1
                pos = lo
        return start

    def _lines(self, name: str) -> bool:
        """Whether a new file is tailed from its first complete lines on, before it settled: with ``tail``, a
        CSV file, or a file of JSON lines (one JSON array is read once it settled)."""
        if not self.tail:
            return False
        if self.format.name == "csv":
            return True
        with open(os.path.join(self.directory, name), "rb") as f:
            head = f.read(256).lstrip()
        return bool(head) and not head.startswith(b"[")

    def _scan(self) -> None:
        """List the directory and queue what there is to read or report, in name order."""
        self.waiting = set()
        listing = sorted(self._list())
        if not self.config["follow"]:
            if self.initial is None:
                self.initial = {n for n, _, _ in listing}
            listing = [x for x in listing if x[0] in self.initial]
        names = {n for n, _, _ in listing}
        self.seen = {n: v for n, v in self.seen.items() if n in names}
        for name, size, mtime in listing:
            entry = self.files.get(name, _MISSING)
            if entry is None:
                continue
            settled = self._settled(name, size, mtime)
            if entry is _MISSING:
                end = size if settled else self._last_line_end(name, 0, size) if self._lines(name) else 0
                if end > 0 or settled:
                    self.queue.append(_Item(name, size, mtime, 0, end, whole=not self.tail))
                else:
                    self.waiting.add(name)
                continue
            done, size0, mtime0 = entry
            if (size, mtime) == (size0, mtime0) and not (self.tail and done < size):
                continue
            problem = None
            if self.tail and size > done:
                end = size if settled else self._last_line_end(name, done, size)
                if end > done:
                    self.queue.append(_Item(name, size, mtime, done, end, whole=False))
                else:
                    self.waiting.add(name)
                continue
            if self.tail and size < done:
                problem = (f"was truncated or rewritten after it was read: it has {size} bytes, {done} were read "
                           f"(files in a followed directory may only grow by appending lines)")
            elif self.tail:
                problem = (f"was rewritten after it was read (same size, modified at {_when(mtime)}): "
                           f"files in a followed directory may only grow by appending lines")
            else:
                problem = (f"changed after it was read: {size0} bytes modified at {_when(mtime0)} when read, now "
                           f"{size} bytes modified at {_when(mtime)}; the change is not read (write a file under "
                           f"a temporary name and rename it when complete)")
            if self.reported.get(name) == (size, mtime):   # found when it was read: only take it into account
                self.files[name] = [done, size, mtime]
                continue
            self.queue.append(_Item(name, size, mtime, done, done, whole=False, problem=problem))

    def poll(self, max_rows: int) -> Optional[SourceBatch]:
        if not self.queue:
            interval = self.config["poll_interval_ms"] / 1000
            if self.waiting:   # look again soon for the files that settle
                interval = min(interval, max(self.settle / 4, 0.05))
            if self.listed_at is not None:
                if not self.config["follow"] and not self.waiting:
                    return None
                wait = self.listed_at + interval - time.monotonic()
                if wait > 0:
                    time.sleep(min(wait, 0.2))
                    return None
            self.listed_at = time.monotonic()
            self._scan()
            if not self.queue:
                return None
        item = self.queue.pop(0)
        if item.problem is not None:
            self.files[item.name] = [item.start, item.size, item.mtime]
            self.reported[item.name] = (item.size, item.mtime)
            batch = SourceBatch(lambda errs, n: iter(()), self.position(), warning=f"{item.name} {item.problem}")
            batch.chunks = self._report(item.name, item.problem, batch, lambda errs, n: iter(()))
            return batch
        self.files[item.name] = [item.end, item.size, item.mtime]
        if item.whole:
            reader = self._chunks(item.name)
        else:
            reader = self.format.read_range(os.path.join(self.directory, item.name), item.start, item.end)
        batch = SourceBatch(unit_chunks([(item.name, reader)]), self.position(), bytes=item.end - item.start)
        batch.chunks = self._checked(item, batch.chunks, batch)
        return batch

    def _report(self, name: str, problem: str, batch: SourceBatch, chunks):
        """``chunks``, then ``problem`` with file ``name``: a dead-letter record (under ``on_error`` "reject"
        the error that stops the connector), and the batch's warning (the connector's ``last_error``)."""
        def out(errs, chunk_rows):
            yield from chunks(errs, chunk_rows)
            text = f"table {errs.table}: {name} {problem}"
            batch.warning = f"{name} {problem}"
            if errs.reject:
                raise InputError(text)
            errs.bad[_UNIT_SPAN - 2] = {"table": errs.table, "row": None, "column": None, "file": name,
                                        "raw": None, "error": text}
        return out

    def _checked(self, item: _Item, chunks, batch: SourceBatch):
        """``chunks`` of a file, then its size and modification time checked again: a file that changed while
        it was read is reported (see ``_report``), not silently half read."""
        def out(errs, chunk_rows):
            problem = None
            yield from chunks(errs, chunk_rows)
            now = self._stat(item.name)
            if now is None:
                problem = "was deleted while it was read"
            elif item.whole and now != (item.size, item.mtime):
                problem = (f"changed while it was read: {item.size} bytes modified at {_when(item.mtime)} when "
                           f"listed, {now[0]} bytes modified at {_when(now[1])} after the read; write a file under "
                           f"a temporary name and rename it when complete")
            elif not item.whole and now[0] < item.end:
                problem = (f"was truncated while it was read: {now[0]} bytes, {item.end} were read "
                           f"(files in a followed directory may only grow by appending lines)")
            if problem is None:
                return
            self.reported[item.name] = now or (item.size, item.mtime)
            yield from self._report(item.name, problem, batch, lambda e, n: iter(()))(errs, chunk_rows)
        return out

    def _chunks(self, name: str):
        if self.reader == "arrow":
            return self.format.read_file(os.path.join(self.directory, name))
        uri = self.directory.rstrip("/") + "/" + name
        spark = self._session()
        def read(what):
            from py4j.protocol import Py4JJavaError
            from pyspark.errors import PySparkException
            try:
                return what()
            except (PySparkException, Py4JJavaError) as e:   # the file is there (just listed): it is bad
                text = str(e).strip()
                if isinstance(e, Py4JJavaError):
                    text = str(e.java_exception)
                raise InputError(f"Spark cannot read it: {text.splitlines()[0][:500]}") from None
        if self.format.name == "parquet":
            return self.format.read_arrow(lambda: read(lambda: spark.read.parquet(uri).toArrow()))

        def chunks(errs, chunk_rows):
            content = read(lambda: spark.read.format("binaryFile").load(uri).select("content").toArrow())
            data = content.column(0)[0].as_py() if content.num_rows else b""
            yield from self.format.decode(data)(errs, chunk_rows)
        return chunks

    def finished(self) -> bool:
        return not self.config["follow"] and self.listed_at is not None and not self.queue and not self.waiting

    def lag(self) -> Optional[int]:
        return len(self.queue) + len(self.waiting)   # files (or appended parts) listed and not read yet
