"""The connector interface: sources and sinks, their options, and how the engine drives them.

A **source** reads one table's input from positions that can be serialized as JSON (Kafka offsets, the
names of files already read, a generator's counter).  The engine owns the positions: every batch a
source returns goes into the durable input log together with the position it ends at, a step's commit
records the positions it consumed, and after a crash a source is reopened at the position of the last
batch that reached the log.  So a source never has to commit anything itself.

A **sink** writes one view's changes step by step.  The engine keeps each step's changes of a view
with sinks in an outbox, written before the step commits, and delivers them after the commit in step
order.  ``open()`` tells the engine the last step the sink already holds (read back from the sink
itself), so delivery resumes right after it; ``write(step, ...)`` of a step the sink already holds
must have no further effect.  Together that is exactly once.

Connectors are registered by transport name (``register``) and declared in SQL as a JSON list::

    CREATE TABLE t (...) WITH ('connectors' = '[{"name": "n", "transport": {"name": "...", "config": {...}},
                                                "format": {"name": "...", "config": {...}}}]')
"""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Dict, Iterator, List, Optional, Sequence, Tuple

import pyarrow as pa

from planner.errors import ConnectorError


@dataclass(frozen=True)
class Option:
    """One configuration option of a connector or format."""
    types: Tuple[type, ...]
    default: Any = None
    required: bool = False
    choices: Tuple[Any, ...] = ()
    doc: str = ""

    def describe(self) -> str:
        if self.choices:
            return " | ".join(repr(c) for c in self.choices)
        return "/".join({str: "string", int: "integer", float: "number", bool: "boolean", list: "list",
                         dict: "object"}.get(t, t.__name__) for t in self.types)


def opt(*types: type, default: Any = None, required: bool = False, choices: Sequence[Any] = (), doc: str = "") -> Option:
    return Option(tuple(types), default, required, tuple(choices), doc)


class Located:
    """Turns a problem with a declared connector into a ``ConnectorError`` pointing into the SQL."""

    def __init__(self, sql: Optional[str], literal_at: Optional[int], literal: str = ""):
        self.sql, self.literal_at, self.literal = sql, literal_at, literal

    def at(self, needle: Optional[str] = None) -> Optional[int]:
        """Offset of ``needle`` (e.g. ``"topics"``, quoted) inside the declaration, else of the declaration."""
        if self.literal_at is None:
            return None
        if needle and self.sql is not None:
            end = self.literal_at + len(self.literal) + 2 + self.literal.count("'")
            i = self.sql.find(f'"{needle}"', self.literal_at, end)
            if i >= 0:
                return i
        return self.literal_at

    def error(self, message: str, needle: Optional[str] = None) -> ConnectorError:
        return ConnectorError(message, sql=self.sql, offset=self.at(needle))


def check_options(what: str, spec: Dict[str, Option], config: Dict[str, Any], where: Located,
                  passthrough: Optional[Callable[[str], bool]] = None) -> Dict[str, Any]:
    """``config`` checked against ``spec``, with defaults filled in.  Keys for which ``passthrough`` is true
    (e.g. librdkafka's dotted options) are kept as they are."""
    if not isinstance(config, dict):
        raise where.error(f"{what}: \"config\" must be a JSON object, not {type(config).__name__}")
    out: Dict[str, Any] = {}
    for key, value in config.items():
        if key in spec:
            o = spec[key]
            ok = isinstance(value, o.types) and not (isinstance(value, bool) and bool not in o.types)
            if ok and float in o.types and isinstance(value, bool):
                ok = False
            if not ok:
                raise where.error(f"{what}: option \"{key}\" must be {o.describe()}, not {value!r}", key)
            if o.choices and value not in o.choices:
                raise where.error(f"{what}: option \"{key}\" must be one of {', '.join(repr(c) for c in o.choices)}, "
                                  f"not {value!r}", key)
            out[key] = value
        elif passthrough is not None and passthrough(key):
            out[key] = value
        else:
            import difflib
            close = difflib.get_close_matches(key, list(spec), n=1)
            hint = f" (did you mean \"{close[0]}\"?)" if close else ""
            raise where.error(f"{what}: unknown option \"{key}\"{hint}. Options: {', '.join(sorted(spec)) or '(none)'}",
                              key)
    for key, o in spec.items():
        if key not in out:
            if o.required:
                raise where.error(f"{what}: option \"{key}\" is required ({o.doc or o.describe()})")
            out[key] = o.default
    return out


@dataclass
class Context:
    """What a connector may know about the pipeline it belongs to."""
    pipeline: str
    storage_dir: str
    relation: str                 # the table or view
    connector: str                # the connector's name
    columns: List[Tuple[str, Any]] = field(default_factory=list)   # (name, planner SqlType)
    key: Tuple[str, ...] = ()     # a table's primary key
    table: Any = None             # a source's table (planner.bind.TableDef), for sqlengine.ingest.inputs' converters
    materialized: bool = False    # a sink's view is a MATERIALIZED VIEW
    pipeline_id: str = ""         # set before a sink opens: sinks refuse output that another pipeline wrote
    epoch: int = 0                # set before a sink opens: the storage lock's epoch (sqlengine.state.lock);
    # sinks write it with their output and refuse to write for an epoch older than one they hold
    where: Located = field(default_factory=lambda: Located(None, None))


