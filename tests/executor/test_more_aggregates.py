"""The aggregates of ``planner.aggregate_functions`` (and COUNT_IF, ANY_VALUE, EVERY), under random inserts and
deletes, each view compared with DuckDB after every step.

Each is recomputed per touched group from the group's stored rows.  Where DuckDB's result depends on the order
of the rows the engine fixes one, and the oracle's query says the same thing in DuckDB: ``ARG_MIN(a, b)`` breaks
ties in ``b`` by the least ``a``, ``ANY_VALUE(x)`` is ``MIN(x)``, ``STRING_AGG`` orders by its keys and then by the text, ``MODE`` takes the least of the most frequent.
"""
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ..support.differential import maybe, run_program, steps_strategy

SCHEMA = "CREATE TABLE t (g INT, i INT, b BIGINT, x DOUBLE, y DOUBLE, d DECIMAL(6,2), p BOOLEAN, s VARCHAR);"
COLUMNS = {"t": ["g", "i", "b", "x", "y", "d", "p", "s"]}

ROW = st.tuples(maybe(range(3)), maybe(range(-3, 4)), maybe([0, 1, 6, 12, -7, 2 ** 40]),
                maybe([0.5, -1.25, 2.0, 3.5, 10.0]), maybe([1.0, -2.5, 4.0, 0.25]),
                maybe([Decimal("1.50"), Decimal("-2.25"), Decimal("0.00")]), maybe([True, False]),
                maybe(["a", "b", "ab", ""]))


def tie_broken(func: str, a: str, b: str) -> str:
    return f"{func}({a}, CASE WHEN {b} IS NOT NULL AND {a} IS NOT NULL THEN ROW({b}, {a}) END)"


VIEWS = [
    ("v_bool", "SELECT g, BOOL_AND(p) AS ba, BOOL_OR(p) AS bo, EVERY(p) AS ev, COUNT_IF(p) AS ci, "
               "COUNT_IF(i > 0) FILTER (WHERE x > 0) AS cf FROM t GROUP BY g", True,
     "SELECT g, BOOL_AND(p) AS ba, BOOL_OR(p) AS bo, BOOL_AND(p) AS ev, COUNT_IF(p) AS ci, "   # (DuckDB: no EVERY)
     "COUNT_IF(i > 0) FILTER (WHERE x > 0) AS cf FROM t GROUP BY g"),
    ("v_bits", "SELECT g, BIT_AND(i) AS a, BIT_OR(b) AS o, BIT_XOR(i) AS x1, BIT_XOR(b) AS x2 FROM t GROUP BY g",
     True),
    ("v_pick", "SELECT g, ARG_MIN(s, i) AS amin, ARG_MAX(s, i) AS amax, MIN_BY(x, b) AS mb, MAX_BY(i, x) AS xb, "
               "ANY_VALUE(s) AS av FROM t GROUP BY g", True,
     f"SELECT g, {tie_broken('ARG_MIN', 's', 'i')} AS amin, {tie_broken('ARG_MAX', 's', 'i')} AS amax, "
     f"{tie_broken('ARG_MIN', 'x', 'b')} AS mb, {tie_broken('ARG_MAX', 'i', 'x')} AS xb, MIN(s) AS av "
     "FROM t GROUP BY g"),
    ("v_quantiles", "SELECT g, MEDIAN(i) AS m, MEDIAN(x) AS mx, QUANTILE_CONT(b, 0.25) AS q, "
                    "QUANTILE_DISC(i, 0.75) AS qd, PERCENTILE_CONT(0.9) WITHIN GROUP (ORDER BY x) AS pc, "
                    "PERCENTILE_DISC(0.5) WITHIN GROUP (ORDER BY b) AS pd FROM t GROUP BY g", True),
    ("v_stats", "SELECT g, COVAR_POP(x, y) AS cp, COVAR_SAMP(y, i) AS cs, CORR(x, y) AS c, REGR_SLOPE(y, x) AS rs, "
                "REGR_INTERCEPT(y, x) AS ri, REGR_R2(y, x) AS r2, REGR_COUNT(y, d) AS rc, REGR_AVGX(y, x) AS ax, "
                "REGR_AVGY(y, x) AS ay, REGR_SXX(y, x) AS sxx, REGR_SYY(y, x) AS syy, REGR_SXY(y, x) AS sxy "
                "FROM t GROUP BY g", True),
    ("v_strings", "SELECT g, STRING_AGG(s, ',' ORDER BY s) AS a, STRING_AGG(s, '|' ORDER BY i DESC) AS b, "
                  "LISTAGG(s, ';') WITHIN GROUP (ORDER BY x) AS c, STRING_AGG(s) AS d, "
                  "STRING_AGG(s, '+') FILTER (WHERE p) AS e FROM t GROUP BY g", True,
     "SELECT g, STRING_AGG(s, ',' ORDER BY s) AS a, STRING_AGG(s, '|' ORDER BY i DESC, s) AS b, "
     "STRING_AGG(s, ';' ORDER BY x, s) AS c, STRING_AGG(s, ',' ORDER BY s) AS d, "
     "STRING_AGG(s, '+' ORDER BY s) FILTER (WHERE p) AS e FROM t GROUP BY g"),
    ("v_mode", "SELECT g, MODE(i) AS mi, MODE(s) AS ms, MODE() WITHIN GROUP (ORDER BY x) AS mx FROM t GROUP BY g", True,
     "SELECT g, MODE() WITHIN GROUP (ORDER BY i) AS mi, MODE() WITHIN GROUP (ORDER BY s) AS ms, "
     "MODE() WITHIN GROUP (ORDER BY x) AS mx FROM t GROUP BY g"),
    ("v_global", "SELECT BOOL_OR(p) AS bo, BIT_XOR(i) AS bx, MEDIAN(x) AS m, CORR(x, y) AS c, COUNT_IF(p) AS ci "
                 "FROM t", True),
    ("v_on_top", "SELECT ci, COUNT(*) AS n FROM v_bool GROUP BY ci", False),
]


