"""Compile-time checks on view expressions that sqlglot accepts but the engine must reject.

* :func:`check_types`: comparisons (``= <> < <= > >=``, ``IS [NOT] DISTINCT FROM``), arithmetic
  (``+ - * / % //``), ``BETWEEN`` and ``IN`` lists between operands whose types cannot meet, e.g.
  ``ts = 5``, ``ts > 'abc'``, ``v + 1`` (v VARCHAR), ``'abc' + 1``.  Raises :class:`BindError`.
* :func:`nondeterministic_call`: ``random()``, ``now()``, ``CURRENT_TIMESTAMP``, ...: a view over
  them would see a different value when a row is deleted than when it was inserted.

Types are inferred here, conservatively and without sqlglot's ``annotate_types`` (which types
``date - date`` as DATE, for one): from the column types, literals, CASTs, arithmetic by the rules
below and a few functions whose result type is certain.  Anything else has an unknown type and is
never rejected.

>>> from sqlglot import parse_one
>>> from .types import SqlType
>>> def check(sql, *types):
...     try:
...         check_types(parse_one(sql, read="duckdb"), [SqlType(t) for t in types], sql)
...         return "ok"
...     except BindError as e:
...         return e.message
>>> check("c0 = 5", "TIMESTAMP")
'cannot compare TIMESTAMP with INTEGER'
>>> check("c0 < '2024-01-01' AND c0 - INTERVAL 1 DAY > c1", "TIMESTAMP", "DATE")
'ok'
>>> check("c0 > 'abc'", "TIMESTAMP")
"cannot compare TIMESTAMP with 'abc': the string is not a valid TIMESTAMP"
>>> check("(c0 - c0) / 7 + 1 > 2.5", "DATE")
'ok'
>>> check("c0 + 1", "VARCHAR")
'cannot apply + to VARCHAR and INTEGER'
>>> check("'abc' + c0", "DECIMAL(10, 2)")
"cannot apply + to 'abc' and DECIMAL(10, 2): the string is not a number"
>>> check("c0 IN (1, 'x')", "INT")
"cannot compare INTEGER with 'x': the string is not a valid INTEGER"
>>> check("upper_fn(c0) = 1 AND c1 = NULL", "VARCHAR", "DATE")
'ok'
"""
from __future__ import annotations

import re
from typing import List, Optional, Sequence, Tuple

from sqlglot import exp

from .errors import BindError
from .types import SqlType, is_nested

T = exp.DataType.Type

# Type classes.  A value: (class, display name, string literal text or None).
NUM, TEXT, DATE, TS, TIME, INTERVAL, BOOL, NULL = "num", "text", "date", "timestamp", "time", "interval", "bool", "null"
NESTED = "nested"   # a LIST, MAP or STRUCT column: compares with another nested value (or text, which DuckDB parses)
DOC = "json"        # a JSON (VARIANT) document: compares with another, or with text (DuckDB would cast it to any type)
TEMPORAL = (DATE, TS, TIME)
Typed = Tuple[Optional[str], str, Optional[str]]
UNKNOWN_T: Typed = (None, "UNKNOWN", None)

_BASE_CLASS = {"TINYINT": NUM, "SMALLINT": NUM, "INT": NUM, "BIGINT": NUM, "DECIMAL": NUM, "REAL": NUM, "DOUBLE": NUM,
               "VARCHAR": TEXT, "DATE": DATE, "TIMESTAMP": TS, "BOOLEAN": BOOL, "TIME": TIME, "JSON": DOC,
               "INTERVAL": INTERVAL}
_DISPLAY = {NUM: "NUMERIC", TEXT: "VARCHAR", DATE: "DATE", TS: "TIMESTAMP", TIME: "TIME", INTERVAL: "INTERVAL",
            BOOL: "BOOLEAN", NULL: "NULL", NESTED: "a nested value", DOC: "JSON"}

COMPARISONS = (exp.EQ, exp.NEQ, exp.LT, exp.LTE, exp.GT, exp.GTE, exp.NullSafeEQ, exp.NullSafeNEQ)
ARITHMETIC = {exp.Add: "+", exp.Sub: "-", exp.Mul: "*", exp.Div: "/", exp.Mod: "%", exp.IntDiv: "//"}