class Connector:
    transport: ClassVar[str] = ""
    OPTIONS: ClassVar[Dict[str, Option]] = {}
    FORMATS: ClassVar[Tuple[str, ...]] = ()   # the formats it reads or writes, the default first; () = none
    EXTRA: ClassVar[Optional[str]] = None     # the pip extra whose modules it imports
    MODULES: ClassVar[Tuple[str, ...]] = ()   # ... and those modules, checked when the program is compiled

    PASSTHROUGH_DOTTED: ClassVar[bool] = False   # keys with a '.' are the client library's own (librdkafka)

    @classmethod
    def passthrough(cls, key: str) -> bool:
        return cls.PASSTHROUGH_DOTTED and "." in key

    @classmethod
    def check_installed(cls, where: Located) -> None:
        missing = [m for m in cls.MODULES if importlib.util.find_spec(m) is None]
        if missing:
            raise where.error(f"connector {cls.transport} needs {', '.join(missing)}: "
                              f"pip install 'sqlengine[{cls.EXTRA}]'")

    def __init__(self, config: Dict[str, Any], fmt: Optional["Format"], ctx: Context):
        self.config, self.format, self.ctx = config, fmt, ctx

    def validate(self) -> None:
        """Cross-option checks at compile time; raise ``self.ctx.where.error(...)``."""


Chunk = Tuple[pa.Table, Any]   # positional rows c0.. and their weights: one int for all, or a list
Chunks = Callable[[Any, int], Iterator[Chunk]]   # (errors policy, chunk rows) -> chunks; see sqlengine.ingest.inputs


@dataclass
class SourceBatch:
    """Input read by a source: its rows (converted lazily, so the engine can apply its error policy and
    chunking) and the position right after it."""
    chunks: Chunks
    position: Any
    bytes: int = 0
    # a problem with the input that is not a bad record (e.g. a file that changed after it was read), set by the
    # source (also while ``chunks`` runs): once the batch is logged it becomes the connector's ``last_error``
    warning: Optional[str] = None


class Source(Connector):
    """Reads one table's input.  ``poll`` is called from the source's own thread."""

    def open(self, position: Any) -> None:
        """Start reading after ``position`` (None: from the configured start)."""

    def poll(self, max_rows: int) -> Optional[SourceBatch]:
        """The next batch (at most about ``max_rows`` rows), or None if nothing is available now (wait a
        little inside, up to about 0.2 s, rather than returning at once)."""
        raise NotImplementedError

    def committed(self, position: Any) -> None:
        """A step that consumed the input up to ``position`` committed (also called once before ``open`` with
        the committed position, or None).  Called from the pipeline's thread, so keep it to recording the
        position; a source that acknowledges input upstream (a replication slot) does so from ``poll``."""

    def finished(self) -> bool:
        """True when no more input will ever come (a bounded source read to its end)."""
        return False

    def lag(self) -> Optional[int]:
        """Rows or messages known to be waiting at the source, if it can tell."""
        return None

    def close(self) -> None:
        pass


class Sink(Connector):
    """Writes one view's changes, one step at a time, after the step committed."""

    def open(self) -> int:
        """Prepare to write; return the last step this sink already holds (0 if none)."""
        return 0

    def write(self, step: int, changes: pa.Table) -> None:
        """Write step ``step``'s changes: the view's columns plus ``__weight``.  Writing a step the sink
        already holds must change nothing."""
        raise NotImplementedError

    # A sink that must start from the view's whole contents (not only the changes from now on) sets
    # ``SEEDED = True`` and implements ``seed``: when ``open()`` returns 0 on a pipeline that already
    # committed steps, the engine calls ``seed(step, contents)`` with the view's consolidated contents
    # (columns plus ``__weight``) at committed step ``step``, then delivers the steps after it.
    SEEDED: ClassVar[bool] = False

    def seed(self, step: int, contents: pa.Table) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass


class Format:
    """Turns bytes into rows (for sources) or rows into bytes (for sinks)."""
    name: ClassVar[str] = ""
    OPTIONS: ClassVar[Dict[str, Option]] = {}

    def __init__(self, config: Dict[str, Any], ctx: Context):
        self.config, self.ctx = config, ctx


SOURCES: Dict[str, type] = {}
SINKS: Dict[str, type] = {}
FORMATS: Dict[str, type] = {}


def register_source(cls: type) -> type:
    """Class decorator: make a ``Source`` subclass available under its ``transport`` name."""
    SOURCES[cls.transport] = cls
    return cls


def register_sink(cls: type) -> type:
    SINKS[cls.transport] = cls
    return cls


def register_format(cls: type) -> type:
    FORMATS[cls.name] = cls
    return cls
