"""Lowering circuit operators to Spark DataFrame plans.

``Lowerer.lower_<kind>(op, ins, reads)`` builds the lazy Spark plan of one
op's change for one step, from the changes of its inputs (``ins``) and the
state it reads (``reads``: integrals as of the previous step; a join or union input whose change is empty this step is
``None``, as unconsolidated
unions of runs - every consumer is linear or bilinear in them, or
consolidates them first).  Frames are positional: ``c0..c(n-1)`` plus the
weight :data:`W`.  An op kind without a handler raises ``UnsupportedError``.
"""
from __future__ import annotations

from functools import lru_cache
from functools import reduce
from typing import List, Sequence

import sqlglot
from sqlglot import exp
from pyspark.sql import DataFrame, functions as F
from pyspark.sql.types import DecimalType, IntegralType

from planner.bind import DIALECT
from planner.bind_window import total_order
from planner.circuit import Op
from planner.errors import UnsupportedError
from planner.logical import Aggregate, Distinct, Filter, Join, Project, Window, col

from sqlengine.zset import W, consolidate_spark, positive_spark


def _dow(x: exp.Expression) -> exp.Expression:       # Spark DAYOFWEEK: Sunday = 1 .. Saturday = 7
    return exp.Anonymous(this="DAYOFWEEK", expressions=[x])


def _to_spark_semantics(n: exp.Expression) -> exp.Expression:
    """DuckDB meanings that sqlglot's transpiler does not carry over (type-dependent ones are fixed by the
    planner, see ``planner.semantics``): day-of-week numbering, EPOCH, WEEK, ROUND_EVEN."""
    unit = n.name.upper() if isinstance(n, exp.Extract) else None
    unit = {"DAYOFWEEK": "DOW", "WEEKDAY": "DOW", "DAYOFWEEKISO": "ISODOW", "DAYOFWEEK_ISO": "ISODOW"}.get(unit, unit)
    if unit == "DOW" or isinstance(n, exp.DayOfWeek):           # DuckDB: Sunday = 0 .. Saturday = 6
        return exp.Paren(this=exp.Sub(this=_dow(n.expression if unit else n.this), expression=exp.Literal.number(1)))
    if unit == "ISODOW" or isinstance(n, exp.DayOfWeekIso):     # Monday = 1 .. Sunday = 7
        x = n.expression if unit else n.this
        return exp.Paren(this=exp.Add(this=exp.Mod(this=exp.Paren(this=exp.Add(this=_dow(x), expression=exp.Literal.number(5))),
                                                   expression=exp.Literal.number(7)),
                                      expression=exp.Literal.number(1)))
    if unit == "EPOCH":
        micros = exp.Anonymous(this="UNIX_MICROS", expressions=[exp.cast(n.expression, "TIMESTAMP")])
        return exp.Paren(this=exp.Div(this=micros, expression=exp.Literal.number("1000000.0")))
    if isinstance(n, exp.Anonymous) and n.name.upper() == "ROUND_EVEN":
        return exp.Anonymous(this="BROUND", expressions=list(n.expressions))
    if isinstance(n, exp.Week) or unit == "WEEK":               # ISO week in both
        return exp.Anonymous(this="WEEKOFYEAR", expressions=[n.expression if unit else n.this])
    return n


@lru_cache(maxsize=4096)
def spark_sql(expr_sql: str) -> str:
    """Transpile a bound expression from the planner's dialect to Spark SQL."""
    tree = sqlglot.parse_one(expr_sql, read=DIALECT).transform(_to_spark_semantics)
    return tree.sql(dialect="spark")


def sexpr(expr_sql: str):
    return F.expr(spark_sql(expr_sql))


def data_cols(n: int) -> List[str]:
    return [col(i) for i in range(n)]


def union_all(frames: Sequence[DataFrame]) -> DataFrame:
    return reduce(lambda a, b: a.union(b), frames)