# functions whose result class is certain (in DuckDB) whatever sqlglot's annotation says
_TEXT_FUNCS = (exp.Upper, exp.Lower, exp.Substring, exp.Trim, exp.Concat, exp.DPipe, exp.Replace, exp.Initcap)
_NUM_FUNCS = (exp.Length, exp.Extract, exp.Count, exp.DateDiff, exp.Year, exp.Month, exp.Day, exp.Quarter,
              exp.Week, exp.DayOfWeek, exp.DayOfMonth, exp.DayOfYear, exp.Hour, exp.Minute, exp.Second)
_SAME_AS_ARG = (exp.Abs, exp.Round, exp.Floor, exp.Ceil, exp.Neg, exp.Sum, exp.Avg)   # numeric argument -> numeric
_COMMON_OF_ARGS = (exp.Coalesce, exp.Greatest, exp.Least, exp.Min, exp.Max, exp.Nullif)
_PREDICATES = (exp.Predicate, exp.And, exp.Or, exp.Not, exp.Boolean)


def _start(node: exp.Expression) -> Optional[int]:
    """Character offset of the earliest token under ``node`` (as ``bind.position_of``)."""
    best = None
    for n in node.walk():
        meta = getattr(n, "_meta", None)
        if meta and "start" in meta and (best is None or meta["start"] < best):
            best = meta["start"]
    return best


def keep_position(new: exp.Expression, old: exp.Expression) -> exp.Expression:
    """``new`` (replacing ``old`` in a bound expression) carrying ``old``'s position, for error messages."""
    pos = _start(old)
    if pos is not None and new is not old:
        new.meta["start"] = pos
    return new


def type_name(t: SqlType) -> str:
    return "INTEGER" if t.sql == "INT" else t.sql


def _datatype(dt: exp.DataType) -> Typed:
    """Class and display name of a CAST target type."""
    name = dt.sql(dialect="duckdb").upper()
    if dt.this in exp.DataType.NUMERIC_TYPES:
        return NUM, "INTEGER" if dt.this == T.INT else name, None
    if dt.this in exp.DataType.TEXT_TYPES:
        return TEXT, "VARCHAR", None
    if dt.this in (T.DATE, T.DATE32):
        return DATE, "DATE", None
    if dt.this in (T.TIME, T.TIMETZ):
        return TIME, name, None
    if dt.this in exp.DataType.TEMPORAL_TYPES:
        return TS, "TIMESTAMP", None
    if dt.this == T.INTERVAL:
        return INTERVAL, "INTERVAL", None
    if dt.this == T.BOOLEAN:
        return BOOL, "BOOLEAN", None
    return UNKNOWN_T


# ------------------------------------------------------------------ string literals castable to a class
_NUMBER = re.compile(r"^\s*([+-]?(\d[\d_]*(\.\d*)?|\.\d+)([eE][+-]?\d+)?|[+-]?(nan|inf|infinity)|0x[0-9a-f]+)\s*$",
                     re.I)
_DATE = r"\d{1,7}-\d{1,2}-\d{1,2}"
_TIME = r"\d{1,2}:\d{1,2}(:\d{1,2}(\.\d*)?)?"
_ZONE = r"(\s*(z|utc|[+-]\d{1,2}(:?\d{2})?|[a-z_]+/[a-z_]+))?"
_TEMPORAL = re.compile(rf"^\s*-?({_DATE}([ t]{_TIME}{_ZONE})?(\s*\(?bc\)?)?|epoch|infinity|today|now)\s*$",
                       re.I)
_TIME_ONLY = re.compile(rf"^\s*{_TIME}{_ZONE}\s*$", re.I)
_BOOL_WORDS = {"true", "false", "t", "f", "1", "0", "yes", "no", "y", "n", "on", "off"}
_INTERVAL = re.compile(r"\d")   # DuckDB reads '12' as 12 seconds, '1 day', '01:00:00', '1 year 2 months', ...


