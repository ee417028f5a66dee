"""Smoke test of benchmarks/nexmark_throughput.py: a --quick engine-only run writes its report section
with one row per requested query, and every view matches DuckDB's recomputation (no timing assertions)."""
import pytest

from benchmarks import nexmark_throughput

pytestmark = pytest.mark.slow   # a long real-system or Spark test: ./run.sh test -m "not slow" skips it

QUERIES = ["q00", "q01", "q02", "q03", "q04"]


def test_nexmark_throughput_quick(spark, tmp_path):
    out = tmp_path / "RESULTS.md"
    rc = nexmark_throughput.main(["--quick", "--peers", "none", "--queries", ",".join(QUERIES),
                                  "--out", str(out), "--work-dir", str(tmp_path)], spark=spark)
    text = out.read_text()
    assert "<!-- BEGIN nexmark -->" in text and "<!-- END nexmark -->" in text
    rows = [line for line in text.splitlines() if line.startswith("| q")]
    for q in QUERIES:
        assert any(r.startswith(f"| {q} | ") and "| OK |" in r for r in rows), f"no checked row for {q}:\n{text}"
    assert rc == 0
