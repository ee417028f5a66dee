"""The join-ordering rule (planner/rules/order_joins.py) at the plan level: no cross product where
equalities connect the relations, bushy trees of logarithmic depth, disconnected tables kept as cross
products, the schema and the column order unchanged, the as-written switch, and the same rows as the
plan as written (both plans run by DuckDB over random tables)."""
import random

import duckdb
import pytest

from planner.logical import Filter, Join, Node, Project, Scan, walk
from planner.program import compile_program
from planner.rules.order_joins import columns_of, order_joins, rename_columns, split_conjuncts


def chain_program(n: int, seed: int = 1, extra: str = "", extra_tables=()) -> str:
    """``n`` tables joined by a chain of equalities t0.v = t1.k, t1.v = t2.k, ..., in a scrambled FROM order."""
    order = [f"t{i}" for i in range(n)] + list(extra_tables)
    random.Random(seed).shuffle(order)
    tables = "\n".join(f"CREATE TABLE {t} (k INT, v INT, w INT);" for t in [f"t{i}" for i in range(n)] +
                       list(extra_tables))
    preds = " AND ".join([f"t{i}.v = t{i + 1}.k" for i in range(n - 1)] + ([extra] if extra else []))
    return (f"{tables}\nCREATE VIEW j AS SELECT t0.k, t{n - 1}.v, t{n // 2}.w "
            f"FROM {', '.join(order)} WHERE {preds};")


def use_order_joins(monkeypatch, on: bool = True) -> None:
    """Run ``order_joins`` in the pass manager (after pushdown, before pruning), or make sure it does not run."""
    from planner.rules import manager
    rules = [r for r in manager.RULES if r is not order_joins]
    if on:
        names = [r.__name__ for r in rules]
        rules.insert(names.index("prune_columns") if "prune_columns" in names else len(rules), order_joins)
    monkeypatch.setattr(manager, "RULES", tuple(rules))


def plan_of(sql: str, view: str = "j") -> Node:
    """The view's plan as the binder made it (before the rewrite rules)."""
    v = compile_program(sql).views[view]
    return v.bound if getattr(v, "bound", None) is not None else v.plan


def joins(plan: Node):
    return [n for n in walk(plan) if isinstance(n, Join)]


def cross_joins(plan: Node):
    return [j for j in joins(plan) if not j.left_keys]


def depth(node: Node) -> int:
    """Joins on the longest path from ``node`` down to a leaf."""
    below = max((depth(c) for c in node.inputs), default=0)
    return below + (1 if isinstance(node, Join) else 0)


def schema(plan: Node):
    return [(f.name, f.type) for f in plan.fields]


# ------------------------------------------------------------ running a plan on DuckDB
def plan_sql(node: Node) -> str:
    """SQL computing ``node``'s rows (columns c0, c1, ...) from tables named as in its Scans."""
    if isinstance(node, Scan):
        return "SELECT " + ", ".join(f"{f.name} AS c{i}" for i, f in enumerate(node.fields)) + f" FROM {node.table}"
    if isinstance(node, Filter):
        return f"SELECT * FROM ({plan_sql(node.input)}) WHERE {node.predicate.sql}"
    if isinstance(node, Project):
        return ("SELECT " + ", ".join(f"{e.sql} AS c{i}" for i, e in enumerate(node.exprs)) +
                f" FROM ({plan_sql(node.input)})")
    if isinstance(node, Join) and node.kind == "inner":
        nl, nr = len(node.left.fields), len(node.right.fields)
        right = "SELECT " + ", ".join(f"c{j} AS c{nl + j}" for j in range(nr)) + f" FROM ({plan_sql(node.right)})"
        cond = [f"({a.sql}) = ({b.sql})" for a, b in zip(node.left_keys, node.right_keys)]
        cond += [node.residual.sql] if node.residual is not None else []
        return f"SELECT * FROM ({plan_sql(node.left)}) JOIN ({right}) ON {' AND '.join(cond) or 'TRUE'}"
    raise AssertionError(f"no SQL for {node.describe()}")


def rows(con, plan: Node):
    return sorted(con.sql(plan_sql(plan)).fetchall(), key=repr)