def castable(text: str, cls: str) -> bool:
    """Whether the string literal ``text`` converts to a value of type class ``cls`` (leniently: a
    string DuckDB might reject can pass, one that passes here is well formed).

    >>> castable("2024-01-01", TS), castable("abc", TS), castable(" 1e3 ", NUM), castable("yes", BOOL)
    (True, False, True, True)
    """
    if cls in (TEXT, NESTED):
        return True
    if cls == NUM:
        return bool(_NUMBER.match(text))
    if cls in (DATE, TS):
        return bool(_TEMPORAL.match(text))
    if cls == TIME:
        return bool(_TIME_ONLY.match(text) or _TEMPORAL.match(text))
    if cls == BOOL:
        return text.strip().lower() in _BOOL_WORDS
    if cls == INTERVAL:
        return bool(_INTERVAL.search(text))
    return True


def _folded(n: exp.Expression) -> bool:
    """Is ``n`` under a minus sign (through parentheses)?  DuckDB folds ``-<constant>`` when it binds."""
    p = n.parent
    while isinstance(p, exp.Paren):
        p = p.parent
    return isinstance(p, exp.Neg)


def _constant_failure(n: exp.Expression) -> Optional[str]:
    """DuckDB's error for the constant expression ``n`` (no column in it), or None if it evaluates."""
    import duckdb
    try:
        duckdb.sql(f"SELECT {n.sql(dialect='duckdb')}").fetchall()
        return None
    except duckdb.Error as e:
        return str(e).splitlines()[0]


_NOT_INTEGRAL = re.compile(r"^\s*[+-]?(nan|inf|infinity)\s*$", re.I)


def _literal_casts(text: str, cls: str, to: exp.DataType) -> bool:
    """Whether ``CAST('<text>' AS <to>)`` can succeed (:func:`castable`; and NaN or infinity is no integer).

    >>> _literal_casts("nan", NUM, exp.DataType.build("BIGINT")), _literal_casts("nan", NUM, exp.DataType.build("DOUBLE"))
    (False, True)
    """
    if not castable(text, cls):
        return False
    return not (to.this in exp.DataType.INTEGER_TYPES and _NOT_INTEGRAL.match(text))


# ------------------------------------------------------------------ inference
def _arith_result(op: str, a: str, b: str) -> Optional[str]:
    """Result class of ``a op b`` for two known, non-NULL classes; None if the operator does not apply."""
    if a == NUM and b == NUM:
        return NUM
    if op == "+":
        if a == b == NESTED:   # DuckDB concatenates lists with +
            return NESTED
        if {a, b} == {DATE, NUM}:
            return DATE
        if a in TEMPORAL and b == INTERVAL or a == INTERVAL and b in TEMPORAL:
            return TIME if TIME in (a, b) else TS
        if a == b == INTERVAL:
            return INTERVAL
        if {a, b} == {DATE, TIME}:
            return TS
        return None
    if op == "-":
        if a == DATE and b == NUM:
            return DATE
        if a in TEMPORAL and b == INTERVAL:
            return TIME if a == TIME else TS
        if a == b == INTERVAL:
            return INTERVAL
        if a in TEMPORAL and b in TEMPORAL:
            return NUM if a == b == DATE else INTERVAL
        return None
    if op == "*" and {a, b} == {INTERVAL, NUM}:
        return INTERVAL
    if op == "/" and a == INTERVAL and b == NUM:
        return INTERVAL
    return None


def _literal_classes(text: str) -> List[str]:
    """The classes a string literal can stand for in arithmetic (never text)."""
    return [c for c in (NUM, DATE, TS, INTERVAL) if castable(text, c)]


def _comparable(a: str, b: str) -> bool:
    return a == b or (a in TEMPORAL and b in TEMPORAL and TIME not in (a, b)) or {a, b} == {NUM, BOOL} or \
        {a, b} == {DOC, TEXT}


