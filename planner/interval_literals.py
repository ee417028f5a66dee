"""Interval literals kept whole: the dialect the engine reads users' SQL with.

sqlglot reads ``INTERVAL '<text>'`` as ``INTERVAL '<n>' <UNIT>`` when the text holds one ``<n> <unit>``, and drops
whatever else the text says: ``INTERVAL '-1 day 02:00:00'`` becomes ``INTERVAL '-1' DAY`` and ``INTERVAL '1 month
ago'`` becomes ``INTERVAL '1' MONTH`` (the sign lost).  :class:`ReadDuckDB` reads such a literal as ``CAST('<text>'
AS INTERVAL)``, which DuckDB gives the same value as the literal, and which sqlglot writes and reads back as it is.

>>> import sqlglot
>>> [sqlglot.parse_one(f"SELECT INTERVAL '{t}'", read=ReadDuckDB).sql("duckdb") for t in
...  ("-1 day 02:00:00", "1 month ago", "2 days", "1 day 2 hours")]
["SELECT CAST('-1 day 02:00:00' AS INTERVAL)", "SELECT CAST('1 month ago' AS INTERVAL)", "SELECT INTERVAL '2' DAYS", "SELECT INTERVAL '1 day 2 hours'"]
"""
from __future__ import annotations

from sqlglot import exp
from sqlglot.dialects.duckdb import DuckDB
from sqlglot.optimizer.simplify import simplify

_ONE_PART = exp.INTERVAL_STRING_RE   # one '<n> <unit>', as sqlglot's parser finds it


def whole_interval(this):
    """``CAST('<text>' AS INTERVAL)`` for the text of an INTERVAL literal that sqlglot would cut short, else
    None."""
    if this is None or not isinstance(this, exp.Literal) or not this.is_string:
        return None
    text = this.name
    if len(_ONE_PART.findall(text)) == 1 and not _ONE_PART.fullmatch(text):
        return exp.Cast(this=this, to=exp.DataType.build("INTERVAL"))
    return None


def list_indexes_as_written(tree: exp.Expression) -> exp.Expression:
    """``tree`` with each ``list[i]`` holding DuckDB's 1-based index as written, marked as such (``offset`` 1).

    sqlglot's parser shifts an index to 0-based only where it knows the index is an integer (a constant), and
    its DuckDB writer shifts back wherever it knows that by then: the planner types every column, so ``l[i]``
    of an INT column ``i`` was written ``l[i + 1]`` (a silent wrong answer).  With the index as written and
    the offset recorded, DuckDB's writer leaves it as it is, and another dialect's shifts it from 1-based."""
    for b in tree.find_all(exp.Bracket):
        if b.args.get("json_access") or b.args.get("offset") or len(b.expressions) != 1:
            continue
        i = b.expressions[0]
        holder = b.this.type.this if b.this.type is not None else None
        number = i.this if isinstance(i, exp.Neg) else i
        integer = (isinstance(number, exp.Literal) and number.is_int) or \
            (i.type is not None and i.type.this in exp.DataType.INTEGER_TYPES)
        if holder in (exp.DataType.Type.UNKNOWN, exp.DataType.Type.ARRAY) and integer:
            # (what the parser shifted: an integer constant, or an index it knew to be an integer)
            b.set("expressions", [simplify(exp.Add(this=i.copy(), expression=exp.Literal.number(1)))])
        b.set("offset", 1)
    return tree


class ReadDuckDB(DuckDB):
    """DuckDB's dialect, reading INTERVAL literals whole (:func:`whole_interval`) and list indexes as written
    (:func:`list_indexes_as_written`)."""

    class Parser(DuckDB.Parser):
        def _parse_interval_span(self, this, parse_function_unit=True):
            whole = whole_interval(this)
            if whole is not None:
                return whole
            return super()._parse_interval_span(this, parse_function_unit=parse_function_unit)

        def parse(self, raw_tokens, sql=None):
            return [None if e is None else list_indexes_as_written(e) for e in super().parse(raw_tokens, sql)]