def random_tables(names, seed: int):
    con = duckdb.connect()
    rng = random.Random(seed)
    for t in names:
        con.sql(f"CREATE TABLE {t} (k INT, v INT, w INT)")
        vals = [f"({rng.choice(['NULL', 0, 1, 2])}, {rng.randint(0, 2)}, {rng.randint(0, 3)})" for _ in range(4)]
        con.sql(f"INSERT INTO {t} VALUES {', '.join(vals)}")
    return con


# ------------------------------------------------------------ tests
def test_scrambled_chain_has_no_cross_join_and_log_depth():
    plan = plan_of(chain_program(8))
    assert cross_joins(plan), "the binder joins a scrambled FROM list with cross products"
    out = order_joins(plan)
    assert len(joins(out)) == 7
    assert not cross_joins(out)
    assert depth(out) <= 4          # 3 = log2(8) for a chain; the written order gives 7
    assert depth(plan) == 7
    assert schema(out) == schema(plan)


@pytest.mark.parametrize("n", [3, 5, 8, 13, 16])
def test_chains_of_any_length_give_the_same_rows(n):
    plan = plan_of(chain_program(n, seed=n))
    out = order_joins(plan)
    assert not cross_joins(out)
    assert depth(out) <= max(2, (n - 1).bit_length() + 1)
    con = random_tables([f"t{i}" for i in range(n)], seed=n)
    assert rows(con, out) == rows(con, plan)


def test_disconnected_table_stays_a_cross_join():
    sql = chain_program(6, seed=3, extra_tables=["lone"])
    plan = plan_of(sql)
    out = order_joins(plan)
    cross = cross_joins(out)
    assert len(cross) == 1
    assert cross[0].residual is None
    sides = [{n.table for n in walk(s) if isinstance(n, Scan)} for s in (cross[0].left, cross[0].right)]
    assert {"lone"} in sides            # joined last, to everything else
    assert schema(out) == schema(plan)
    con = random_tables([f"t{i}" for i in range(6)] + ["lone"], seed=5)
    assert rows(con, out) == rows(con, plan)


def test_non_equi_predicate_is_applied_where_its_tables_meet():
    sql = chain_program(5, seed=2, extra="t1.w < t3.w", extra_tables=["lone"])
    sql = sql.replace("t1.w < t3.w", "t1.w < t3.w AND lone.w > t2.w")
    plan = plan_of(sql)
    out = order_joins(plan)
    assert not [n for n in walk(out) if isinstance(n, Filter) and isinstance(n.input, Join)]
    lone = [j for j in cross_joins(out)]
    assert len(lone) == 1 and lone[0].residual is not None   # the lone table joins on its predicate
    residuals = [j.residual.sql for j in joins(out) if j.residual is not None]
    assert len(residuals) == 2
    con = random_tables([f"t{i}" for i in range(5)] + ["lone"], seed=9)
    assert rows(con, out) == rows(con, plan)


def test_column_order_and_schema_are_restored():
    sql = chain_program(6, seed=4).replace("SELECT t0.k, t5.v, t3.w", "SELECT *")
    plan = plan_of(sql)
    out = order_joins(plan)
    assert schema(out) == schema(plan)
    # the region directly, without the view's Project: a Project on top restores the written order
    region = plan.input if isinstance(plan, Project) else plan
    assert isinstance(region, Join)
    ordered = order_joins(region)
    assert isinstance(ordered, Project)
    assert schema(ordered) == schema(region)
    con = random_tables([f"t{i}" for i in range(6)], seed=4)
    assert rows(con, ordered) == rows(con, region)
    assert rows(con, out) == rows(con, plan)


def test_the_view_projection_absorbs_the_reordering():
    plan = plan_of(chain_program(8))
    out = order_joins(plan)
    assert isinstance(out, Project) and isinstance(out.input, Join)   # no second Project


def test_as_written_leaves_the_plan_alone():
    plan = plan_of(chain_program(8))
    assert order_joins(plan, {"join_order": "as_written"}) is plan

    class Ctx:
        join_order = "as_written"

    assert order_joins(plan, Ctx()) is plan


def test_deterministic():
    a = order_joins(plan_of(chain_program(10, seed=7)))
    b = order_joins(plan_of(chain_program(10, seed=7)))
    assert a == b
    assert order_joins(a) == order_joins(b)