class _Checker:
    def __init__(self, types: Sequence[SqlType], sql: Optional[str]):
        self.types = types
        self.sql = sql
        self.memo: dict = {}

    def infer(self, n: exp.Expression) -> Typed:
        """(class, display name, string literal text or None) of ``n``, checking everything under it."""
        key = id(n)
        if key not in self.memo:
            self.memo[key] = (n, self.infer_new(n))   # keeps n alive: ids stay unique
        return self.memo[key][1]

    def error(self, msg: str, node: exp.Expression) -> BindError:
        at = node
        while at is not None and _start(at) is None:   # a node without tokens of its own: its parent's position
            at = at.parent
        return BindError(msg, sql=self.sql, offset=_start(at if at is not None else node))

    def infer_new(self, n: exp.Expression) -> Typed:
        if isinstance(n, exp.Paren):
            return self.infer(n.this)
        if isinstance(n, exp.Column):
            m = re.fullmatch(r"c(\d+)", n.name)
            if m and int(m.group(1)) < len(self.types):
                t = self.types[int(m.group(1))]
                cls = type_class(t)
                return (cls, type_name(t), None) if cls else UNKNOWN_T
            return UNKNOWN_T
        if isinstance(n, exp.Null):
            return NULL, "NULL", None
        if isinstance(n, exp.Literal):
            if n.is_string:
                return TEXT, f"'{n.this}'", n.this
            return NUM, "INTEGER" if re.fullmatch(r"\d+", n.this) else "DECIMAL", None
        if isinstance(n, exp.Interval):
            return INTERVAL, "INTERVAL", None
        if isinstance(n, (exp.Cast, exp.TryCast)) and isinstance(n.args.get("to"), exp.DataType):
            self.check(n.this)
            to = _datatype(n.args["to"])
            if n.meta.get("implicit"):   # a function's argument, converted to its parameter's type
                self.implicit(n.this, to, n)
                return to
            if type(n) is exp.Cast and isinstance(n.this, exp.Literal) and n.this.is_string and \
                    _folded(n) and not _literal_casts(n.this.this, to[0], n.args["to"]):
                # a CAST of a constant that cannot succeed under a minus sign: DuckDB folds it when it binds the
                # view and rejects the view (elsewhere such a CAST fails each row at run time: row errors here)
                raise self.error(f"cannot CAST {n.this.this!r} to {to[1]}: the string is not a valid {to[1]}", n)
            if type(n) is exp.Cast and _folded(n) and not isinstance(n.this, exp.Literal) and \
                    not list(n.find_all(exp.Column)):
                failure = _constant_failure(n)   # CAST(CAST('nan' AS DOUBLE) AS BIGINT) under a minus: folded too
                if failure:
                    raise self.error(f"cannot CAST {n.this.sql(dialect='duckdb')} to {to[1]}: {failure}", n)
            return to
        for cls, op in ARITHMETIC.items():
            if type(n) is cls:
                return self.arithmetic(n, op)
        if isinstance(n, COMPARISONS):
            self.compare(n, n.this, n.expression)
            return BOOL, "BOOLEAN", None
        if isinstance(n, exp.Between):
            self.compare(n.args.get("low"), n.this, n.args.get("low"))
            self.compare(n.args.get("high"), n.this, n.args.get("high"))
            return BOOL, "BOOLEAN", None
        if isinstance(n, exp.In) and not n.args.get("query"):
            for item in n.expressions:
                self.compare(item, n.this, item)
            return BOOL, "BOOLEAN", None
        # everything else: check the children, then the few result types that are certain
        kids = {id(c): self.infer(c) for c in _children(n)}
        untyped = _untyped_temporal_operand(n)
        if untyped is not None:
            raise self.error(f"{untyped} of an untyped NULL: DuckDB cannot tell a DATE from a TIMESTAMP or a TIME "
                             f"there (write CAST(NULL AS DATE))", n)
        if isinstance(n, _PREDICATES):
            return BOOL, "BOOLEAN", None
        if isinstance(n, _TEXT_FUNCS):
            return TEXT, "VARCHAR", None
        if isinstance(n, _NUM_FUNCS):
            return NUM, "NUMERIC", None
        if isinstance(n, exp.Neg) and isinstance(n.this, exp.Expression):
            t = kids.get(id(n.this), UNKNOWN_T)
            if t[0] in (TEXT, BOOL) or t[2] is not None:   # DuckDB has no -VARCHAR, not even of '5'
                raise self.error(f"cannot negate {t[1] if t[2] is None else repr(t[2])}: write a number, or "
                                 f"CAST the text to one", n)
        if isinstance(n, _SAME_AS_ARG) and isinstance(n.this, exp.Expression):
            t = kids.get(id(n.this), UNKNOWN_T)
            return (NUM, t[1], None) if t[0] == NUM else UNKNOWN_T
        if isinstance(n, (exp.TimestampTrunc, exp.DateTrunc)) and isinstance(n.this, exp.Expression):
            t = kids.get(id(n.this), UNKNOWN_T)
            return (TS, "TIMESTAMP", None) if t[0] == TS else UNKNOWN_T
        if isinstance(n, _COMMON_OF_ARGS) or isinstance(n, exp.Case):
            values = [n.this] + list(n.expressions) if not isinstance(n, exp.Case) else \
                [i.args.get("true") for i in n.args.get("ifs") or []] + [n.args.get("default")]
            ts = [self.infer(v) for v in values if isinstance(v, exp.Expression)]
            classes = {t[0] for t in ts if t[0] != NULL}
            if len(classes) == 1 and None not in classes and all(t[2] is None for t in ts):
                cls = classes.pop()
                names = {t[1] for t in ts if t[0] == cls}
                return cls, names.pop() if len(names) == 1 else _DISPLAY[cls], None
        return UNKNOWN_T

    def check(self, n: exp.Expression) -> None:
        self.infer(n)

    def implicit(self, arg: exp.Expression, to: Typed, node: exp.Expression) -> None:
        """Reject an argument that DuckDB would not convert implicitly to its parameter's type (it converts
        NULL, string literals that parse, DATE to TIMESTAMP and numbers to wider numbers)."""
        t = self.infer(arg)
        if t[0] is None or to[0] is None or t[0] == NULL:
            return
        if t[2] is not None:
            if not castable(t[2], to[0]):
                raise self.error(f"cannot pass {t[1]} as {to[1]}: the string is not a valid {to[1]}", node)
            return
        while isinstance(arg, exp.Paren):
            arg = arg.this
        ok = t[0] == to[0] or (t[0], to[0]) == (DATE, TS)
        if ok and t[0] == NUM and isinstance(arg, (exp.Column, exp.Literal, exp.Cast)):
            ok = _widens(t[1], to[1], isinstance(arg, exp.Literal))
        if not ok:
            raise self.error(f"cannot pass {t[1]} as {to[1]}: a function's argument converts implicitly only to a "
                             f"type that holds every value (write CAST to convert it)", node)

    def arithmetic(self, n: exp.Expression, op: str) -> Typed:
        a, b = self.infer(n.this), self.infer(n.expression)
        if a[0] is None or b[0] is None:
            return UNKNOWN_T
        if NULL in (a[0], b[0]):
            other = b if a[0] == NULL else a
            return (other[0], other[1], None) if other[0] not in (TEXT, NULL) else UNKNOWN_T
        ca = _literal_classes(a[2]) if a[2] is not None else [a[0]]
        cb = _literal_classes(b[2]) if b[2] is not None else [b[0]]
        results = {r for x in ca for y in cb for r in [_arith_result(op, x, y)] if r is not None}
        if results == {DATE} and a[2] is None and b[2] is None and \
                any(t[0] == NUM and t[1].startswith(("DOUBLE", "REAL", "FLOAT", "DECIMAL")) for t in (a, b)):
            results = set()     # date + n needs an integer n
        if results == {DATE} and a[2] is None and b[2] is None and any(
                t[0] == NUM and t[1].startswith(("BIGINT", "HUGEINT", "INT128", "UBIGINT", "UINT")) for t in (a, b)):
            wide = a if a[0] == NUM else b
            raise self.error(f"cannot apply {op} to {a[1]} and {b[1]}: DuckDB adds an INTEGER number of days to a "
                             f"DATE, not a {wide[1]} (write CAST(... AS INTEGER))", n)
        if results:
            r = results.pop() if len(results) == 1 else None
            return (r, _DISPLAY[r], None) if r else UNKNOWN_T
        msg = f"cannot apply {op} to {a[1]} and {b[1]}"
        lit = a if a[2] is not None else b if b[2] is not None else None
        if lit is not None and not _literal_classes(lit[2]):
            msg += ": the string is not a number"
        raise self.error(msg, n)

    def compare(self, node: Optional[exp.Expression], left: exp.Expression, right: Optional[exp.Expression]) -> None:
        if node is None or right is None:
            return
        a, b = self.infer(left), self.infer(right)
        if a[0] is None or b[0] is None or NULL in (a[0], b[0]):
            return
        if a[2] is not None or b[2] is not None:    # a string literal: fine if it converts to the other side
            lit, other = (a, b) if a[2] is not None else (b, a)
            if castable(lit[2], other[0]):
                return
            raise self.error(f"cannot compare {other[1]} with {lit[1]}: the string is not a valid {other[1]}", node)
        if not _comparable(a[0], b[0]):
            hint = " (CAST one side to the other's type)" if TEXT in (a[0], b[0]) else ""
            raise self.error(f"cannot compare {a[1]} with {b[1]}{hint}", node)


