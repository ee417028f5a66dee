"""Python functions called from SQL: the ``udf`` decorator, and how a function declared in SQL is found.

>>> import pyarrow as pa, pyarrow.compute as pc
>>> @udf("DOUBLE", params=["DOUBLE"])
... def half(x: pa.Array) -> pa.Array:
...     return pc.divide(x, 2.0)
>>> half.name, [t.sql for t in half.signature().types], half.signature().returns.sql
('half', ['DOUBLE'], 'DOUBLE')
>>> half.call(pa.array([1.0, None, 3.0])).to_pylist()
[0.5, None, 1.5]

A vectorised function (the default) takes one ``pyarrow.Array`` per argument and returns an array of the same
length; it must compute each row from that row alone (the executors call it on batches of any size).  With
``vectorized=False`` it takes and returns Python values, one row at a time (``None`` for NULL).  Either way
the function must be deterministic: the engine computes a row's value again when the row is deleted.

Both executors call :meth:`Udf.call`: the arguments arrive with the declared types (naive UTC timestamps in
microseconds, strings as ``string``), and the result is checked against the declared type: a number where a
number is declared is cast to it when no value changes, anything else raises (and the rows of the batch go
to the error relation, like any row whose expression fails).
"""
from __future__ import annotations

import importlib
import inspect
import sys
import types as pytypes
from typing import Callable, Dict, Iterable, List, Optional, Sequence

import pyarrow as pa

from planner.types import SqlType, contains, from_sql_type
from planner.user_functions import UserFunction
from sqlengine.errors import BindError
from sqlengine.executor.backends.python_calls import batch_call
from sqlengine.types import arrow_type


def python_type(text: str) -> SqlType:
    """The SQL type ``text`` of a Python function's parameter or result; an INTERVAL is none (the executors
    would hand the function different values: DuckDB's interval on the driver, its text on Spark)."""
    t = from_sql_type(text)
    if contains(t, "INTERVAL"):
        raise ValueError("a Python function cannot take or return an INTERVAL: pass a number, e.g. "
                         "EXTRACT(EPOCH FROM i)")
    return t


class Udf:
    """A Python function with its SQL signature (made by :func:`udf`); calling it calls the function."""

    def __init__(self, fn: Callable, returns: str, params: Optional[Sequence[str]] = None,
                 name: Optional[str] = None, vectorized: bool = True, deterministic: bool = True):
        self.fn = fn
        self.name = (name or fn.__name__).lower()
        try:
            self.returns = python_type(returns)
            self.params = None if params is None else tuple(python_type(p) for p in params)
        except ValueError as e:
            raise BindError(f"function {self.name}: {e}") from None
        self.vectorized = vectorized
        self.deterministic = deterministic
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn

    def __call__(self, *args, **kwargs):
        return self.fn(*args, **kwargs)

    @property
    def fingerprint(self) -> str:
        """A digest of the function's code and declaration: a restart with other code is a program change (the
        views that call it are computed again from their tables)."""
        return code_digest(self.fn, f"{self.returns.sql}|{self.params}|{self.vectorized}")

    def __repr__(self) -> str:
        params = "..." if self.params is None else ", ".join(t.sql for t in self.params)
        return f"<udf {self.name}({params}) RETURNS {self.returns.sql}>"

    def signature(self) -> UserFunction:
        """The function as the planner knows it."""
        n = len(self.params) if self.params is not None else len(inspect.signature(self.fn).parameters)
        return UserFunction(self.name, tuple(f"p{i}" for i in range(n)), self.params, self.returns,
                            language="PYTHON", source=f"{self.fn.__module__}:{self.fn.__qualname__}",
                            deterministic=self.deterministic, impl=self)

    @property
    def arrow_returns(self) -> pa.DataType:
        return arrow_type(self.returns)

    def call(self, *args) -> pa.Array:
        """The function over one batch of Arrow arguments, its result checked and of the declared type."""
        return batch_call(self.fn, self.vectorized, self.name, self.returns.sql, self.arrow_returns)(*args)


