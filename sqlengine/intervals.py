"""INTERVAL values on the data plane: DuckDB's text of the interval, exact and canonical.

An INTERVAL is three numbers (months, days, microseconds) that DuckDB keeps apart: ``INTERVAL '30 days'`` is not
``INTERVAL '1 month'`` when added to a date, though the two compare equal.  Neither Parquet (which keeps the
state) nor Spark's Arrow conversion has Arrow's month-day-nanosecond interval, so a column of type INTERVAL is
held as DuckDB's own text of its value (``'1 month 2 days 00:00:03'``), which DuckDB reads back to the same three
numbers; inside an expression the planner reads it as an INTERVAL again (``planner.nested_types.READ_AS``).
Every input path makes its values this text here, with DuckDB's conversions: text as DuckDB casts it
(``'1 day'``, ``'01:30:00'``, ``'2 months ago'``), a Python ``timedelta`` as DuckDB binds one (days and
microseconds), an Arrow duration or month-day-nano interval as DuckDB reads one.

>>> interval_texts(pa.array(["1 day 2 hours", None, "-1 month", "90 minutes"])).to_pylist()
['1 day 02:00:00', None, '-1 month', '01:30:00']
>>> import datetime as dt
>>> interval_text(dt.timedelta(days=1, seconds=3)), interval_text(pa.MonthDayNano([14, 3, 5000]))
('1 day 00:00:03', '1 year 2 months 3 days 00:00:00.000005')
"""
from __future__ import annotations

import datetime as dt
import threading
from typing import Any, Optional

import pyarrow as pa

__all__ = ["interval_text", "interval_texts"]

_DB: list = []
_LOCK = threading.Lock()


def _cursor():
    """A cursor of this module's in-memory DuckDB database (casts only; a cursor costs microseconds)."""
    with _LOCK:
        if not _DB:
            import duckdb
            _DB.append(duckdb.connect(":memory:"))
        return _DB[0].cursor()


def _cast(table: pa.Table) -> pa.Array:
    """Column ``v`` of ``table`` as DuckDB's text of ``CAST(v AS INTERVAL)``; ValueError if a value does not
    cast."""
    con = _cursor()
    try:
        out = con.from_arrow(table).project("CAST(TRY_CAST(v AS INTERVAL) AS VARCHAR) AS t, "
                                            "v IS NOT NULL AND TRY_CAST(v AS INTERVAL) IS NULL AS lost").arrow()
    finally:
        con.close()
    out = out.read_all() if hasattr(out, "read_all") else out
    if any(out.column("lost").to_pylist()):
        raise ValueError("not an INTERVAL (write e.g. '1 day', '01:30:00' or '2 months 3 days')")
    return out.column("t").combine_chunks()


def interval_texts(a) -> pa.Array:
    """An Arrow array of text, durations or intervals (or NULLs) -> the canonical text of each value; raises
    ValueError if a value is not an interval (the caller names it by converting the values one by one)."""
    if isinstance(a, pa.ChunkedArray):
        a = a.combine_chunks()
    if pa.types.is_null(a.type):
        return pa.nulls(len(a), pa.string())
    if pa.types.is_large_string(a.type):
        a = a.cast(pa.string())
    if not (pa.types.is_string(a.type) or pa.types.is_duration(a.type) or a.type == pa.month_day_nano_interval()):
        raise TypeError(f"{a.type} is not an INTERVAL")
    return _cast(pa.table({"v": a}))


def interval_text(v: Any) -> Optional[str]:
    """One Python value -> its canonical text (None for None): text, a ``datetime.timedelta`` (pandas' and
    numpy's too), or ``pyarrow.MonthDayNano``; raises TypeError or ValueError for anything else."""
    if v is None:
        return None
    if isinstance(v, pa.MonthDayNano):
        return interval_texts(pa.array([v], pa.month_day_nano_interval()))[0].as_py()
    if hasattr(v, "to_pytimedelta"):   # pandas.Timedelta
        v = v.to_pytimedelta()
    elif type(v).__name__ == "timedelta64":
        import pandas as pd
        v = pd.Timedelta(v).to_pytimedelta()
    if isinstance(v, dt.timedelta):
        con = _cursor()
        try:
            return con.execute("SELECT CAST(? AS VARCHAR)", [v]).fetchone()[0]
        finally:
            con.close()
    if isinstance(v, str):
        return interval_texts(pa.array([v], pa.string()))[0].as_py()
    raise TypeError(f"{v!r} is not an INTERVAL (give text such as '1 day', or a timedelta)")

