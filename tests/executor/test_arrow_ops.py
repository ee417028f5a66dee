"""The driver's Arrow fast paths against the delta rules they stand in for (``delta_rules``, run on DuckDB).

An accumulating aggregate's output (``agg_op.aggregate_output``) must be the consolidated difference of the
rule's ``final(old + partial) - final(old)``: the same rows with the same weights, and no row twice (users
receive it as is), over random keys with NULLs, NULL arguments, groups that appear, vanish or keep their
results, and state holding more groups than the change touches."""
import random
from collections import Counter

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from planner import compile_program
from sqlengine.executor import arrow_ops, delta_rules as rules
from sqlengine.executor.ops import aggregate as agg_op, join as join_op
from sqlengine.executor.ops import accumulators as acc
from sqlengine.executor.backends.duckdb import DuckDBBackend
from sqlengine.zset import W, consolidate_arrow

# (AVG over DOUBLE recomputes its groups: a running float sum depends on the order of steps)
SQL = ("CREATE TABLE t (k INT, v INT, x BIGINT); CREATE VIEW a AS "
       "SELECT k, COUNT(*) AS n, SUM(v) AS s, AVG(x) AS m, COUNT(v) AS c FROM t GROUP BY k")


def rows_of(t: pa.Table) -> Counter:
    return Counter(tuple(r.values()) for r in t.to_pylist())


@pytest.mark.parametrize("seed", range(6))
def test_aggregate_output_is_the_rules_consolidated_change(seed):
    rng = random.Random(seed)
    op = next(o for o in compile_program(SQL).circuit.ops if o.kind == "aggregate")
    assert op.mode == "accumulate"
    accs = acc.columns(op.node)
    duck = DuckDBBackend()
    live = []          # the table's rows
    state = None       # the partial sums of every step so far, unmerged (as runs are)
    for step in range(12):
        change = []
        for _ in range(rng.randrange(1, 12)):
            if live and rng.random() < 0.4:
                change.append((live.pop(rng.randrange(len(live))), -1))
            else:
                r = (rng.choice([None, 1, 2, 3, 4]), rng.choice([None, 5, 7]), rng.choice([None, 1, 4, -2]))
                live.append(r)
                change.append((r, 1))
        d = pa.table({"c0": pa.array([r[0] for r, _ in change], pa.int32()),
                      "c1": pa.array([r[1] for r, _ in change], pa.int32()),
                      "c2": pa.array([r[2] for r, _ in change], pa.int64()),
                      W: pa.array([w for _, w in change], pa.int64())})
        partial = agg_op.aggregate_partial(op.node, d)
        assert partial is not None
        if state is None:
            got = agg_op.aggregate_output(op.node, partial, partial.slice(0, 0), accs, initial=True)
            want = duck.rule(rules.output_sql(op.node, accs, initial=True), P=partial)
        else:
            got = agg_op.aggregate_output(op.node, partial, state, accs, initial=False)
            want = duck.rule(rules.output_sql(op.node, accs), S=state, P=partial)
        assert isinstance(got, arrow_ops.Consolidated)
        got = pa.concat_tables(got)
        want = consolidate_arrow(want.cast(got.schema)) if want.num_rows else want.cast(got.schema)
        assert rows_of(got) == rows_of(want), f"step {step}"
        assert max(rows_of(got).values(), default=1) == 1, f"step {step}: a row twice in {got.to_pylist()}"
        state = partial if state is None else pa.concat_tables([state, partial])


