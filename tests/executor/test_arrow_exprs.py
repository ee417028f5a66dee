"""The Arrow evaluation of simple filters and projections (sqlengine.executor.arrow_exprs) against DuckDB's: random
tables (NULLs, NaN, infinities, -0.0, integer limits, empty text, dates) and random predicates and expressions of
the forms it takes and of some it does not (which must give None, not a different answer).  Rows compared as
bags with exact multiplicities, values bit for bit (every NaN one value)."""
import datetime as dt
import math
import random
import struct
from collections import Counter

import duckdb
import pyarrow as pa
import pytest

from sqlengine.executor import arrow_exprs

INTS = [None, 0, 1, -1, 7, 2 ** 31 - 1, -2 ** 31, 2 ** 62, -2 ** 63]
FLOATS = [None, 0.0, -0.0, 0.5, -0.5, 0.1, 1e308, -1e308, float("inf"), float("-inf"), float("nan"), 3.0]
TEXTS = [None, "", "a", "b", "BUILDING", "é", "a\x00"]
DATES = [None, dt.date(1995, 3, 15), dt.date(1995, 3, 14), dt.date(2024, 2, 29), dt.date(1, 1, 1)]
BOOLS = [None, True, False]
CONSTS = {"int": ["0", "1", "-1", "7", "2147483647", "-9223372036854775808", "9223372036854775807", "3000000000"],
          "float": ["0.5", "0", "-0.5", "1", "0.1", "0.30000000000000004", "1e3", "-0.0"],
          "text": ["''", "'a'", "'BUILDING'", "'é'"],
          "date": ["CAST('1995-03-15' AS DATE)", "CAST('2024-02-29' AS DATE)"],
          "bool": ["TRUE", "FALSE"]}
COLUMNS = [("c0", "int", pa.int64(), INTS), ("c1", "int", pa.int32(), [v if v is None or abs(v) < 2 ** 31 else 5
                                                                        for v in INTS]),
           ("c2", "float", pa.float64(), FLOATS), ("c3", "text", pa.string(), TEXTS),
           ("c4", "date", pa.date32(), DATES), ("c5", "bool", pa.bool_(), BOOLS),
           ("c6", "float", pa.float32(), FLOATS)]


def table(rng: random.Random, n: int) -> pa.Table:
    cols = {name: pa.array([rng.choice(values) for _ in range(n)], ty) for name, _, ty, values in COLUMNS}
    cols["__w"] = pa.array([rng.choice([1, 1, 2, -1]) for _ in range(n)], pa.int64())
    return pa.table(cols)


def predicate(rng: random.Random, depth: int = 0) -> str:
    r = rng.random()
    if depth < 2 and r < 0.3:
        op = rng.choice(["AND", "OR"])
        return f"({predicate(rng, depth + 1)} {op} {predicate(rng, depth + 1)})"
    if depth < 2 and r < 0.4:
        return f"NOT ({predicate(rng, depth + 1)})"
    name, kind, _, _ = rng.choice(COLUMNS)
    if r < 0.5:
        return f"{name} IS NULL" if rng.random() < 0.5 else f"NOT {name} IS NULL"
    if kind == "bool" and r < 0.6:
        return name
    const = rng.choice(CONSTS[kind] if rng.random() < 0.9 else CONSTS[rng.choice(list(CONSTS))])
    op = rng.choice(["=", "<>", "<", "<=", ">", ">="])
    return f"{name} {op} {const}" if rng.random() < 0.7 else f"{const} {op} {name}"


def expression(rng: random.Random, depth: int = 0) -> str:
    if depth < 3 and rng.random() < 0.6:
        return f"({expression(rng, depth + 1)} {rng.choice(['+', '-', '*'])} {expression(rng, depth + 1)})"
    if rng.random() < 0.6:
        return rng.choice(["c2", "c2", "c0", "c6"])
    return rng.choice(["1", "0.5", "-2", "0.1", "1e300", "3"])


def bits(v):
    if isinstance(v, list):
        return tuple(bits(x) for x in v)
    if isinstance(v, dict):
        return tuple((k, bits(x)) for k, x in v.items())
    if isinstance(v, float):
        return "nan" if math.isnan(v) else struct.pack("<d", v)
    return v