def test_two_relations_and_outer_joins_are_kept():
    sql = """CREATE TABLE a (k INT, v INT, w INT); CREATE TABLE b (k INT, v INT, w INT);
    CREATE TABLE c (k INT, v INT, w INT);
    CREATE VIEW j AS SELECT a.v, b.w FROM a JOIN b ON a.k = b.k AND a.v < b.v;
    CREATE VIEW o AS SELECT a.v, c.w FROM a LEFT JOIN b ON a.k = b.k JOIN c ON c.k = b.v"""
    for v in ("j", "o"):
        plan = plan_of(sql, v)
        assert order_joins(plan) == plan


def test_nested_regions_are_ordered():
    n = 6
    inner = chain_program(n, seed=11).split("CREATE VIEW j AS ")[1].rstrip(";")
    sql = chain_program(n, seed=11).split("CREATE VIEW")[0] + \
        f"CREATE VIEW j AS SELECT k, COUNT(*) AS c FROM ({inner}) s GROUP BY k;"
    plan = plan_of(sql)
    out = order_joins(plan)
    assert cross_joins(plan) and not cross_joins(out)
    assert schema(out) == schema(plan)


def test_statistics_choose_the_cheaper_pair():
    sql = """CREATE TABLE f (k INT, v INT, w INT); CREATE TABLE d1 (k INT, v INT, w INT);
    CREATE TABLE d2 (k INT, v INT, w INT);
    CREATE VIEW j AS SELECT f.w, d1.w, d2.w FROM f, d1, d2 WHERE f.k = d1.k AND f.v = d2.k"""
    plan = plan_of(sql)
    first = order_joins(plan, {"table_rows": {"f": 10 ** 6, "d1": 10 ** 5, "d2": 10}})
    bottom = [j for j in joins(first) if not any(isinstance(c, Join) for c in j.inputs)]
    assert {n.table for n in walk(bottom[0]) if isinstance(n, Scan)} == {"f", "d2"}


def test_expression_helpers():
    assert rename_columns("c1 + c10 = 'c1' AND \"c2\" > c2", lambda i: i * 2) == "c2 + c20 = 'c1' AND \"c2\" > c4"
    assert columns_of("CAST(c3 AS INT) = c0") == {0, 3}
    assert split_conjuncts("c0 BETWEEN 1 AND 2") == ["c0 BETWEEN 1 AND 2"]
    assert split_conjuncts("(c0 = 1) AND (c1 BETWEEN 1 AND 2 AND c2 = c0)") == \
        ["c0 = 1", "c1 BETWEEN 1 AND 2", "c2 = c0"]


def test_in_the_pass_manager(monkeypatch):
    """Between pushdown and pruning: the manager's invariant checks pass and pruning keeps the order."""
    from planner.rules.manager import Context, check_plan, optimize
    use_order_joins(monkeypatch)
    sql = chain_program(8)
    p = compile_program(sql)
    plan = p.views["j"].plan
    assert not cross_joins(plan) and depth(plan) <= 4
    assert check_plan(plan) is None
    bound = p.views["j"].bound
    assert cross_joins(optimize(bound, Context(options={"join_order": "as_written"})))
    use_order_joins(monkeypatch, on=False)
    assert cross_joins(compile_program(sql).views["j"].plan)


def test_tpch_plans_stay_valid(monkeypatch):
    """Every TPC-H query compiles with the rule on: valid plans, no more cross joins, no deeper trees."""
    import workloads
    from planner.rules.manager import check_plan
    schema_sql = workloads.schema("tpch")
    for name, q in workloads.select_sql("tpch").items():
        use_order_joins(monkeypatch, on=False)
        before = compile_program(schema_sql + f"\nCREATE VIEW v AS {q};").views["v"]
        use_order_joins(monkeypatch)
        after = compile_program(schema_sql + f"\nCREATE VIEW v AS {q};").views["v"]
        assert schema(after.plan) == schema(before.plan), name
        assert check_plan(after.plan) is None, name
        assert len(cross_joins(after.plan)) <= len(cross_joins(before.plan)), name
        assert depth(after.plan) <= depth(before.plan), name
