"""A differential-test runner: random inserts and deletes, every view checked after every step.

``run_program`` drives a pipeline and the :class:`~tests.support.oracle.Model` with the
same changes; after each step, every view's integrated change stream (and,
for materialized views, an ad-hoc query of its contents) must equal DuckDB's
from-scratch recomputation over the model's tables.
"""
from __future__ import annotations

import datetime as dt
import decimal
import os
from collections import Counter
from typing import Dict, List, Sequence, Tuple

import pandas as pd
from hypothesis import strategies as st

from .oracle import Model, bag, bag_from_changes, diff, without_table_options


SPARK_EXAMPLES = int(os.environ.get("SQLENGINE_SPARK_EXAMPLES", "2"))
_spark_runs: Counter = Counter()


def runs_on(executor: str, test: str, examples: int = 0) -> bool:
    """Whether this Hypothesis example of ``test`` runs: every one on the driver, the first
    ``SQLENGINE_SPARK_EXAMPLES`` (2; or ``examples``, when it is fewer) with every step on Spark, where each
    costs seconds (CI time)."""
    if executor != "spark":
        return True
    _spark_runs[test] += 1
    return _spark_runs[test] <= (min(examples, SPARK_EXAMPLES) if examples else SPARK_EXAMPLES)


def maybe(values):
    """A strategy for one of ``values`` or NULL."""
    return st.sampled_from([None] + list(values))


def program_sql(schema: str, views: Sequence[tuple]) -> str:
    out = [schema]
    for name, select, mat, *_ in views:
        out.append(f"CREATE {'MATERIALIZED ' if mat else ''}VIEW {name} AS {select};")
    return "\n".join(out)


def steps_strategy(tables: Dict[str, st.SearchStrategy], max_steps: int = 3, max_batch: int = 6):
    """A list of steps; each step is a list of (table, kind, rows, via) with kind insert|delete|delete_existing."""
    op = st.tuples(st.sampled_from(sorted(tables)), st.sampled_from(["insert", "insert", "delete", "delete_existing"]),
                   st.integers(0, 10 ** 6), st.sampled_from(["pandas", "json"]))

    @st.composite
    def step(draw):
        ops = draw(st.lists(op, min_size=1, max_size=3))
        out = []
        for table, kind, seed, via in ops:
            rows = draw(st.lists(tables[table], min_size=1, max_size=max_batch))
            out.append((table, kind, rows, seed, via))
        return out

    return st.lists(step(), min_size=1, max_size=max_steps)


def _json_value(v):
    if isinstance(v, decimal.Decimal):
        return str(v)
    if isinstance(v, (dt.date, dt.datetime)):
        return v.isoformat()
    return v


def run_program(make_pipeline, schema: str, columns: Dict[str, List[str]],
                views: Sequence[tuple], steps, prelude: str = "", oracle_setup=None, **kw) -> None:
    """``views``: (name, select, materialized[, DuckDB select]); the optional fourth element is the
    oracle's equivalent query, for SQL that DuckDB does not have (TUMBLE, HOP).  ``prelude``: statements of the
    program before the tables (CREATE FUNCTION); ``oracle_setup(con)`` prepares the oracle's DuckDB; ``kw`` go
    to the pipeline (``udfs=``)."""
    p = make_pipeline(prelude + program_sql(schema, views), start=False, **kw)
    handlers = {name: p.listen(name) for name, *_ in views}
    oracle_views = [(v[0], v[3] if len(v) > 3 else v[1], v[2]) for v in views]
    p.start()
    model = Model(schema, columns)
    for si, step in enumerate(steps):
        for table, kind, rows, seed, via in step:
            if kind == "delete_existing":
                existing = sorted(model.rows[table].elements(), key=repr)
                if not existing:
                    continue
                rows = [existing[(seed + i * 7) % len(existing)] for i in range(min(len(rows), len(existing)))]
            cols = columns[table]
            if via == "json":
                recs = [{c: _json_value(v) for c, v in zip(cols, r)} for r in rows]
                tag = "insert" if kind == "insert" else "delete"
                p.input_json(table, [{tag: r} for r in recs], update_format="insert_delete")
            else:
                df = pd.DataFrame([list(r) for r in rows], columns=cols, dtype=object)
                p.input_pandas(table, df, delete=(kind != "insert"))
            if kind == "insert":
                model.insert(table, rows)
            else:
                model.delete(table, rows)
        p.wait_for_idle()
        con = model.duck(oracle_views, oracle_setup)
        for name, select, mat in oracle_views:
            expected = model.view(con, select)
            got = bag_from_changes(handlers[name].to_pandas())
            problem = diff(got, expected)
            assert not problem, f"step {si}: view {name} (change stream) differs from DuckDB: {problem}"
            if mat:
                got_q = bag([tuple(r.values()) for r in p.query(f"SELECT * FROM {name}")])
                problem = diff(got_q, expected)
                assert not problem, f"step {si}: view {name} (query) differs from DuckDB: {problem}"
        for t in columns:
            got_t = bag([tuple(r.values()) for r in p.query(f"SELECT * FROM {t}")])
            assert not diff(got_t, bag(list(model.rows[t].elements()))), f"table {t} contents differ"


def statements_against_duckdb(make_pipeline, schema: str, views: Dict[str, str], steps: Sequence[str],
                              executor: str) -> None:
    """Run each step's statement on a pipeline of ``schema`` and materialized ``views`` and on DuckDB; after each,
    every view must equal DuckDB's as a bag with exact multiplicities.  With every step on Spark (``executor``
    "spark"), no step may have failed on Spark and been re-run on the driver."""
    import duckdb
    p = make_pipeline(schema + "".join(f"CREATE MATERIALIZED VIEW {n} AS {q};" for n, q in views.items()))
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.execute(without_table_options(schema))
    for si, stmt in enumerate(steps):
        p.execute(stmt)
        con.execute(stmt)
        p.wait_for_idle()
        for name, q in views.items():
            problem = diff(bag([tuple(r.values()) for r in p.query(f"SELECT * FROM {name}")]),
                           bag(con.execute(q).fetchall()))
            assert not problem, f"step {si}: view {name} differs from DuckDB: {problem}"
    stats = p.engine.stats
    assert stats.spark_fallbacks == 0, stats.last_spark_error
    if executor == "spark":
        assert stats.steps_spark and not stats.steps_local


def delete_some(p, table: str, live: list, columns: Sequence[str], rnd, most: int, least: int = 0) -> list:
    """Delete between ``least`` and ``most`` random rows of ``live`` (the rows the test holds as inserted) from
    ``table`` with ``input_pandas(delete=True)``, and from ``live``; the rows deleted."""
    if not live:
        return []
    gone = rnd.sample(live, rnd.randrange(min(least, len(live)), min(most, len(live)) + 1))
    for r in gone:
        live.remove(r)
    if gone:
        p.input_pandas(table, pd.DataFrame(gone, columns=list(columns), dtype=object), delete=True)
    return gone
