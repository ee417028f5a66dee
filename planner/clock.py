"""``NOW()`` in views: the current time as an input that changes, so views over it stay incremental.

A view may call ``NOW()``, ``CURRENT_TIMESTAMP`` (also ``LOCALTIMESTAMP``, ``get_current_timestamp()``,
``transaction_timestamp()``) or ``CURRENT_DATE``.  Each call is rewritten to a read of the engine's clock
table ``__clock`` (one TIMESTAMP column ``now``, holding one row): ``(SELECT MAX(now) FROM __clock)``,
and ``CAST(... AS DATE)`` for ``CURRENT_DATE``.  The runtime replaces the clock's row when the clock
advances (by the pipeline's clock resolution, wall time by default, ``advance_clock()`` in tests), so a
temporal filter such as ``WHERE ts > NOW() - INTERVAL 1 HOUR`` is an ordinary incremental join with a
one-row input: a row enters the view when inserted and leaves it when the clock passes it, the same
value is seen by a row's insert and its delete, and after a restart the committed clock row is where
the clock resumes.  Other non-deterministic functions (``random()``, ``uuid()``, ...) stay rejected.

>>> from sqlglot import parse_one
>>> q, used = rewrite_now(parse_one("SELECT a FROM t WHERE ts > now() - INTERVAL '1' HOUR", read="duckdb"))
>>> used, q.sql(dialect="duckdb")
(True, "SELECT a FROM t WHERE ts > (SELECT MAX(now) FROM __clock) - INTERVAL '1' HOUR")
"""
from __future__ import annotations

from typing import Tuple

import sqlglot
from sqlglot import exp

from .logical import Field
from .types import SqlType

CLOCK = "__clock"
CLOCK_COLUMN = "now"
NOW_FUNCTIONS = {"now", "current_timestamp", "localtimestamp", "get_current_timestamp", "transaction_timestamp",
                 "current_localtimestamp"}
_NOW_CLASSES = (exp.CurrentTimestamp, exp.Localtimestamp, exp.CurrentDatetime)


def clock_table():
    """The clock's TableDef: one column ``now TIMESTAMP NOT NULL``."""
    from .bind import TableDef
    return TableDef(CLOCK, (Field(CLOCK_COLUMN, SqlType("TIMESTAMP", False)),))


def _read_clock() -> exp.Expression:
    return sqlglot.parse_one(f"(SELECT MAX({CLOCK_COLUMN}) FROM {CLOCK})", read="duckdb")


def rewrite_now(q: exp.Expression) -> Tuple[exp.Expression, bool]:
    """``q`` with every call of the current time replaced by a read of the clock table, and whether it had one."""
    used = False

    def swap(n: exp.Expression) -> exp.Expression:
        nonlocal used
        if isinstance(n, _NOW_CLASSES) or (isinstance(n, exp.Anonymous) and n.name.lower() in NOW_FUNCTIONS):
            used = True
            return _read_clock()
        if isinstance(n, exp.CurrentDate) or (isinstance(n, exp.Anonymous) and n.name.lower() in ("current_date",
                                                                                                  "today")):
            used = True
            return exp.cast(_read_clock(), "DATE")
        return n
    out = q.copy().transform(swap)
    return out, used