def rows(t: pa.Table) -> Counter:
    return Counter(tuple(bits(v) for v in r.values()) for r in t.to_pylist())


@pytest.mark.parametrize("seed", range(8))
def test_filters_and_projections_in_arrow_are_duckdbs(seed):
    rng = random.Random(seed)
    con = duckdb.connect()
    taken = 0
    for _ in range(60):
        t = table(rng, rng.randint(0, 40))
        con.register("t", t)
        p = predicate(rng)
        got = arrow_exprs.filter_rows(p, t)
        if got is not None:
            taken += 1
            want = con.sql(f"SELECT * FROM t WHERE {p}").to_arrow_table()
            assert rows(got) == rows(want), p
        e = expression(rng)
        vals = arrow_exprs.project_values([e], t)
        if vals is not None:
            taken += 1
            want = con.sql(f"SELECT CAST(({e}) AS DOUBLE) FROM t").to_arrow_table().column(0).to_pylist()
            assert [bits(v) for v in vals[0].to_pylist()] == [bits(v) for v in want], e
        con.unregister("t")
    assert taken > 40   # (most of the generated forms are ones the module takes)


# ---------------------------------------------------------------- UNNEST and ROW fields (sqlengine.executor.ops.map)
ITEM = pa.struct([("sku", pa.string()), ("qty", pa.int32())])
LISTS = [None, [], [1], [None], [1, None, 3], [2, 2]]
ITEM_LISTS = [None, [], [None], [{"sku": "a", "qty": 1}], [{"sku": None, "qty": 2}, {"sku": "b", "qty": None}]]


@pytest.mark.parametrize("seed", range(6))
def test_unnest_in_arrow_is_the_rule(seed):
    """``map.unnest_rows`` against ``delta_rules.unnest_sql`` run by DuckDB: NULL and empty arrays, NULL elements
    (and NULL ROWs), ROW fields as columns, WITH ORDINALITY, outer (LEFT JOIN UNNEST); arrays sliced from a
    bigger one (offsets not from 0)."""
    from planner.logical import Expr, Field, Scan, Unnest
    from planner.types import SqlType
    from sqlengine.executor import delta_rules
    from sqlengine.executor.ops.map import unnest_rows
    rng = random.Random(seed)
    con = duckdb.connect()
    for structs in (False, True):
        t = SqlType("STRUCT(sku VARCHAR, qty INT)[]" if structs else "INT[]")
        scan = Scan("t", (Field("id", SqlType("INT")), Field("a", t)))
        for ordinality in (False, True):
            for outer in (False, True):
                names = ("sku", "qty") if structs else ("x",)
                types = (SqlType("VARCHAR"), SqlType("INT")) if structs else (SqlType("INT"),)
                node = Unnest(scan, Expr("c1", t), names + (("n",) if ordinality else ()),
                              types + ((SqlType("BIGINT"),) if ordinality else ()),
                              fields_of=names if structs else (), ordinality=ordinality, outer=outer)
                n = rng.randint(1, 12)
                values = [rng.choice(ITEM_LISTS if structs else LISTS) for _ in range(n + 3)]
                d = pa.table({"c0": pa.array(range(n + 3), pa.int32()),
                              "c1": pa.array(values, pa.list_(ITEM if structs else pa.int32())),
                              "__w": pa.array([rng.choice([1, -1, 2]) for _ in range(n + 3)], pa.int64())
                              }).slice(2, n)
                got = unnest_rows(node, d)
                assert got is not None
                want = con.sql(delta_rules.unnest_sql(node).replace(" FROM D)", " FROM d)")).to_arrow_table()
                assert rows(got) == rows(want.rename_columns(got.column_names)), (structs, ordinality, outer)


def test_a_row_field_in_arrow_is_duckdbs():
    t = pa.table({"c0": pa.array([{"sku": "a", "qty": 1}, None, {"sku": None, "qty": None}], ITEM)})
    got = arrow_exprs.project_values(["__duckdb(CAST(STRUCT_EXTRACT(c0, 'qty') AS INT))"], t)
    assert got[0].to_pylist() == [1, None, None]
    assert arrow_exprs.project_values(["__duckdb(CAST(STRUCT_EXTRACT(c0, 'qty') AS BIGINT))"], t) is None