def null_safe_semi(state: DataFrame, probe: DataFrame, cols: List[str]) -> DataFrame:
    """Rows of ``state`` whose ``cols`` equal (NULL-safely) some row of ``probe``."""
    p = probe.select(*[F.col(c).alias("__p" + c) for c in cols]).distinct()
    if not cols:
        return state
    cond = reduce(lambda a, b: a & b, [state[c].eqNullSafe(p["__p" + c]) for c in cols])
    return state.join(p, cond, "left_semi")


AGG_SQL = {"COUNT": "count", "SUM": "sum", "AVG": "avg", "MIN": "min", "MAX": "max",
           "STDDEV_SAMP": "stddev_samp", "STDDEV_POP": "stddev_pop", "VAR_SAMP": "var_samp", "VAR_POP": "var_pop"}


class Lowerer:
    """Builds per-op Spark plans; stateless apart from the SparkSession."""

    def __init__(self, spark):
        self.spark = spark

    def lower(self, op: Op, ins: List[DataFrame], reads: List[DataFrame], initial: bool = False) -> DataFrame:
        handler = getattr(self, f"lower_{op.kind}", None)
        if handler is None:
            raise UnsupportedError(f"operator {op.kind} has no Spark lowering")
        if op.kind == "aggregate":
            return handler(op, ins, reads, initial)
        return handler(op, ins, reads)

    # ------------------------------------------------------------ linear
    def lower_map(self, op: Op, ins, reads) -> DataFrame:
        (d,) = ins
        node = op.node
        if isinstance(node, Filter):
            return d.filter(sexpr(node.predicate.sql))
        if isinstance(node, Project):
            return d.select(*[sexpr(e.sql).alias(col(i)) for i, e in enumerate(node.exprs)], F.col(W))
        raise UnsupportedError(f"linear node {type(node).__name__} has no Spark lowering")

    def lower_union(self, op: Op, ins, reads) -> DataFrame:
        return union_all([d for d in ins if d is not None])

    # ------------------------------------------------------------ bilinear
    def lower_join(self, op: Op, ins, reads) -> DataFrame:
        """d(A join B) = dA join (B_old + dB) + A_old join dB; a side whose change is empty (None) drops its term."""
        node: Join = op.node
        dl, dr = ins
        lold, rold = reads
        if node.kind in ("semi", "anti"):
            return self._padded(node, dl, dr, lold, rold, left=True, how="left_semi" if node.kind == "semi"
                                else "left_anti")
        if dr is None:
            out = self._join(node, dl, rold)
        elif dl is None:
            out = self._join(node, lold, dr)
        else:
            out = self._join(node, dl, rold.union(dr)).union(self._join(node, lold, dr))
        if node.kind in ("left", "full"):
            out = out.union(self._padded(node, dl, dr, lold, rold, left=True))
        if node.kind in ("right", "full"):
            out = out.union(self._padded(node, dl, dr, lold, rold, left=False))
        return out

    @staticmethod
    def _residual_on(node: Join, left: bool, nl: int, nr: int):
        """The join's residual predicate with the other side's columns renamed ``__b<name>``."""
        other = {col(nl + j) for j in range(nr)} if left else {col(i) for i in range(nl)}
        e = sqlglot.parse_one(node.residual.sql, read=DIALECT)
        for c in e.find_all(exp.Column):
            if c.name in other:
                c.set("this", exp.to_identifier("__b" + c.name))
        return F.expr(e.sql(dialect="spark"))

    def _padded(self, node: Join, dl, dr, lold, rold, left: bool, how: str = "left_anti") -> DataFrame:
        """Change of the rows of one side without (``left_anti``) or with (``left_semi``) a match in the
        other, recomputed (new minus old) for the join keys present in either change.  For outer joins the
        unmatched rows are padded with NULLs; semi and anti joins output the left columns only."""
        nl, nr = len(node.left.fields), len(node.right.fields)
        lk = [sexpr(k.sql) for k in node.left_keys]
        right_names = [F.col(col(j)).alias(col(nl + j)) for j in range(nr)]

        def lside(df):   # left rows with their key columns
            return df.select("*", *[k.alias(f"__k{i}") for i, k in enumerate(lk)])

        def rside(df):   # right rows renamed to joined positions, with their key columns
            df = df.select(*right_names, F.col(W))
            return df.select("*", *[sexpr(k.sql).alias(f"__k{i}") for i, k in enumerate(node.right_keys)])

        keys = [f"__k{i}" for i in range(len(lk))]
        changes = ([lside(dl)] if dl is not None else []) + ([rside(dr)] if dr is not None else [])
        touched = union_all([c.select(*keys) for c in changes]).distinct() if keys else None

        def restrict(df):
            return null_safe_semi(df, touched, keys) if keys else df

        a_old, b_old = (restrict(lside(lold)), restrict(rside(rold))) if left else \
            (restrict(rside(rold)), restrict(lside(lold)))
        da, db = (dl, dr) if left else (dr, dl)
        a_new = a_old.union((lside if left else rside)(da)) if da is not None else a_old
        b_new = b_old.union((rside if left else lside)(db)) if db is not None else b_old

        def unmatched(a, b):
            b = positive_spark(b).drop(W)   # the matching side's rows that exist
            for c in b.columns:
                b = b.withColumnRenamed(c, "__b" + c)
            conds = [a[k] == b["__b" + k] for k in keys]
            if node.residual is not None:
                conds.append(self._residual_on(node, left, nl, nr))
            cond = reduce(lambda x, y: x & y, conds) if conds else F.lit(True)
            return a.join(b, cond, how)

        def pad(df, weight_sign):
            if node.kind in ("semi", "anti"):
                return df.select(*[F.col(col(i)) for i in range(nl)], (F.col(W) * weight_sign).alias(W))
            if left:
                cols = [F.col(col(i)) for i in range(nl)] + \
                       [F.lit(None).cast(rold.schema[col(j)].dataType).alias(col(nl + j)) for j in range(nr)]
            else:
                cols = [F.lit(None).cast(lold.schema[col(i)].dataType).alias(col(i)) for i in range(nl)] + \
                       [F.col(col(nl + j)) for j in range(nr)]
            return df.select(*cols, (F.col(W) * weight_sign).alias(W))

        return pad(unmatched(a_new, b_new), 1).union(pad(unmatched(a_old, b_old), -1))

    def _join(self, node: Join, left: DataFrame, right: DataFrame) -> DataFrame:
        nl, nr = len(node.left.fields), len(node.right.fields)
        right = right.select(*[F.col(col(j)).alias(col(nl + j)) for j in range(nr)], F.col(W).alias("__w2"))
        if node.left_keys:
            left = left.select("*", *[sexpr(k.sql).alias(f"__lk{i}") for i, k in enumerate(node.left_keys)])
            right = right.select("*", *[sexpr(k.sql).alias(f"__rk{i}") for i, k in enumerate(node.right_keys)])
            eq = (lambda a, b: a.eqNullSafe(b)) if node.null_safe else (lambda a, b: a == b)
            cond = reduce(lambda a, b: a & b, [eq(left[f"__lk{i}"], right[f"__rk{i}"])
                                               for i in range(len(node.left_keys))])
            joined = left.join(right, cond, "inner")
        else:
            joined = left.crossJoin(right)
        if node.residual is not None:
            joined = joined.filter(sexpr(node.residual.sql))
        return joined.select(*data_cols(nl + nr), (F.col(W) * F.col("__w2")).alias(W))

    # ------------------------------------------------------------ stateful
    def lower_setop(self, op: Op, ins, reads) -> DataFrame:
        """Multiplicities of the touched rows before and after, from both integrals; emits the difference."""
        n = len(op.node.fields)
        cols = data_cols(n)
        changes = [d for d in ins if d is not None]
        touched = union_all([d.select(*cols) for d in changes])
        lold, rold = (null_safe_semi(s, touched, cols) for s in reads)
        zero = F.lit(0).cast("long")

        def tagged(df, slot):
            return df.select(*cols, *[(F.col(W) if i == slot else zero).alias(f"__m{i}") for i in range(4)])

        parts = [tagged(lold, 0), tagged(rold, 1)]
        if ins[0] is not None:
            parts.append(tagged(ins[0], 2))
        if ins[1] is not None:
            parts.append(tagged(ins[1], 3))
        g = union_all(parts).groupBy(*cols).agg(*[F.sum(f"__m{i}").alias(f"m{i}") for i in range(4)])
        a_old, b_old = F.col("m0"), F.col("m1")
        a_new, b_new = a_old + F.col("m2"), b_old + F.col("m3")
        node = op.node

        def mult(a, b):
            if node.op == "intersect":
                return F.least(a, b) if node.all else F.when((a > 0) & (b > 0), 1).otherwise(0)
            return F.greatest(a - b, F.lit(0)) if node.all else F.when((a > 0) & (b <= 0), 1).otherwise(0)

        w = (F.greatest(mult(a_new, b_new), F.lit(0)) - F.greatest(mult(a_old, b_old), F.lit(0))).cast("long")
        return g.select(*cols, w.alias(W)).filter(F.col(W) != 0)

    def lower_distinct(self, op: Op, ins, reads) -> DataFrame:
        """+1 for rows whose weight turns positive, -1 for rows whose weight stops being positive."""
        (d,) = ins
        (state,) = reads
        n = len(op.node.fields)
        cols = data_cols(n)
        old = null_safe_semi(state, d, cols).withColumn("__old", F.col(W))
        new = d.withColumn("__old", F.lit(0).cast("long"))
        g = old.union(new).groupBy(*cols).agg(F.sum("__old").alias("o"), F.sum(W).alias("n"))
        w = F.when(F.col("n") > 0, 1).otherwise(0) - F.when(F.col("o") > 0, 1).otherwise(0)
        return g.select(*cols, w.cast("long").alias(W)).filter(F.col(W) != 0)

    def lower_window(self, op: Op, ins, reads) -> DataFrame:
        """Recompute the window calls over the touched partitions: calls(old + d) - calls(old), consolidated."""
        node: Window = op.node
        (d,) = ins
        (state,) = reads
        n = len(node.input.fields)
        cols = data_cols(n)
        if node.partition:
            keys = [f"__p{i}" for i in range(len(node.partition))]

            def keyed(df):
                return df.select("*", *[sexpr(k.sql).alias(f"__p{i}") for i, k in enumerate(node.partition)])
            old = null_safe_semi(keyed(state), keyed(d).select(*keys), keys).select(*cols, W)
        else:
            old = state
        calls = [sexpr(total_order(c.sql, n)).alias(col(n + i)) for i, c in enumerate(node.calls)]

        def compute(z: DataFrame, sign: int) -> DataFrame:
            z = positive_spark(z)
            z = z.select(*cols, F.explode(F.array_repeat(F.lit(1), F.col(W).cast("int"))).alias("__rep"))
            return z.select(*cols, *calls, F.lit(sign).cast("long").alias(W))

        return consolidate_spark(compute(old.union(d), 1).union(compute(old, -1)))

    def lower_aggregate(self, op: Op, ins, reads, initial: bool = False) -> DataFrame:
        if op.mode == "accumulate":
            raise UnsupportedError("accumulating aggregates are lowered in two phases (partial, output)")
        return self.aggregate_recompute(op, ins[0], reads[0], initial)

    def aggregate_recompute(self, op: Op, d: DataFrame, state: DataFrame, initial: bool = False) -> DataFrame:
        """Recompute the touched groups from the integrated input: -agg(old) + agg(old + d).

        ``initial``: the pipeline's first step, where a global aggregate emits its row for the empty input.
        """
        node: Aggregate = op.node
        k = len(node.keys)
        n_in = len(node.input.fields)
        keys = data_cols(k)
        old = null_safe_semi(state, d, keys) if k else state
        aggs = []
        for i, a in enumerate(node.aggs):
            if a.func == "COUNT_STAR":
                e = F.count(F.lit(1))
            else:
                e = F.expr(f"{AGG_SQL[a.func]}({'DISTINCT ' if a.distinct else ''}{a.args[0].sql})")
            aggs.append(e.alias(col(k + i)))

        def agg(z: DataFrame, weight: int) -> DataFrame:
            cols = data_cols(n_in)
            z = positive_spark(z)
            z = z.select(*cols, F.explode(F.array_repeat(F.lit(1), F.col(W).cast("int"))).alias("__rep"))
            out = z.groupBy(*keys).agg(*aggs) if k else z.agg(*aggs)
            return out.withColumn(W, F.lit(weight).cast("long"))

        if initial:
            return agg(d, 1)
        return agg(old.union(d), 1).union(agg(old, -1))

    # accumulate mode: state rows are (keys, __cnt, per-aggregate sums), added up on read
    @staticmethod
    def acc_columns(node: Aggregate) -> List[str]:
        out = ["__cnt"]
        for i, a in enumerate(node.aggs):
            if a.func == "COUNT":
                out.append(f"__n{i}")
            elif a.func in ("SUM", "AVG"):
                out += [f"__s{i}", f"__n{i}"]
        return out

    def aggregate_partial(self, op: Op, d: DataFrame) -> DataFrame:
        """Per-group additive summary of a change: weight sum, and per aggregate sum(x*w), sum(w if x not null)."""
        node: Aggregate = op.node
        k = len(node.keys)
        parts = [F.sum(W).alias("__cnt")]
        for i, a in enumerate(node.aggs):
            if a.func == "COUNT_STAR":
                continue
            x = F.col(a.args[0].sql)
            nn = F.sum(F.when(x.isNotNull(), F.col(W)).otherwise(F.lit(0))).alias(f"__n{i}")
            if a.func == "COUNT":
                parts.append(nn)
            else:
                if isinstance(d.schema[a.args[0].sql].dataType, IntegralType):   # exact: never wraps
                    x = x.cast(DecimalType(38, 0))
                parts += [F.sum(x * F.col(W)).alias(f"__s{i}"), nn]
        keys = data_cols(k)
        return d.groupBy(*keys).agg(*parts) if k else d.agg(*parts)

    def aggregate_output(self, op: Op, partial: DataFrame, state: DataFrame, initial: bool = False) -> DataFrame:
        """-final(old) + final(old + partial) for the touched groups."""
        node: Aggregate = op.node
        k = len(node.keys)
        keys = data_cols(k)
        accs = self.acc_columns(node)
        old = null_safe_semi(state, partial, keys) if k else state

        def total(z: DataFrame, weight: int) -> DataFrame:
            sums = [F.coalesce(F.sum(c), F.lit(0)).alias(c) if c.startswith(("__cnt", "__n")) else F.sum(c).alias(c)
                    for c in accs]
            g = z.groupBy(*keys).agg(*sums) if k else z.agg(*sums)
            if k:
                g = g.filter(F.col("__cnt") != 0)
            outs = []
            for i, a in enumerate(node.aggs):
                if a.func == "COUNT_STAR":
                    e = F.col("__cnt")
                elif a.func == "COUNT":
                    e = F.col(f"__n{i}")
                elif a.func == "SUM":
                    e = F.when(F.col(f"__n{i}") > 0, F.col(f"__s{i}"))
                else:  # AVG
                    e = F.when(F.col(f"__n{i}") > 0, F.col(f"__s{i}") / F.col(f"__n{i}"))
                outs.append(e.alias(col(k + i)))
            return g.select(*keys, *outs, F.lit(weight).cast("long").alias(W))

        if initial:
            return total(partial, 1)
        return total(old.unionByName(partial), 1).union(total(old, -1))
