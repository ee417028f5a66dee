"""The rows of ``execute()``'s INSERT statements, cast to the table's column types by DuckDB itself.

``INSERT INTO t VALUES ...`` is run by DuckDB against an empty table with ``t``'s column types, so every
literal is cast exactly as DuckDB casts it into that column: ``1.5`` into DOUBLE, ``1.005`` into
DECIMAL(5,2) as 1.01, ``'2024-02-29'`` into DATE; ``CAST('nan' AS DOUBLE)`` stays NaN, and an integer column
never passes through float64.  A value DuckDB rejects (``'2023-02-29'`` into DATE, 128 into TINYINT) raises
``InputError`` naming the table, the column and the row (0-based in the statement), and nothing is inserted.
The rows of ``INSERT ... SELECT`` are cast the same way.  The result is an Arrow table named by the table's
columns, for :func:`sqlengine.ingest.inputs.arrow_chunks`.
"""
from __future__ import annotations

from typing import List, Optional, Sequence

import duckdb
import pyarrow as pa
from sqlglot import exp

from planner.bind import TableDef
from planner.errors import InputError

from sqlengine import private_duckdb
from sqlengine.ingest.inputs import Errors, match_columns

TARGET = "rows_in"    # the empty table of the target's column types the rows are inserted into
SOURCE = "rows_src"   # the rows of INSERT ... SELECT, registered from Arrow
ROW = "__row"         # their row number
# errors of one value (a cast, an overflow, a failing function), as opposed to errors of the statement
VALUE_ERRORS = (duckdb.DataError, duckdb.InvalidInputException)


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _first_line(e: Exception) -> str:
    return str(e).splitlines()[0]


class _Target:
    """An in-memory DuckDB holding an empty table of the given columns of ``t`` (field names, in order)."""

    def __init__(self, t: TableDef, given: Optional[Sequence[str]], width: int):
        names = list(given) if given is not None else [f.name for f in t.fields]
        if width != len(names):
            raise InputError(f"table {t.name}: INSERT supplies {width} values per row for "
                             f"{len(names)} columns ({', '.join(names)})")
        mapping = match_columns(t, names)
        by_given = {g: f for f, g in mapping.items()}
        types = {f.name: f.type for f in t.fields}
        self.table = t
        self.names: List[str] = [by_given[g] for g in names]
        self.types = [types[n] for n in self.names]
        self.con = private_duckdb.cursor(sandboxed=True)
        self.con.execute(f"CREATE TEMP TABLE {TARGET} (" + ", ".join(
            f"{_quoted(n)} {ty.sql}" for n, ty in zip(self.names, self.types)) + ")")

    def fails(self, sql: str) -> Optional[duckdb.Error]:
        """Run ``sql`` in a transaction that is rolled back; the error of a value (``VALUE_ERRORS``), or None."""
        self.con.execute("BEGIN")
        try:
            self.con.execute(sql).fetchall()
            return None
        except VALUE_ERRORS as e:
            return e
        except duckdb.Error:
            return None
        finally:
            self.con.execute("ROLLBACK")

    def rows(self) -> pa.Table:
        return self.con.sql(f"SELECT * FROM {TARGET}").to_arrow_table()

    def reject(self, row: int, column: int, value: str, error: duckdb.Error) -> None:
        """Raise ``InputError`` naming the table, the column and the row of ``value``, as for any bad value."""
        what = (f"cannot convert {value} to {self.types[column].sql}" if isinstance(error, duckdb.ConversionException)
                else f"cannot evaluate {value}")
        errs = Errors(self.table.name)
        errs.add(row, self.names[column], f"{what}: {_first_line(error)}")
        errs.check()

    def close(self) -> None:
        self.con.close()


def _values_sql(rows: Sequence[exp.Tuple]) -> str:
    return "VALUES " + ", ".join(r.sql(dialect="duckdb") for r in rows)


def values_rows(t: TableDef, values: exp.Values, given: Optional[Sequence[str]]) -> pa.Table:
    """The rows of ``INSERT INTO t [(given)] VALUES ...`` as DuckDB inserts them into ``t``'s column types."""
    rows = [r if isinstance(r, exp.Tuple) else exp.Tuple(expressions=[r]) for r in values.expressions]
    widths = {len(r.expressions) for r in rows}
    if len(widths) > 1:
        raise InputError(f"table {t.name}: the rows of VALUES have different numbers of values "
                         f"({', '.join(str(w) for w in sorted(widths))})")
    target = _Target(t, given, widths.pop() if widths else 0)
    try:
        try:
            target.con.execute(f"INSERT INTO {TARGET} {_values_sql(rows)}")
        except duckdb.Error as e:
            _reject_value(target, rows)
            raise InputError(f"table {t.name}: bad VALUES: {_first_line(e)}") from None
        return target.rows()
    finally:
        target.close()


def _reject_value(target: _Target, rows: Sequence[exp.Tuple]) -> None:
    """Raise the error of the first value DuckDB cannot insert (rows are cast one by one, so the first bad
    row is found by bisection); returns if no single value is to blame."""
    lo, hi = 0, len(rows)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if target.fails(f"INSERT INTO {TARGET} {_values_sql(rows[lo:mid])}") is not None:
            hi = mid
        else:
            lo = mid
    for j, value in enumerate(rows[lo].expressions):
        error = target.fails(f"INSERT INTO {TARGET} ({_quoted(target.names[j])}) "
                             f"VALUES ({value.sql(dialect='duckdb')})")
        if error is not None:
            target.reject(lo, j, value.sql(dialect="duckdb"), error)


def cast_rows(t: TableDef, result: pa.Table, given: Optional[Sequence[str]]) -> pa.Table:
    """The rows of ``INSERT INTO t [(given)] SELECT ...`` (``result``) cast by DuckDB to ``t``'s column types."""
    target = _Target(t, given, result.num_columns)
    try:
        src = pa.Table.from_arrays(result.columns + [pa.array(range(result.num_rows), pa.int64())],
                                   names=[f"c{j}" for j in range(result.num_columns)] + [ROW])
        target.con.register(SOURCE, src)
        cols = ", ".join(f"c{j}" for j in range(result.num_columns))
        try:
            target.con.execute(f"INSERT INTO {TARGET} SELECT {cols} FROM {SOURCE} ORDER BY {ROW}")
            return target.rows()
        except duckdb.Error as e:
            message = _first_line(e)
        _reject_selected(target, result.num_columns)
        raise InputError(f"table {t.name}: INSERT ... SELECT: {message}")
    finally:
        target.close()


def _reject_selected(target: _Target, width: int) -> None:
    """Raise the error of the first selected value (by row, then column) that DuckDB cannot cast to its
    column's type; returns if no single value is to blame."""
    bad = []
    for j, ty in zip(range(width), target.types):
        found = target.con.execute(f"SELECT min({ROW}) FROM {SOURCE} WHERE c{j} IS NOT NULL AND "
                                   f"TRY_CAST(c{j} AS {ty.sql}) IS NULL").fetchall()[0][0]
        if found is not None:
            bad.append((found, j))
    if bad:
        row, j = min(bad)
        where = f"FROM {SOURCE} WHERE {ROW} = {row}"
        value = target.con.execute(f"SELECT CAST(c{j} AS VARCHAR) {where}").fetchall()[0][0]
        error = target.fails(f"SELECT CAST(c{j} AS {target.types[j].sql}) {where}")
        if error is not None:
            target.reject(row, j, repr(value), error)