@pytest.mark.parametrize("rows", [50, 120_000])   # one thread, and Acero's threads (THREADED_JOIN_ROWS)
def test_equi_join_is_the_rules_join(rows):
    """``join_op.equi_join`` gives the rows and weights of the join rule on DuckDB: duplicate keys, NULL keys
    (which never match) and negative weights."""
    assert (rows > join_op.THREADED_JOIN_ROWS) == (rows == 120_000)
    rng = random.Random(rows)
    prog = compile_program("CREATE TABLE a (k INT, v INT); CREATE TABLE b (k INT, s VARCHAR); "
                           "CREATE VIEW j AS SELECT a.v, b.s FROM a JOIN b ON a.k = b.k")
    op = next(o for o in prog.circuit.ops if o.kind == "join")
    keys = [None] + list(range(max(rows // 3, 5)))
    left = pa.table({"c0": pa.array([rng.choice(keys) for _ in range(rows)], pa.int32()),
                     "c1": pa.array([rng.randrange(9) for _ in range(rows)], pa.int32()),
                     W: pa.array([rng.choice([1, 1, -1, 2]) for _ in range(rows)], pa.int64())})
    right = pa.table({"c0": pa.array([rng.choice(keys) for _ in range(rows // 2)], pa.int32()),
                      "c1": pa.array([rng.choice(["x", "y", None]) for _ in range(rows // 2)], pa.string()),
                      W: pa.array([rng.choice([1, -1]) for _ in range(rows // 2)], pa.int64())})
    got = join_op.equi_join(op.node, left, right)
    assert got is not None
    duck = DuckDBBackend()
    want = duck.rule(rules.join_sql(op.node, "L", "R", duck.x_rule()), L=left, R=right)
    assert rows_of(consolidate_arrow(got)) == rows_of(consolidate_arrow(want.cast(got.schema)))


@pytest.mark.parametrize("seed", range(4))
def test_recompute_retracting_what_was_emitted_is_the_rules_change(seed):
    """``aggregate_recompute`` with ``emitted`` (a float SUM/AVG keeps its output, ``circuit.keeps_output``) is
    the rule's change: the touched groups' new rows minus their stored rows, over keys without NULLs."""
    rng = random.Random(seed)
    sql = "CREATE TABLE t (k INT, x DOUBLE); CREATE VIEW a AS SELECT k, SUM(x) AS s, AVG(x) AS m, COUNT(*) AS n FROM t GROUP BY k"
    op = next(o for o in compile_program(sql).circuit.ops if o.kind == "aggregate")
    assert op.mode == "recompute" and len(op.reads) == 2
    duck = DuckDBBackend()
    live, state, emitted = [], None, None
    for step in range(10):
        change = []
        for _ in range(rng.randrange(1, 8)):
            if live and rng.random() < 0.4:
                change.append((live.pop(rng.randrange(len(live))), -1))
            else:
                r = (rng.choice([1, 2, 3]), rng.choice([None, 0.1, 0.2, 1e20, -1e20, 2.5]))
                live.append(r)
                change.append((r, 1))
        d = pa.table({"c0": pa.array([r[0] for r, _ in change], pa.int32()),
                      "c1": pa.array([r[1] for r, _ in change], pa.float64()),
                      W: pa.array([w for _, w in change], pa.int64())})
        if state is None:
            out = duck.rule(rules.aggregate_sql(op.node, initial=True), D=d)
        else:
            got = agg_op.aggregate_recompute(op.node, d, state, emitted)
            assert got is not None
            want = duck.rule(rules.aggregate_sql(op.node, emitted=True), S=state, D=d, O=emitted)
            got = consolidate_arrow(got.cast(want.schema))
            want = consolidate_arrow(want)
            # the retractions are the stored rows, bit for bit; the new rows' floats may differ in the last bit
            assert rows_of(got.filter(pc.less(got.column(W), 0))) == rows_of(want.filter(pc.less(want.column(W), 0)))
            assert sorted(r[:1] + r[3:] for r in rows_of(got)) == sorted(r[:1] + r[3:] for r in rows_of(want))
            out = got
        state = d if state is None else pa.concat_tables([state, d])
        emitted = out if emitted is None else consolidate_arrow(pa.concat_tables([emitted, out.cast(emitted.schema)]))


@pytest.mark.parametrize("values", [[1e300, float("nan"), None], [float("nan")], [float("nan"), None], [None],
                                    [-1e-300, 2.5], [float("nan"), float("nan"), -0.5]])
def test_recompute_min_max_over_floats_with_nan_is_the_rules(values):
    """Arrow's min and max skip NaN; DuckDB's (and Spark's) order NaN above every number: MAX of a group with a
    NaN is NaN, MIN only of a group of NaNs (fuzz seed 4149)."""
    sql = "CREATE TABLE t (k INT, x DOUBLE); CREATE VIEW a AS SELECT k, MIN(x) AS lo, MAX(x) AS hi FROM t GROUP BY k"
    op = next(o for o in compile_program(sql).circuit.ops if o.kind == "aggregate")
    d = pa.table({"c0": pa.array([1] * len(values), pa.int32()), "c1": pa.array(values, pa.float64()),
                  W: pa.array([1] * len(values), pa.int64())})
    got = agg_op.aggregate_recompute(op.node, d, None)
    assert got is not None
    want = DuckDBBackend().rule(rules.aggregate_sql(op.node, initial=True), D=d)
    assert repr(rows_of(consolidate_arrow(got.cast(want.schema)))) == repr(rows_of(consolidate_arrow(want)))


@pytest.mark.parametrize("big", [False, True])
def test_integer_sums_are_exact_in_bigint_or_decimal(big):
    """An aggregate's partial sums of integers: summed in BIGINT while the change's sum of |x * w| stays below
    2^62 (no group's sum can wrap), else in DECIMAL(38, 0); either way exactly the rule's sums, in DECIMAL(38, 0)
    (values near BIGINT's limits: a BIGINT sum would wrap)."""
    op = next(o for o in compile_program(SQL).circuit.ops if o.kind == "aggregate")
    rng = random.Random(7)
    top = (1 << 63) - 1 if big else (1 << 40)
    xs = [rng.choice([top, -top, top // 3, None, 0, 5]) for _ in range(200)]
    d = pa.table({"c0": pa.array([rng.randrange(4) for _ in xs], pa.int32()),
                  "c1": pa.array([rng.choice([None, 1, -7]) for _ in xs], pa.int32()),
                  "c2": pa.array(xs, pa.int64()),
                  W: pa.array([rng.choice([1, -1, 2]) if abs(x or 0) < (1 << 62) else rng.choice([1, -1])
                               for x in xs], pa.int64())})
    sums = acc.partial_arrow(op.node, d, [None, "c1", "c2", "c1"], narrow=True)
    assert pa.types.is_integer(sums[acc.sum_of(2)].type) != big   # the narrow form only when no sum can wrap
    got = agg_op.aggregate_partial(op.node, d)
    want = DuckDBBackend().rule(rules.partial_sql(op.node), D=d)
    assert got.schema.field(acc.sum_of(2)).type == pa.decimal128(38, 0)
    assert rows_of(got) == rows_of(want.select(got.column_names).cast(got.schema))