class Udaf:
    """A Python aggregate function with its SQL signature (made by :func:`udaf` over a class)."""

    def __init__(self, cls, returns: str, params: Sequence[str], name: Optional[str] = None):
        missing = [m for m in ("create", "accumulate", "finish") if not callable(getattr(cls, m, None))]
        self.name = (name or cls.__name__).lower()
        if missing:
            raise BindError(f"aggregate function {self.name} needs the methods create(), accumulate(acc, *args) and "
                            f"finish(acc); it has no {', '.join(missing)}")
        try:
            self.returns = python_type(returns)
            self.params = tuple(python_type(p) for p in params)
        except ValueError as e:
            raise BindError(f"aggregate function {self.name}: {e}") from None
        if not self.params:
            raise BindError(f"aggregate function {self.name} needs at least one parameter")
        self.make = cls
        self.retracts = callable(getattr(cls, "retract", None))
        self.__doc__ = cls.__doc__

    @property
    def fingerprint(self) -> str:
        return code_digest(self.make, f"{self.returns.sql}|{self.params}")

    def __repr__(self) -> str:
        return f"<udaf {self.name}({', '.join(t.sql for t in self.params)}) RETURNS {self.returns.sql}>"

    @property
    def arrow_returns(self) -> pa.DataType:
        return arrow_type(self.returns)

    def signature(self) -> UserFunction:
        return UserFunction(self.name, tuple(f"p{i}" for i in range(len(self.params))), self.params, self.returns,
                            language="PYTHON", source=f"{self.make.__module__}:{self.make.__qualname__}",
                            aggregate=True, retracts=self.retracts, impl=self)

    def aggregate(self, *columns) -> object:
        """The aggregate over rows given as one Python list per argument (for tests and the docs)."""
        agg = self.make()
        acc = agg.create()
        for row in zip(*columns):
            new = agg.accumulate(acc, *row)
            acc = acc if new is None else new
        return agg.finish(acc)


def code_digest(obj, declared: str) -> str:
    """A digest of ``obj``'s source (a function, or a class with the classes it inherits from), or of its
    compiled code where the source is not at hand, of the values its closure holds, and of ``declared``."""
    import hashlib
    parts = [c for c in obj.__mro__ if c is not object] if isinstance(obj, type) else [obj]
    text = "".join(_code_text(p) for p in parts)
    for cell in getattr(obj, "__closure__", None) or ():
        try:
            text += "|" + repr(cell.cell_contents)
        except ValueError:   # an empty cell
            pass
    return hashlib.sha1(f"{declared}|{text}".encode()).hexdigest()[:16]


def _code_text(obj) -> str:
    try:
        return inspect.getsource(obj)
    except (OSError, TypeError):
        codes = [obj.__code__] if hasattr(obj, "__code__") else \
            [v.__code__ for v in vars(obj).values() if hasattr(v, "__code__")]
        return "".join(repr((c.co_code, c.co_consts, c.co_names)) for c in codes)


def udaf(returns: str, params: Sequence[str], *, name: Optional[str] = None):
    """Declare a Python aggregate function over a class with ``create()`` (a new accumulator),
    ``accumulate(acc, *args)`` (add one row's arguments: return the new accumulator, or None having changed
    ``acc``) and ``finish(acc)`` (the result).  ``returns`` and ``params`` are SQL types.  The engine gives a
    group's rows in one fixed order, and recomputes a group that changed from its stored rows.

    With ``retract(acc, *args)`` (take one row's arguments out, as Flink's contract has it) the engine keeps
    each group's accumulator instead (pickled, beside the group's output) and updates it with the step's rows
    only: ``accumulate`` for each inserted row, then ``retract`` for each deleted one.  The result must then not
    depend on the order of the rows (the rows of a group come in the order of the steps), and the
    accumulator must pickle."""
    def wrap(cls) -> Udaf:
        return Udaf(cls, returns, params, name=name)
    return wrap


def udf(returns: str, params: Optional[Sequence[str]] = None, *, name: Optional[str] = None,
        vectorized: bool = True, deterministic: bool = True):
    """Declare a Python function callable from SQL: ``returns`` is its SQL result type; ``params`` its
    parameters' SQL types (the arguments are cast to them; None: each argument keeps its own type).
    Give the functions to ``Pipeline.from_sql(sql, udfs=[...])``, or name them in SQL with ``CREATE FUNCTION
    ... LANGUAGE PYTHON AS 'module:function'``."""
    def wrap(fn: Callable) -> Udf:
        return Udf(fn, returns, params, name=name, vectorized=vectorized, deterministic=deterministic)
    return wrap


