"""The oracle's bag comparison (tests/support/oracle.py, the one oracle of the suite, the TPC-H and Nexmark
workloads included): exact multiplicities, a float tolerance only between rows matched one to one, NULL and NaN
apart."""
import datetime as dt
import decimal
from collections import Counter

import duckdb
import pandas as pd
import pyarrow as pa

from tests.support.oracle import NAN, NULL_OR_NAN, bag, bag_from_changes, bag_of_arrow, canon, diff, to_arrow

D = decimal.Decimal


def test_a_stale_retraction_is_an_extra_row_not_absorbed_by_the_tolerance():
    # STDDEV_POP of a group retracted with a recomputed value that differs in the last bit
    emitted, recomputed = 0.8249579113843054, 0.8249579113843055
    stream = pd.DataFrame({"g": [1, 1, 1], "s": [emitted, recomputed, 0.0], "__weight": [1, -1, 1]})
    got = bag_from_changes(stream)
    assert got == Counter({(1, emitted): 1, (1, recomputed): -1, (1, 0.0): 1})
    assert "negative weights" in diff(got, bag([(1, 0.0)]))
    assert "extra rows [((1, 0.8249579113843054), 1)]" in diff(bag([(1, emitted), (1, 0.0)]), bag([(1, 0.0)]))


def test_multiplicities_are_exact():
    assert diff(bag([(1,), (1,)]), bag([(1,)])) == "extra rows [((1,), 1)] (1 in all)"
    assert diff(bag([(1.5,)]), bag([(1.5,), (1.5,)])) == "missing rows [((1.5,), 1)] (1 in all)"
    # two rows one ulp apart match two expected rows once each, never one row twice
    a, b = 1.0, 1.0000000000000002
    assert diff(bag([(a,), (b,)]), bag([(a,), (a,)])) == ""
    assert diff(bag([(a,)]), bag([(a,), (b,)])) != ""


def test_floats_match_within_relative_1e_9_after_pairing_the_other_columns():
    assert diff(bag([("x", 1.0 + 1e-12, 5), ("y", 2.0, 3)]), bag([("x", 1.0, 5), ("y", 2.0 + 1e-12, 3)])) == ""
    assert diff(bag([("x", 1.0 + 1e-6)]), bag([("x", 1.0)])) != ""
    assert diff(bag([("x", 1.0)]), bag([("y", 1.0)])) != ""   # non-float columns must be equal
    # rows whose first float differs in the last bit and whose second column decides the pairing
    assert diff(bag([(1.0, 5), (1.0 + 1e-12, 3)]), bag([(1.0 + 1e-12, 5), (1.0, 3)])) == ""
    assert diff(bag([(1e-13,)]), bag([(0.0,)])) == ""   # absolute 1e-12 near zero
    assert diff(bag([(9007199254740992.0,)]), bag([(9007199254740993,)])) == ""   # a float column read as float


def test_nan_is_a_value_equal_to_itself_and_not_null():
    assert canon(float("nan")) is NAN and diff(bag([(float("nan"),)]), bag([(float("nan"),)])) == ""
    assert diff(bag([(None,)]), bag([(float("nan"),)])) != ""
    assert diff(bag([(float("inf"),)]), bag([(float("nan"),)])) != ""
    assert diff(bag([(float("inf"),)]), bag([(float("-inf"),)])) != ""


def test_negative_zero_equals_zero_decimals_are_exact_and_timestamps_are_naive_utc():
    assert diff(bag([(-0.0,)]), bag([(0.0,)])) == ""
    assert diff(bag([(D("1.50"),)]), bag([(D("1.5"),)])) == ""
    assert diff(bag([(D("1.51"),)]), bag([(D("1.5"),)])) != ""
    assert diff(bag([(D("0.1"),)]), bag([(D("0.1000000001"),)])) != ""
    ts = pd.Timestamp("2024-01-01 10:00", tz="Europe/Paris")
    assert diff(bag([(ts,)]), bag([(pd.Timestamp("2024-01-01 09:00").to_pydatetime(),)])) == ""