# functions of a date, time or timestamp, which DuckDB cannot bind over an untyped NULL (``year(NULL)``)
_TEMPORAL_PARTS = (exp.Year, exp.Month, exp.Day, exp.Quarter, exp.Week, exp.DayOfWeek, exp.DayOfWeekIso,
                   exp.DayOfMonth, exp.DayOfYear, exp.Hour, exp.Minute, exp.Second, exp.TimestampTrunc,
                   exp.DateTrunc, exp.TimeToUnix, exp.Dayname, exp.Monthname)
_TEMPORAL_PART_NAMES = {"millisecond", "microsecond", "nanosecond", "yearweek", "isoyear", "era", "epoch_ns",
                        "epoch_us", "decade", "century", "millennium", "julian", "weekofyear", "weekday"}


def _untyped_temporal_operand(n: exp.Expression) -> Optional[str]:
    """The name of ``n`` if it is a function of a temporal value given an untyped NULL, else None."""
    def null(x) -> bool:
        while isinstance(x, exp.Paren):
            x = x.this
        return isinstance(x, exp.Null)
    if isinstance(n, exp.Extract) and null(n.expression):
        return "EXTRACT"
    if isinstance(n, exp.DateDiff) and null(n.this) and null(n.expression):
        return "date_diff"
    if isinstance(n, _TEMPORAL_PARTS) and null(n.this):
        return {"TIMESTAMP_TRUNC": "date_trunc", "DATE_TRUNC": "date_trunc", "TIME_TO_UNIX": "epoch"}.get(
            n.sql_name(), n.sql_name().lower())
    if isinstance(n, exp.Anonymous) and n.expressions:
        name = n.name.lower()
        if name in ("date_part", "datepart") and len(n.expressions) > 1 and null(n.expressions[1]):
            return name
        if name in _TEMPORAL_PART_NAMES and null(n.expressions[0]):
            return name
    return None


