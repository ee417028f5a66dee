"""A user's Python function as both executors call it over Arrow batches (``sqlengine.udf``).

Only pyarrow is imported here, and Spark pickles this module by value (:func:`register_spark`), so a
cluster's executors need neither this package nor the user's module: the function travels by value too.

>>> import pyarrow as pa
>>> call = batch_call(lambda x: None if x is None else x * 2, False, "twice", "BIGINT", pa.int64())
>>> call(pa.array([1, None, 3], pa.int32())).to_pylist()
[2, None, 6]
>>> batch_call(lambda x: x.cast(pa.string()), True, "f", "BIGINT", pa.int64())(pa.array([1]))
Traceback (most recent call last):
...
TypeError: function f returned string where it is declared BIGINT
"""
from __future__ import annotations

import sys
import warnings
from typing import Callable

import pyarrow as pa


def plain(a) -> pa.Array:
    """An argument as the function sees it on either executor: one chunk, naive UTC microsecond timestamps,
    ``string`` for text."""
    if isinstance(a, pa.ChunkedArray):
        a = a.combine_chunks()
    t = a.type
    if pa.types.is_timestamp(t) and (t.tz is not None or t.unit != "us"):
        return a.cast(pa.timestamp("us"))
    if pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return a.cast(pa.string())
    return a


def _kind(t: pa.DataType) -> str:
    if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t):
        return "number"
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return "text"
    if pa.types.is_timestamp(t):
        return "timestamp"
    return str(t)


def _as_array(values: list, want: pa.DataType, name: str, returns: str) -> pa.Array:
    """A function's Python results as an array of the declared type (TypeError naming it where they are not)."""
    try:
        return pa.array(values, type=want)
    except (pa.ArrowException, TypeError, ValueError) as e:
        raise TypeError(f"function {name} returned values that are not {returns}: {e}") from None


def batch_call(fn: Callable, vectorized: bool, name: str, returns: str, want: pa.DataType) -> Callable:
    """``fn`` over one batch of Arrow arguments (one array per argument), its result checked and cast to
    ``want`` (the Arrow type of the declared SQL type ``returns``): a number where a number is declared is
    cast when no value changes; anything else raises."""
    def call(*args) -> pa.Array:
        args = [plain(a) for a in args]
        if vectorized:
            out = fn(*args)
        else:
            rows = zip(*[a.to_pylist() for a in args]) if args else [()]
            out = [fn(*row) for row in rows]
        if isinstance(out, pa.ChunkedArray):
            out = out.combine_chunks()
        if not isinstance(out, pa.Array):
            out = _as_array(out, want, name, returns)
        n = len(args[0]) if args else len(out)
        if len(out) != n:
            raise ValueError(f"function {name} returned {len(out)} values for {n} rows")
        if out.type != want:
            if not pa.types.is_null(out.type) and _kind(out.type) != _kind(want):
                raise TypeError(f"function {name} returned {out.type} where it is declared {returns}")
            try:
                out = out.cast(want, safe=True)
            except pa.ArrowException as e:
                raise TypeError(f"function {name} returned a value that is not {returns}: {e}") from None
        return out
    return call


def _group_rows(lists: pa.Array) -> list:
    """Per element of a LIST of ROWs (one per group): its rows as tuples, the NULL ones (rows left out by the
    call's FILTER) dropped.  Struct fields are read by position (DuckDB's ROW has unnamed fields)."""
    if isinstance(lists, pa.ChunkedArray):
        lists = lists.combine_chunks()
    if pa.types.is_null(lists.type):   # f(NULL): the value over no rows (planner.bind_subquery.empty_value)
        return [[] for _ in range(len(lists))]
    structs = lists.values
    fields = [plain(structs.field(i)).to_pylist() for i in range(structs.type.num_fields)]
    valid = structs.is_valid().to_pylist()
    rows = list(zip(*fields))
    offsets = lists.offsets.to_pylist()
    groups = lists.is_valid().to_pylist()
    return [[rows[i] for i in range(offsets[g], offsets[g + 1]) if valid[i]] if groups[g] else []
            for g in range(len(lists))]


def aggregate_call(make: Callable, name: str, returns: str, want: pa.DataType) -> Callable:
    """A user's aggregate (``make()``: an object with ``create()``, ``accumulate(acc, *args)`` and ``finish(acc)``)
    over a LIST of ROWs per group: one result per group, checked as :func:`batch_call` checks a function's."""
    def groups(lists: pa.Array) -> list:
        agg = make()
        out = []
        for rows in _group_rows(lists):
            acc = agg.create()
            for row in rows:
                new = agg.accumulate(acc, *row)
                acc = acc if new is None else new
            out.append(agg.finish(acc))
        return out
    return batch_call(groups, True, name, returns, want)


