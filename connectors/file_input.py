"""``file_input``: a table's input from the files of a directory (CSV, JSON lines or Parquet).

    CREATE TABLE t (...) WITH ('connectors' = '[{"transport": {"name": "file_input",
        "config": {"path": "/data/in", "pattern": "*.csv", "follow": true}},
        "format": {"name": "csv", "config": {"weight_column": "w"}}}]')

The files are read in the order of their names, each one whole, in one batch of its own (the engine
converts and logs a batch in chunks, so a big file does not have to fit in memory).  The position is
the sorted list of the names already read, so after a restart no file is read twice and none is
missed, also when a file whose name sorts earlier arrives late.  With ``follow`` false the connector
reads the files present when it starts, then finishes; with ``follow`` true it keeps looking for new
files every ``poll_interval_ms``.

**Writing files into a followed directory.**  A file must appear whole: write it under a hidden
temporary name in the same directory (``.name.csv.tmp``), then rename it to its final name (a rename
inside one directory is atomic on POSIX file systems and on HDFS).  Files whose names start with ``.``
or ``_`` or end with ``.tmp``, ``.crc`` or ``.inprogress`` are never read, so half-written files (ours,
Spark's ``_temporary``/``_SUCCESS``, Flink's ``.inprogress``) are skipped.  A file must not change
after it has appeared.

**Deletes.**  JSON lines with ``update_format`` ``insert_delete`` (``{"delete": {...}}``) or ``debezium``;
CSV and Parquet with a ``weight_column`` (a nonzero integer: +n inserts n copies, -n deletes n copies)
or an ``op_column`` (``insert``/``delete``) in the file, which is not a table column.

**Bad input.**  A bad record (a malformed CSV line or JSON line, a value of the wrong type, NULL in a
NOT NULL column) goes to the dead letter with the file's name and the good rows are applied.  A file
that cannot be read at all (unknown or missing NOT NULL columns, a column of an incompatible type, a
corrupt Parquet file) becomes one dead-letter record naming the file and the problem, and the connector
goes on with the next file.  With ``"on_error": "reject"`` the connector stops at the first problem.

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
from typing import Any, List, Optional, Tuple
from urllib.parse import urlparse

from planner.errors import InputError

from .base import Source, SourceBatch, opt, register_source
from .formats import unit_chunks

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


@register_source
class FileInput(Source):
    transport = "file_input"
    OPTIONS = {
        "path": opt(str, required=True, doc="the directory: a local path or a URI Spark reads (hdfs://, s3a://, "
                                            "file://)"),
        "pattern": opt(str, default="*", doc="glob the file names must match, e.g. \"*.csv\""),
        "follow": opt(bool, default=False, doc="keep reading new files (else read the files present, then finish)"),
        "poll_interval_ms": opt(int, default=1000, doc="with follow: how often to look for new files"),
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
        self.done: set = set()
        self.queue: List[Tuple[str, int]] = []   # (name, size) of files listed and not read yet, in name order
        self.listed_at: Optional[float] = None
        self._spark = None

    def open(self, position: Any) -> None:
        self.done = set(position or [])
        self.queue = []
        self.listed_at = None

    def _list(self) -> List[Tuple[str, int]]:
        pattern = self.config["pattern"]
        if self.reader == "arrow":
            out = []
            with os.scandir(self.directory) as it:
                for e in it:
                    if readable_name(e.name, pattern) and e.is_file():
                        out.append((e.name, e.stat().st_size))
            return out
        spark = self._session()
        jvm = spark.sparkContext._jvm
        path = jvm.org.apache.hadoop.fs.Path(self.directory)
        fs = path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
        try:
            statuses = fs.listStatus(path)
        except Exception as e:   # noqa: BLE001 - py4j wraps FileNotFoundException
            raise OSError(f"cannot list {self.directory}: {str(e).splitlines()[0]}") from None
        return [(s.getPath().getName(), int(s.getLen())) for s in statuses
                if s.isFile() and readable_name(s.getPath().getName(), pattern)]

    def _session(self):
        if self._spark is None:
            from sqlengine.executor.session import get_spark   # SparkSession.builder.getOrCreate(), process-wide
            self._spark = get_spark()
        return self._spark

    def poll(self, max_rows: int) -> Optional[SourceBatch]:
        if not self.queue:
            interval = self.config["poll_interval_ms"] / 1000
            if self.listed_at is not None:
                if not self.config["follow"]:
                    return None
                wait = self.listed_at + interval - time.monotonic()
                if wait > 0:
                    time.sleep(min(wait, 0.2))
                    return None
            self.listed_at = time.monotonic()
            self.queue = sorted((n, s) for n, s in self._list() if n not in self.done)
            if not self.queue:
                return None
        name, size = self.queue.pop(0)
        self.done.add(name)
        return SourceBatch(unit_chunks([(name, self._chunks(name))]), sorted(self.done), bytes=size)

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
        return not self.config["follow"] and self.listed_at is not None and not self.queue

    def lag(self) -> Optional[int]:
        return len(self.queue)   # files listed and not read yet