_INTEGER_RANK = {"TINYINT": 1, "SMALLINT": 2, "INTEGER": 3, "INT": 3, "BIGINT": 4, "HUGEINT": 5}


def _widens(source: str, target: str, literal: bool) -> bool:
    """Does DuckDB convert a number of type ``source`` to ``target`` implicitly?  Integers to wider integers,
    to DECIMAL and to floating point; DECIMAL to DECIMAL and floating point; REAL to DOUBLE.  An integer
    literal goes to any numeric type, a decimal literal to any but the integers."""
    src, dst = source.split("(")[0].strip().upper(), target.split("(")[0].strip().upper()
    floats = ("REAL", "FLOAT", "DOUBLE")
    if literal:
        return src == "INTEGER" or dst not in _INTEGER_RANK
    if src in _INTEGER_RANK:
        return dst not in _INTEGER_RANK or _INTEGER_RANK[src] <= _INTEGER_RANK[dst]
    if src == "DECIMAL":
        return dst == "DECIMAL" or dst in floats
    if src in ("REAL", "FLOAT"):
        return dst in floats
    if src == "DOUBLE":
        return dst == "DOUBLE"
    return True   # a class the rules do not know: DuckDB decides at run time


def _children(n: exp.Expression):
    for v in n.args.values():
        if isinstance(v, exp.Expression):
            yield v
        elif isinstance(v, list):
            yield from (x for x in v if isinstance(x, exp.Expression))


def _relevant(e: exp.Expression) -> bool:
    return any(isinstance(n, COMPARISONS + (exp.Between, exp.In, exp.Neg)) or type(n) in ARITHMETIC or
               (isinstance(n, exp.Cast) and n.meta.get("implicit")) or _untyped_temporal_operand(n) is not None
               for n in e.walk())


def type_class(t: SqlType) -> Optional[str]:
    """The class of a column type (None: not one of the classes above)."""
    return NESTED if is_nested(t) else _BASE_CLASS.get(t.base)


