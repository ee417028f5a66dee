"""The differential tests again, with most steps on Spark.

Steps whose input is small run on the driver (``sqlengine.executor.local_step``); the
other differential tests therefore exercise that path.  Here the same tests
run with ``local_step_rows`` 4 (:mod:`sqlengine.executor.placement`): a step with more than 4 input rows
(most of them) runs the delta rules on Spark (``sqlengine.executor.backends.spark``), smaller
ones run on the driver, so the two paths also interleave over the same state,
and both are held to DuckDB's answers after every step.  Driver-side changes of more
than 8 rows reach Spark as scratch parquet files (``sqlengine.state.scratch``), smaller
ones through ``createDataFrame``, so both hand-offs meet every type.  A Spark step's filters, projections and
partial sums run on the driver only for changes of at most 2 rows (``driver_rows``), so both places are
exercised.  Tests whose steps are all that small (``EVERY_STEP_ON_SPARK``) run every step on Spark; each test
must have run at least one step there.
"""
import pytest
from hypothesis import given, settings

# A cross-section of the differential tests (the whole set takes ~14 min on Spark on 2 cores), re-collected
# here with the fixture below: every operator kind and both paths of joins, aggregates and windows.
from .test_differential_joins import test_joins, test_joins_with_aggregates, test_outer_joins  # noqa: F401
from .test_differential_more import test_intersect_and_except  # noqa: F401
from .test_differential_single import test_aggregates, test_distinct_and_union, test_expressions  # noqa: F401
from .test_differential_subqueries import test_scalar_subqueries  # noqa: F401
from .test_differential_windows import test_tumble_and_hop, test_window_functions  # noqa: F401
# primary-key upserts, dates and intervals, event time (watermarks, LATENESS, closed windows and joins), ties
from .test_differential_dates import test_dates  # noqa: F401
from .test_event_time import test_watermarks_late_rows_and_emit_final, test_window_join_drops_closed_state_on_both_sides  # noqa: F401,E501
from .test_primary_key import test_primary_key_differential  # noqa: F401
from .test_window_ties import test_lag_and_row_number_over_ties  # noqa: F401
from .test_exact_retractions import test_float_aggregates_retract_what_they_emitted  # noqa: F401
from .test_append_only import test_a_join_keeps_only_the_columns_it_reads_of_an_append_only_table  # noqa: F401
from .test_append_only import test_a_table_nothing_reads_is_a_stream  # noqa: F401
from .test_negative_zero import test_a_table_keeps_both_zeros, test_a_window_over_both_zeros_emits_each  # noqa: F401
from .test_more_aggregates import test_more_aggregates  # noqa: F401
from .test_udf import test_user_functions_against_duckdb  # noqa: F401
from .test_recursive import test_recursions_over_floats_against_duckdb, test_recursive_views_against_duckdb  # noqa: F401,E501
from . import test_query_forms as query_forms
from . import test_udf as udf_tests
from ..support.differential import run_program, steps_strategy
# every input path's values (big integers, NaN, infinities, rounded decimals) kept exactly through Spark state
from ..connectors.test_input_strictness import test_every_path_rejects_and_keeps_values_as_duckdb_does  # noqa: F401

pytestmark = pytest.mark.slow   # a long real-system or Spark test: ./run.sh test -m "not slow" skips it


# The two longest of the imported tests, with half the examples on Spark (CI's time; the driver runs all of them)
@settings(max_examples=2)
@given(steps_strategy(query_forms.ROWS, max_steps=4))
def test_query_forms(make_pipeline, steps):
    run_program(make_pipeline, query_forms.SCHEMA, query_forms.COLUMNS, query_forms.VIEWS, steps)


@settings(max_examples=2)
@given(steps_strategy({"t": udf_tests.AGG_ROW}, max_steps=4))
def test_python_aggregates_against_duckdb(make_pipeline, steps):
    run_program(make_pipeline, udf_tests.AGG_SCHEMA, udf_tests.AGG_COLUMNS, udf_tests.AGG_VIEWS, steps,
                udfs=[udf_tests.WeightedMean, udf_tests.Joined, udf_tests.Tally])


# tests whose steps have at most 4 input rows: every step of theirs runs on Spark
EVERY_STEP_ON_SPARK = {"test_primary_key_differential", "test_lag_and_row_number_over_ties",
                       "test_every_path_rejects_and_keeps_values_as_duckdb_does",
                       "test_a_table_nothing_reads_is_a_stream",
                       "test_a_join_keeps_only_the_columns_it_reads_of_an_append_only_table",
                       "test_a_table_keeps_both_zeros", "test_more_aggregates",
                       "test_a_window_over_both_zeros_emits_each", "test_user_functions_against_duckdb",
                       "test_python_aggregates_against_duckdb"}