@given(steps_strategy({"t": ROW}, max_steps=4))
def test_more_aggregates(make_pipeline, steps):
    run_program(make_pipeline, SCHEMA, COLUMNS, VIEWS, steps)


@pytest.mark.parametrize("sql, message", [
    ("SELECT MEDIAN(d) FROM t", "MEDIAN takes an integer or a DOUBLE, not DECIMAL(6, 2)"),
    ("SELECT BIT_AND(x) FROM t", "BIT_AND takes an integer, not DOUBLE"),
    ("SELECT BOOL_AND(i) FROM t", "BOOL_AND takes a BOOLEAN, not INT"),
    ("SELECT QUANTILE_CONT(x, 1.5) FROM t", "the fraction of QUANTILE_CONT must be a constant between 0 and 1"),
    ("SELECT QUANTILE_CONT(x, i) FROM t", "the fraction of QUANTILE_CONT must be a constant between 0 and 1"),
    ("SELECT ARG_MIN(x, y, i) FROM t", "ARG_MIN with 3 arguments (it takes 2)"),
    ("SELECT ARRAY_AGG(DISTINCT x ORDER BY i) FROM t", "ORDER BY in ARRAY_AGG(DISTINCT x ...) other than by x"),
    ("SELECT STRING_AGG(i, ',') FROM t", "STRING_AGG takes text (cast it: CAST(x AS VARCHAR)), not INT"),
    ("SELECT STRING_AGG(s, s) FROM t", "the separator of STRING_AGG must be a constant string"),
    ("SELECT STRING_AGG(DISTINCT s, ',') FROM t", "STRING_AGG(DISTINCT ...)"),
])
def test_rejected_with_a_position(sql, message):
    from planner.errors import EngineError
    from sqlengine import Pipeline
    with pytest.raises(EngineError) as e:
        Pipeline.from_sql(SCHEMA + f"\nCREATE VIEW v AS {sql};")
    assert message in str(e.value) and "line 2" in str(e.value), str(e.value)