def types_meet(a: SqlType, b: SqlType) -> bool:
    """Whether values of column types ``a`` and ``b`` compare (as ``=``, a join key, or a UNION's column does):
    by the classes above; a type the checker does not know meets every other.

    >>> types_meet(SqlType("INT[]"), SqlType("INT")), types_meet(SqlType("INT"), SqlType("DECIMAL(5,2)"))
    (False, True)
    """
    ca, cb = type_class(a), type_class(b)
    return ca is None or cb is None or _comparable(ca, cb)


def check_types(e: exp.Expression, types: Sequence[SqlType], sql: Optional[str] = None) -> None:
    """Raise :class:`BindError` at the first comparison or arithmetic of ``e`` whose operand types
    cannot meet.  ``e`` is a bound expression: column ``c<i>`` has type ``types[i]``."""
    if not _relevant(e):
        return
    try:
        _Checker(types, sql).check(e)
    except BindError:
        raise
    except Exception:   # pragma: no cover - a gap in the checker must not reject a program
        return


def value_class(e: exp.Expression, types: Sequence[SqlType]) -> Optional[str]:
    """The type class (``NUM``, ``INTERVAL``, ``TIME``, ...) of ``e`` by the rules above, None if unknown.

    >>> from sqlglot import parse_one
    >>> value_class(parse_one("c0 - c0"), [SqlType("TIMESTAMP")]), value_class(parse_one("c0 - 1"), [SqlType("DATE")])
    ('interval', 'date')
    """
    try:
        return _Checker(types, None).infer(e)[0]
    except Exception:   # a type error (reported by check_types) or a gap in the checker: no class
        return None


# ------------------------------------------------------------------ non-deterministic functions
NONDETERMINISTIC_CLASSES = (exp.Rand, exp.Randn, exp.Randstr, exp.Uuid, exp.CurrentTimestamp, exp.CurrentDate,
                            exp.CurrentTime, exp.CurrentDatetime, exp.CurrentTimestampLTZ, exp.Localtimestamp,
                            exp.Localtime)
NONDETERMINISTIC_NAMES = {"random", "rand", "uuid", "gen_random_uuid", "now", "current_timestamp", "current_date",
                          "current_time", "localtimestamp", "localtime", "transaction_timestamp",
                          "get_current_timestamp", "get_current_time", "current_localtimestamp", "setseed",
                          "nextval", "currval", "today", "statement_timestamp", "clock_timestamp",
                          "uuidv4", "uuidv7", "random_uuid"}
# SQL keywords that call a function without parentheses (sqlglot keeps no position for them)
NONDETERMINISTIC_KEYWORDS = {"CURRENT_TIMESTAMP", "CURRENT_DATE", "CURRENT_TIME", "LOCALTIMESTAMP", "LOCALTIME"}


def nondeterministic_call(tree: exp.Expression, sql: str, tokens: Sequence = ()) -> Optional[Tuple[str, Optional[int]]]:
    """(name as written, offset) of the first call of a non-deterministic function in ``tree``, or None.
    ``tokens``: the statement's sqlglot tokens, to place the keyword forms (``CURRENT_DATE``)."""
    found: List[Tuple[int, str]] = []
    unplaced = False
    for n in tree.walk():
        if isinstance(n, exp.Anonymous) and n.name.lower() in NONDETERMINISTIC_NAMES or \
                isinstance(n, NONDETERMINISTIC_CLASSES):
            meta = getattr(n, "_meta", None)
            if meta and "start" in meta:
                name = sql[meta["start"]:meta["end"] + 1] if "end" in meta else n.sql(dialect="duckdb")
                found.append((meta["start"], name + "()"))
            else:
                unplaced = True
                found.append((-1, n.sql(dialect="duckdb").split("(")[0].lower()))
    if not found:
        return None
    placed = [f for f in found if f[0] >= 0]
    if unplaced:
        placed += [(t.start, t.text) for t in tokens
                   if t.text.upper() in NONDETERMINISTIC_KEYWORDS and t.token_type.name not in ("STRING", "IDENTIFIER")]
    if not placed:
        return found[0][1], None
    pos, name = min(placed)
    return name, pos