def step_call(make: Callable, name: str, returns: str, want: pa.DataType) -> Callable:
    """A user's aggregate with ``retract``, one group per row: its stored accumulator (pickled; NULL for a new
    group) and the step's rows of the group (a LIST of ROWs, the weight first), to the new accumulator and
    result (a STRUCT ``acc``, ``out``).  Inserted rows are accumulated first, then deleted ones retracted, each
    as many times as its weight says; the results are made an array of the declared type as :func:`batch_call`
    makes a function's Python results one."""
    import pickle

    def groups(accs: pa.Array, lists: pa.Array) -> list:
        from pyspark import cloudpickle   # (pickles a class defined in the user's module by value, as Spark does)
        agg = make()
        accs, out_accs, out = plain(accs).to_pylist(), [], []
        for blob, rows in zip(accs, _group_rows(lists)):
            acc = agg.create() if blob is None else pickle.loads(blob)
            for w, *args in sorted(rows, key=lambda r: -r[0]):
                method = agg.accumulate if w > 0 else agg.retract
                for _ in range(abs(w)):
                    new = method(acc, *args)
                    acc = acc if new is None else new
            out_accs.append(cloudpickle.dumps(acc))
            out.append(agg.finish(acc))
        return [out_accs, out]

    def call(accs, lists) -> pa.Array:
        out_accs, out = groups(accs, lists)
        values = _as_array(out, want, name, returns)
        return pa.StructArray.from_arrays([pa.array(out_accs, pa.binary()), values], names=["acc", "out"])
    return call


def step_type(returns: str) -> str:
    """The SQL type of :func:`step_call`'s result."""
    return f"STRUCT(acc BLOB, out {returns})"


def _call(f) -> Callable:
    u = f.impl
    if f.aggregate:
        return aggregate_call(u.make, u.name, u.returns.sql, u.arrow_returns)
    return batch_call(u.fn, u.vectorized, u.name, u.returns.sql, u.arrow_returns)


def _steps(functions) -> dict:
    """The step functions of the aggregates with ``retract``, by SQL name, with their result's SQL and Arrow
    types."""
    from planner.aggregate_functions import step_function
    return {step_function(name): (step_call(f.impl.make, f.impl.name, f.returns.sql, f.impl.arrow_returns),
                                  step_type(f.returns.sql),
                                  pa.struct([("acc", pa.binary()), ("out", f.impl.arrow_returns)]))
            for name, f in functions.items() if f.aggregate and f.retracts}


def register_duckdb(con, functions) -> None:
    """Register the Python functions (``planner.user_functions.UserFunction`` with ``impl``) on a DuckDB
    connection: Arrow batches in and out, NULLs passed to the function, errors raised (a row error)."""
    if not functions:
        return
    import duckdb
    from duckdb.func import ARROW, SPECIAL
    for name, f in functions.items():
        con.create_function(name, _call(f), None, f.returns.sql, type=ARROW, null_handling=SPECIAL,
                            exception_handling=duckdb.PythonExceptionHandling.DEFAULT, side_effects=False)
    for name, (call, returns, _) in _steps(functions).items():
        con.create_function(name, call, None, returns, type=ARROW, null_handling=SPECIAL,
                            exception_handling=duckdb.PythonExceptionHandling.DEFAULT, side_effects=False)


def register_spark(spark, functions) -> None:
    """Register the Python functions on a SparkSession as Arrow UDFs, pickled by value with the user's
    module (a cluster's executors need not import it)."""
    from pyspark import cloudpickle
    from pyspark.sql.functions import ArrowUDFType, arrow_udf
    from pyspark.sql.pandas.types import from_arrow_type
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    for name, f in functions.items():
        u = f.impl
        module = sys.modules.get(getattr(u.fn if not f.aggregate else u.make, "__module__", ""), None)
        if module is not None and module.__name__ != "__main__" and "-packages" not in (getattr(module, "__file__", "") or ""):
            cloudpickle.register_pickle_by_value(module)
        want = u.arrow_returns
        call = _call(f)
        with warnings.catch_warnings():   # "type hints are preferred": a function of any arity has none to give
            warnings.simplefilter("ignore", UserWarning)
            made = arrow_udf(call, from_arrow_type(want, prefer_timestamp_ntz=True), ArrowUDFType.SCALAR)
        spark.udf.register(name, made)
    for name, (call, _, want) in _steps(functions).items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            made = arrow_udf(call, from_arrow_type(want, prefer_timestamp_ntz=True), ArrowUDFType.SCALAR)
        spark.udf.register(name, made)
