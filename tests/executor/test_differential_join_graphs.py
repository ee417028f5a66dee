"""Differential test of join ordering: random join graphs of 3-8 tables, checked against DuckDB after every step.

Each example draws a connected graph of equality predicates over tables ``t0 .. tN`` (a random spanning
tree plus a few extra edges, on columns or on expressions), lists the tables in a random FROM order,
sometimes adds a table no equality reaches (it must stay a cross product, sometimes tied to the others by
a non-equi predicate) and sometimes other non-equi predicates over two or three tables.  The first step
inserts rows into every table at once (the case where a join tree's inputs all change together); later
steps insert and delete at random.  Small value domains make the joins match.

The program is compiled once with the join-ordering rule (planner/rules/order_joins.py) in the pass
manager, and once without it (the tables joined in the written order), against the same oracle.
"""
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from planner.logical import Join, walk

from ..support.differential import run_program, steps_strategy
from ..planner.test_order_joins import use_order_joins

KEY = st.sampled_from([0, 1, 0, 1, 0, 1, 2, None])                 # mostly 0 and 1: the joins match often
ROW = st.tuples(KEY, KEY, st.integers(0, 3))                     # (k, v, w)


@st.composite
def join_graphs(draw):
    """(number of tables, FROM order, WHERE conjuncts, the disconnected table or None)."""
    n = draw(st.integers(3, 8))
    lone = n - 1 if draw(st.booleans()) else None
    linked = [i for i in range(n) if i != lone]
    preds = []

    def side(i):
        c = draw(st.sampled_from(["k", "v"]))
        return draw(st.sampled_from([f"t{i}.{c}", f"t{i}.{c}", f"t{i}.{c}", f"COALESCE(t{i}.{c}, 1)", f"t{i}.w % 2"]))

    order = draw(st.permutations(linked))
    for pos in range(1, len(order)):          # a random spanning tree over the linked tables
        parent = order[draw(st.integers(0, pos - 1))]
        preds.append(f"{side(parent)} = {side(order[pos])}")
    for _ in range(draw(st.integers(0, 2))):  # extra edges close cycles
        a, b = draw(st.sampled_from(linked)), draw(st.sampled_from(linked))
        if a != b:
            preds.append(f"t{a}.k = t{b}.v")
    if lone is not None and draw(st.booleans()):   # tied to the others by a non-equi predicate only
        preds.append(f"t{lone}.w >= t{draw(st.sampled_from(linked))}.w")
    for _ in range(draw(st.integers(0, 2))):  # non-equi predicates over two or three tables
        a, b, c = (draw(st.sampled_from(linked)) for _ in range(3))
        preds.append(draw(st.sampled_from([f"t{a}.w <= t{b}.w + 1", f"t{a}.w + t{b}.w >= t{c}.w",
                                           f"(t{a}.v = t{b}.k OR t{c}.w < 2)"])))
    preds = draw(st.permutations(preds))
    from_order = draw(st.permutations(list(range(n))))
    return n, list(from_order), list(preds), lone


@st.composite
def cases(draw):
    n, from_order, preds, lone = draw(join_graphs())
    tables = {f"t{i}": ROW for i in range(n)}
    first = [(f"t{i}", "insert", draw(st.lists(ROW, min_size=3, max_size=6)), 0, "pandas") for i in range(n)]
    later = draw(steps_strategy(tables, max_steps=2, max_batch=4))
    return n, from_order, preds, lone, [first] + later


def program(n, from_order, preds):
    schema = "\n".join(f"CREATE TABLE t{i} (k INT, v INT, w INT);" for i in range(n))
    frm = ", ".join(f"t{i}" for i in from_order)
    where = " AND ".join(preds)
    views = [
        ("v", f"SELECT {', '.join(f't{i}.w AS w{i}' for i in range(n))}, t0.k FROM {frm} WHERE {where}", True),
        ("g", f"SELECT t0.k, COUNT(*) AS n, SUM(t{n - 1}.w) AS s FROM {frm} WHERE {where} GROUP BY t0.k", False),
    ]
    return schema, {f"t{i}": ["k", "v", "w"] for i in range(n)}, views


@pytest.fixture(params=["order_joins", "as_written"])
def rule(request, monkeypatch):
    """Compile every view with the join-ordering rule in the pass manager, or without it (as the binder
    joined the tables; the other rules run in both)."""
    use_order_joins(monkeypatch, on=request.param == "order_joins")
    return request.param


def _rows(i):
    return [(i % 2, (i + 1) % 2, i % 4), (1, 1, 2), (0, 0, 1), (None, 1, 3), (1, 0, 0)]


# A scrambled chain of 6 tables with an expression key, a table joined by a non-equi predicate only, and a
# predicate over three tables; every table changes in the first step, then deletes and inserts.
CHAIN = (7, [3, 6, 0, 5, 1, 4, 2],
         ["t0.v = t1.k", "t1.v = t2.k", "COALESCE(t2.v, 1) = t3.k", "t3.v = t4.k", "t4.v = t5.k",
          "t6.w >= t2.w", "t0.w + t5.w >= t3.w"], 6,
         [[(f"t{i}", "insert", _rows(i), 0, "pandas") for i in range(7)],
          [("t3", "delete_existing", [None, None], 5, "json"), ("t6", "insert", [(0, 0, 3)], 0, "pandas")],
          [("t0", "delete_existing", [None], 1, "pandas"), ("t5", "insert", [(1, 1, 1), (0, 1, 2)], 0, "json")]])


@example(CHAIN)
@given(cases())
def test_random_join_graphs(make_pipeline, rule, case):
    n, from_order, preds, lone = case[:4]
    schema, columns, views = program(n, from_order, preds)
    made = []

    def make(*args, **kwargs):
        made.append(make_pipeline(*args, **kwargs))
        return made[-1]

    run_program(make, schema, columns, views, case[4])
    if rule == "order_joins":   # the rule ran: a cross product only where no equality reaches a table
        plan = made[0].program.views["v"].plan
        cross = [j for j in walk(plan) if isinstance(j, Join) and not j.left_keys]
        assert len(cross) <= (1 if lone is not None else 0), plan
