"""Logging setup of the command line (``sqlengine run`` and ``sqlengine serve``): one function, two formats.

``text``: ``2026-01-02T03:04:05 INFO sqlengine.status: ...`` on stderr.  ``json``: one JSON object per line,
``{"time", "level", "logger", "message", ...}`` with the record's ``extra`` fields (``pipeline``,
``connector``, the numbers of a status line, ...) and an exception as a string under ``exception``.

On a terminal with a rich ``Live`` display, pass its console: records are then printed through that console
(``rich.logging.RichHandler`` for text), above the display instead of tearing it.

>>> import io, json, logging
>>> buf = io.StringIO()
>>> setup_logging("INFO", "json", stream=buf)
>>> logging.getLogger("sqlengine.demo").info("hello %s", "you", extra={"pipeline": "p"})
>>> r = json.loads(buf.getvalue()); (r["level"], r["logger"], r["message"], r["pipeline"])
('INFO', 'sqlengine.demo', 'hello you', 'p')
>>> reset_logging()
"""
from __future__ import annotations

import datetime as dt
import json
import logging
import sys
from typing import Any, Optional, TextIO

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
FORMATS = ("text", "json")
# chatty third-party loggers: kept at WARNING unless --log-level DEBUG (then INFO)
NOISY = ("py4j", "httpx", "httpcore", "urllib3", "asyncio", "filelock", "matplotlib", "botocore")
_STANDARD = set(vars(logging.LogRecord("x", logging.INFO, "x", 0, "x", (), None))) | {"message", "asctime",
                                                                                     "taskName", "color_message"}
_MARK = "_sqlengine_handler"


def _utc(created: float) -> str:
    t = dt.datetime.fromtimestamp(created, dt.timezone.utc)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


def extra_fields(record: logging.LogRecord) -> dict:
    """The fields a record got through ``extra=``."""
    return {k: v for k, v in vars(record).items() if k not in _STANDARD and not k.startswith("_")}


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line: time (UTC, ISO 8601), level, logger, message, the extra fields,
    and ``exception`` (the formatted traceback) if there is one."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict = {"time": _utc(record.created), "level": record.levelname, "logger": record.name,
                     "message": record.getMessage()}
        for k, v in extra_fields(record).items():
            out.setdefault(k, v)
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            out["exception"] = record.exc_text
        if record.stack_info:
            out["stack"] = self.formatStack(record.stack_info)
        return json.dumps(out, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    def __init__(self):
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%Y-%m-%dT%H:%M:%S")


class ConsoleHandler(logging.Handler):
    """Prints formatted records through a rich Console (which a ``Live`` display keeps below them)."""

    def __init__(self, console, level=logging.NOTSET):
        super().__init__(level)
        self.console = console

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.console.print(self.format(record), markup=False, highlight=False, soft_wrap=True)
        except Exception:  # noqa: BLE001
            self.handleError(record)


def level_of(level: Any) -> int:
    if isinstance(level, int):
        return level
    name = str(level).upper()
    if name not in LEVELS:
        raise ValueError(f"log level {level!r}: use one of {', '.join(LEVELS)}")
    return getattr(logging, name)


def setup_logging(level: Any = "INFO", fmt: str = "text", console=None, stream: Optional[TextIO] = None) -> None:
    """Send every logger's records (the root logger's handlers are replaced) to one handler: a rich handler on
    ``console`` if given (text: ``RichHandler``; json: the JSON lines printed through the console), else a
    stream handler on ``stream`` (default stderr).  ``level``: DEBUG, INFO, WARNING or ERROR."""
    lvl = level_of(level)
    if fmt not in FORMATS:
        raise ValueError(f"log format {fmt!r}: use text or json")
    if console is not None and fmt == "text":
        from rich.logging import RichHandler
        handler: logging.Handler = RichHandler(console=console, show_path=False, markup=False,
                                               rich_tracebacks=False, log_time_format="%H:%M:%S")
    elif console is not None:
        handler = ConsoleHandler(console)
        handler.setFormatter(JsonFormatter())
    else:
        handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
        handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    setattr(handler, _MARK, True)
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    root.addHandler(handler)
    root.setLevel(lvl)
    for name in NOISY:
        logging.getLogger(name).setLevel(max(lvl, logging.INFO if lvl <= logging.DEBUG else logging.WARNING))
    logging.captureWarnings(True)


def reset_logging() -> None:
    """Remove the handler ``setup_logging`` installed."""
    root = logging.getLogger()
    for h in list(root.handlers):
        if getattr(h, _MARK, False):
            root.removeHandler(h)
    logging.captureWarnings(False)


def uvicorn_log_config(level: Any = "INFO") -> dict:
    """A uvicorn ``log_config`` that leaves uvicorn's loggers to the root handler of ``setup_logging``."""
    name = logging.getLevelName(level_of(level))
    return {"version": 1, "disable_existing_loggers": False,
            "loggers": {n: {"handlers": [], "propagate": True, "level": name}
                        for n in ("uvicorn", "uvicorn.error", "uvicorn.access")}}