@pytest.fixture
def make_pipeline(make_pipeline, placement, request):
    placement["local_step_rows"] = 0 if request.node.originalname in EVERY_STEP_ON_SPARK else 4
    placement["scratch_rows"] = 8
    placement["driver_rows"] = 2   # filters, projections and partial sums on Spark too
    made = []

    def make(*a, **kw):
        made.append(make_pipeline(*a, **kw))
        return made[-1]

    yield make
    for p in made:   # a Spark step that fails is re-run on the driver: none of these may need that
        if p.engine is not None:
            assert p.engine.stats.spark_fallbacks == 0, p.engine.stats.last_spark_error
    assert any(p.engine is not None and p.engine.stats.steps_spark for p in made), "no step ran on Spark"


def test_steps_ran_on_spark(make_pipeline, placement):
    placement["local_step_rows"] = 0
    p = make_pipeline("CREATE TABLE t (k INT, v INT); CREATE MATERIALIZED VIEW s AS SELECT k, SUM(v) AS v FROM t GROUP BY k;")
    import pandas as pd
    p.input_pandas("t", pd.DataFrame({"k": [1, 1, 2], "v": [1, 2, 3]}))
    p.wait_for_idle()
    assert p.status()["steps_run_on"]["driver"] == 0 and p.status()["steps_run_on"]["spark"] >= 1
    assert sorted(p.query("SELECT k, v FROM s ORDER BY k"), key=str) == [{"k": 1, "v": 3}, {"k": 2, "v": 3}]


def test_aggregate_changes_with_null_sums_on_spark(make_pipeline, placement):
    """The accumulating aggregates' output rule on Spark (old and new totals from one pass over the state): an
    existing group whose change holds only NULLs keeps its SUM; a group whose state holds only NULLs takes the
    change's; a delete that leaves no non-NULL value turns SUM and AVG to NULL; emptied groups leave."""
    import duckdb
    import pandas as pd
    from ..support.oracle import bag, bag_from_changes, diff
    placement["local_step_rows"] = 0
    view = "SELECT k, SUM(v) AS s, AVG(v) AS a, COUNT(v) AS n, COUNT(*) AS c FROM t GROUP BY k"
    p = make_pipeline(f"CREATE TABLE t (k INT, v INT); CREATE MATERIALIZED VIEW g AS {view};")
    changes = p.listen("g")
    rows = []
    steps = [(False, [(1, 10), (2, None), (None, 4)]), (False, [(1, None), (2, None), (None, None)]),
             (False, [(2, 5), (3, None)]), (True, [(1, 10)]), (True, [(2, None), (None, 4)]),
             (True, [(1, None), (2, None), (2, 5), (3, None), (None, None)])]
    for i, (delete, batch) in enumerate(steps):
        p.input_pandas("t", pd.DataFrame(batch, columns=["k", "v"], dtype=object), delete=delete)
        p.wait_for_idle()
        for r in batch:
            rows.remove(r) if delete else rows.append(r)
        con = duckdb.connect()
        con.execute("CREATE TABLE t (k INT, v INT)")
        if rows:
            con.executemany("INSERT INTO t VALUES (?, ?)", rows)
        want = bag(con.execute(view).fetchall())
        got = bag(tuple(r.values()) for r in p.query("SELECT * FROM g"))
        assert not diff(got, want), f"step {i}: {diff(got, want)}"
        streamed = bag_from_changes(changes.to_pandas())   # the changes delivered so far, summed
        assert not diff(streamed, want), f"step {i}: changes {diff(streamed, want)}"
    assert p.status()["steps_run_on"]["driver"] == 0


def test_state_frames_are_kept_between_steps(make_pipeline, placement):
    """A DataFrame over an operator's runs is built once per run list (``SparkState.runs_frame``): read again while
    the runs are the same, it is the same frame; a step that adds a run gives a new one; at most
    ``placement.runs_frames``."""
    import pandas as pd
    placement["local_step_rows"] = 0
    p = make_pipeline("CREATE TABLE t (k INT, v INT); CREATE MATERIALIZED VIEW s AS SELECT k, SUM(v) AS v FROM t "
                      "GROUP BY k;")
    p.input_pandas("t", pd.DataFrame({"k": [1, 2], "v": [1, 2]}))
    p.wait_for_idle()
    eng = p.engine
    table = eng.ctx.table_integral("t")
    first = eng.sparks.read_state(table)
    assert eng.sparks.read_state(table) is first
    p.input_pandas("t", pd.DataFrame({"k": [3], "v": [3]}))
    p.wait_for_idle()
    second = eng.sparks.read_state(table)
    assert second is not first and sorted(r.c0 for r in second.collect()) == [1, 2, 3]
    assert eng.sparks.frames_kept > 1
    eng.placement = eng.placement.replace(runs_frames=1)
    p.input_pandas("t", pd.DataFrame({"k": [4], "v": [4]}))
    p.wait_for_idle()
    assert eng.sparks.read_state(table) is not second and eng.sparks.frames_kept == 1
