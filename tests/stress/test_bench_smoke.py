"""Smoke run of the step-latency benchmark at a tiny scale: it runs end to end, checks every view against
DuckDB, and writes its report section.  No timing is asserted (figures belong in benchmarks/RESULTS.md)."""
import pytest

from benchmarks import run as bench

pytestmark = pytest.mark.slow   # a long real-system or Spark test: ./run.sh test -m "not slow" skips it


def test_step_latency_benchmark_smoke(spark, tmp_path):
    out = tmp_path / "RESULTS.md"
    rc = bench.main(["--sizes", "2000", "--steps", "2", "--change", "10", "--no-warmup",
                     "--workloads", "groupby,minmax,join,q3", "--out", str(out)])
    text = out.read_text()
    assert rc == 0, text
    assert "<!-- BEGIN latency -->" in text and "## Targets (issue 5)" in text
    for w in ("groupby", "minmax", "join", "q3"):
        assert f"- {w} N=2,000: **OK**" in text
    assert "point lookup p50" in text
