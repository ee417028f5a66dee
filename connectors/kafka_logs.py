"""librdkafka's own log lines and error callbacks, through ``logging``, rate-limited.

Every Kafka client of the connectors (consumers, producers) gets ``"logger": LIBRDKAFKA_LOG`` in its
configuration: confluent-kafka then hands librdkafka's log lines to that ``logging.Logger``
(``sqlengine.kafka.librdkafka``) instead of printing them to stderr, on the thread that calls the client's
``poll``/``consume``/``flush``/``list_topics``/``close`` (they wait in the client until then).  Error
callbacks are routed to the same logger (``routed``).

With a broker down, librdkafka repeats the same connection failure for every client many times a second
(and the connectors reopen their clients with backoff), so the logger has a ``RateLimit`` filter: of the
records of one level and librdkafka facility (``FAIL``, ``ERROR``, ...), at most one in ``WINDOW_S``
seconds passes; the next one that passes says how many similar ones were suppressed.  The outage itself is
reported by the connectors (``status()``, the ``sqlengine.connectors`` logger).
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Dict, List, Tuple

LOGGER_NAME = "sqlengine.kafka.librdkafka"
WINDOW_S = 10.0


def _facility(record: logging.LogRecord) -> str:
    args = record.args
    if isinstance(args, tuple) and len(args) == 3 and record.msg == "%s [%s] %s":   # confluent-kafka's form
        return str(args[0])
    return str(record.msg)[:40]


class RateLimit(logging.Filter):
    """At most one record per ``window`` seconds per (level, facility); the one that passes after a
    suppression is extended with the count of suppressed records (also in its ``suppressed`` attribute)."""

    def __init__(self, window: float = WINDOW_S):
        super().__init__()
        self.window = window
        self._lock = threading.Lock()
        self._state: Dict[Tuple[int, str], List[Any]] = {}   # key -> [last passed (monotonic), suppressed]

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.levelno, _facility(record))
        now = time.monotonic()
        with self._lock:
            st = self._state.get(key)
            if st is not None and now - st[0] < self.window:
                st[1] += 1
                return False
            suppressed = st[1] if st is not None else 0
            since = now - st[0] if st is not None else 0.0
            self._state[key] = [now, 0]
        record.suppressed = suppressed
        if suppressed:
            record.msg = (f"{record.getMessage()} ({suppressed} similar message{'s' if suppressed > 1 else ''} "
                          f"suppressed in the last {since:.0f} s)")
            record.args = ()
        return True


def _logger() -> logging.Logger:
    lg = logging.getLogger(LOGGER_NAME)
    if not any(isinstance(f, RateLimit) for f in lg.filters):
        lg.addFilter(RateLimit())
    return lg


LIBRDKAFKA_LOG = _logger()


def log_client_error(err) -> None:
    """A client's error callback (a ``KafkaError``) as a record of ``LIBRDKAFKA_LOG``: ERROR if fatal, else
    WARNING (librdkafka retries; the connector decides what it means)."""
    try:
        name, text, fatal = err.name(), err.str(), err.fatal()
    except Exception:   # noqa: BLE001 - not a KafkaError
        name, text, fatal = "ERROR", str(err), False
    LIBRDKAFKA_LOG.log(logging.ERROR if fatal else logging.WARNING, "%s [%s] %s", f"ERROR {name}", "error_cb", text)


def routed(callback: Callable[[Any], None]) -> Callable[[Any], None]:
    """An ``error_cb`` that logs the error (``log_client_error``), then calls ``callback``."""
    def error_cb(err) -> None:
        log_client_error(err)
        callback(err)
    return error_cb