def load_module(path: str) -> List[Udf]:
    """Import the Python file ``path`` as the module named by its file name (``udfs.py``: ``udfs``, so a
    program's ``CREATE FUNCTION ... LANGUAGE PYTHON AS 'udfs:f'`` finds ``f`` in it); returns the functions
    in it declared with :func:`udf` (``sqlengine run --udfs``, ``sqlengine serve --udfs``)."""
    import importlib.util
    import os
    name = os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None or not name.isidentifier():
        raise BindError(f"cannot load {path} as a Python module (a .py file whose name is an identifier)")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as e:   # the user's code
        del sys.modules[name]
        raise BindError(f"cannot load {path}: {type(e).__name__}: {e}") from None
    return [v for v in vars(module).values() if isinstance(v, (Udf, Udaf))]


def python_signatures(udfs: Iterable) -> Dict[str, UserFunction]:
    """The functions given to a pipeline (``Udf`` values), by name, for :func:`planner.compile_program`."""
    out: Dict[str, UserFunction] = {}
    for u in udfs or ():
        if not isinstance(u, (Udf, Udaf)):
            raise TypeError(f"{u!r} is not a function declared with @sqlengine.udf(...) or @sqlengine.udaf(...)")
        if u.name in out:
            raise BindError(f"function {u.name} is given twice")
        from planner.user_functions import is_builtin
        if is_builtin(u.name):
            raise BindError(f"function {u.name} is a built-in function: give yours another name")
        out[u.name] = u.signature()
    return out


def _load(f: UserFunction, sql: str) -> Callable:
    """The Python function a ``CREATE FUNCTION ... LANGUAGE PYTHON`` names: ``'module:function'`` imported (the
    modules of ``sqlengine run --udfs`` are importable), or inline code run in a module of its own."""
    src = f.source
    def fail(msg: str) -> BindError:
        return BindError(f"Python function {f.name}: {msg}", sql=sql, offset=f.offset)
    if "\n" not in src and ":" in src and " " not in src.strip():
        module, _, attr = src.strip().partition(":")
        try:
            obj = importlib.import_module(module)
        except Exception as e:   # the user's module: any error it raises on import
            raise fail(f"cannot import module {module}: {type(e).__name__}: {e}") from None
        for part in attr.split("."):
            obj = getattr(obj, part, None)
            if obj is None:
                raise fail(f"module {module} has no {attr}")
    else:
        mod = pytypes.ModuleType(f"sqlengine_udf_{f.name}")
        try:
            exec(compile(src, f"<function {f.name}>", "exec"), mod.__dict__)
        except Exception as e:   # the user's code
            raise fail(f"its code raises {type(e).__name__}: {e}") from None
        sys.modules[mod.__name__] = mod   # so that Spark pickles its functions by value from it
        found = [v for k, v in mod.__dict__.items() if callable(v) and not k.startswith("_")
                 and getattr(v, "__module__", None) == mod.__name__]
        named = [v for v in found if getattr(v, "__name__", "").lower() == f.name]
        if len(named) != 1 and len(found) != 1:
            raise fail(f"its code must define one function (or one named {f.name})")
        obj = (named or found)[0]
    if not callable(obj):
        raise fail(f"{src} is not a function")
    return obj


def implemented(program, sql: str) -> None:
    """Give each Python function the program declares in SQL its implementation (in place): a function made
    with :func:`udf` keeps its own ``vectorized``; a plain one is called a row at a time."""
    import dataclasses
    for name, f in list(program.functions.items()):
        if f.python and f.impl is None:
            fn = _load(f, sql)
            if isinstance(fn, Udaf):
                raise BindError(f"Python function {f.name}: {f.source} is an aggregate function; give it to the "
                                "pipeline as it is (udfs=[...], or --udfs FILE.py), without CREATE FUNCTION",
                                sql=sql, offset=f.offset)
            vectorized = isinstance(fn, Udf) and fn.vectorized
            program.functions[name] = dataclasses.replace(f, impl=Udf(
                fn.fn if isinstance(fn, Udf) else fn, f.returns.sql, [t.sql for t in f.types], name=name,
                vectorized=vectorized))


def call_function(f: UserFunction) -> Callable:
    """What the executors register for ``f``: its :meth:`Udf.call`."""
    return f.impl.call