def test_a_change_frame_cannot_tell_null_from_nan_in_a_float_column():
    # pandas' conversion of an Arrow column with NULLs: NULL is NaN; either matches
    frame = pd.DataFrame({"x": [float("nan")], "__weight": [1]})
    assert diff(bag_from_changes(frame), bag([(None,)])) == ""
    assert diff(bag_from_changes(frame), bag([(float("nan"),)])) == ""
    assert diff(bag_from_changes(frame), bag([(1.0,)])) != ""


def test_a_duplicated_row_is_not_hidden_by_the_tolerance():
    # one row twice against the row and a neighbour within the tolerance: the copies match one to one, so the
    # second copy must be within the tolerance of the neighbour, not absorbed by the first match
    assert diff(bag([("a", 1.0), ("a", 1.0)]), bag([("a", 1.0), ("a", 1.0 + 1e-12)])) == ""
    assert diff(bag([("a", 1.0), ("a", 1.0)]), bag([("a", 1.0), ("a", 1.0 + 1e-7)])) != ""
    assert "extra rows [(('a', 1.0), 1)]" in diff(bag([("a", 1.0), ("a", 1.0)]), bag([("a", 1.0 + 1e-12)]))
    assert "missing rows" in diff(bag([("a", 1.0 + 1e-12)]), bag([("a", 1.0), ("a", 1.0)]))


def test_float_values_within_the_tolerance_pass_after_a_one_to_one_match():
    # the workloads' shape: keys, a decimal, a date, floats; rows in another order, floats off in the last bits
    day = dt.date(1995, 3, 15)
    want = [(k, D("12.50"), day, k * 0.1, k / 3) for k in range(50)]
    got = [(k, D("12.5"), day, k * 0.1 * (1 + 1e-13), k / 3 + 1e-15) for k in reversed(range(50))]
    assert diff(bag(got), bag(want)) == ""
    got[7] = (43, D("12.5"), day, 4.3, 43 / 3)   # a row of another key, its floats close to the expected ones
    assert diff(bag(got), bag(want)) != ""


def test_decimals_and_dates_are_exact():
    assert diff(bag([(D("1.00"),)]), bag([(D("1.000001"),)])) != ""   # not within a float tolerance
    assert diff(bag([(dt.date(2024, 1, 1),)]), bag([(dt.datetime(2024, 1, 1),)])) != ""   # a DATE is no TIMESTAMP


def test_null_and_nan_are_told_apart_wherever_the_source_keeps_them_apart():
    assert canon(None) is None and canon(float("nan")) is NAN
    assert diff(bag([(None,)]), bag([(float("nan"),)])) != ""
    # DuckDB's fetchall and Arrow (the engine's query_arrow) keep them apart; pandas would not
    rows = duckdb.execute("SELECT * FROM (VALUES (1, 'NaN'::DOUBLE), (2, NULL::DOUBLE)) t(k, x)").fetchall()
    assert bag(rows) == Counter({(1, NAN): 1, (2, None): 1})
    table = pa.table({"k": [1, 2], "x": pa.array([float("nan"), None], type=pa.float64())})
    assert bag_of_arrow(table) == bag(rows)
    assert diff(bag_of_arrow(table), bag([(1, None), (2, float("nan"))])) != ""
    # back to Arrow (the workloads' tie-insensitive projection of a change stream), NaN and NULL kept
    assert bag_of_arrow(to_arrow(bag(rows), table.schema)) == bag(rows)
    # a change frame's NaN in a float column is NULL or NaN; an object column keeps them apart
    frame = pd.DataFrame({"x": [float("nan")], "s": pd.Series([None], dtype=object), "__weight": [1]})
    assert bag_from_changes(frame) == Counter({(NULL_OR_NAN, None): 1})
    assert diff(bag_from_changes(frame), bag([(None, float("nan"))])) != ""
