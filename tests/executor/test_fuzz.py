"""The differential fuzzer in CI (``tests/fuzz``): fixed seeds on the driver, a few with every step on Spark, and
the saved regressions replayed.

Every program's views are checked against DuckDB after every step, as bags with exact multiplicities
(``tests.fuzz.runner``).  A seed or a regression that still fails because of an open bug is a strict xfail
naming the bug, so that it flips when the bug is fixed.  Long runs: ``python -m benchmarks.fuzz``.
"""
import pytest

from tests.fuzz import saved
from tests.fuzz.generator import generate
from tests.fuzz.runner import run

DRIVER_SEEDS = range(0, 70)
SPARK_SEEDS = (1, 8, 102)   # 102: AVG(DISTINCT DECIMAL) on Spark kept 6 digits
# seed -> the open bug it finds (each has a shrunk reproduction under tests/fuzz/regressions/)
KNOWN_FAILING: dict = {}   # (the open bugs these seeds found before the generator changed are saved regressions)
KNOWN_FAILING_ON_SPARK: dict = {}


def _mark(seeds, known):
    return [pytest.param(s, marks=pytest.mark.xfail(strict=True, reason=known[s])) if s in known else s
            for s in seeds]


def test_programs_are_a_function_of_the_seed():
    assert generate(7).to_json() == generate(7).to_json()
    assert generate(7).to_json() != generate(8).to_json()


@pytest.mark.parametrize("seed", _mark(DRIVER_SEEDS, KNOWN_FAILING))
def test_seed_on_the_driver(seed):
    o = run(generate(seed))
    assert o.failure is None, f"seed {seed}: {o.failure} (view {o.view}, step {o.step}): {o.detail}"


@pytest.mark.parametrize("seed", _mark(SPARK_SEEDS, KNOWN_FAILING_ON_SPARK))
def test_seed_with_every_step_on_spark(spark, seed):
    o = run(generate(seed), spark=spark)
    assert o.failure is None, f"seed {seed}: {o.failure} (view {o.view}, step {o.step}): {o.detail}"
    assert o.steps_on_spark and not o.steps_on_driver


def _regression(name):
    _, meta = saved.load(name)
    marks = [pytest.mark.xfail(strict=True, reason=meta["xfail"])] if meta.get("xfail") else []
    return pytest.param(name, marks=marks)


@pytest.mark.parametrize("name", [_regression(n) for n in saved.names()])
def test_saved_regression(request, name):
    program, meta = saved.load(name)
    spark = None
    if meta["executor"] == "spark":
        spark = request.getfixturevalue("spark")   # every step on Spark
    o = run(program, spark=spark)
    for _ in range(meta.get("retries", 0)):   # (a finding whose reproduction depends on timing: see its "why")
        if o.failure is None:
            break
        o = run(program, spark=spark)
    if meta.get("expect"):   # a known class: e.g. a Spark step that fails where a row error belongs, re-run on
        # the driver, which records it (``spark_fallback``); anything else (no row error at all) is a failure
        assert o.failure == meta["expect"], f"{name}: {o.failure} (view {o.view}, step {o.step}): {o.detail}"
        return
    assert o.failure is None, f"{name}: {o.failure} (view {o.view}, step {o.step}): {o.detail}"
