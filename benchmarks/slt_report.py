"""Run the sqllogictest files (tests/slt/*.test) through the engine and report pass rates.

    python -m benchmarks.slt_report [--files F ...] [--max-queries N] [--no-differential]
                                    [--out benchmarks/RESULTS.md] [--show-wrong 10]

Prints a per-file table (records, queries, passed, wrong results, mismatches shared with
DuckDB, unsupported, errors, time), the unsupported/error reasons with counts, and the
first wrong results with their SQL; with ``--out`` writes the same between the
``<!-- BEGIN slt -->`` / ``<!-- END slt -->`` markers of that file (appending them if absent).
"""
from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import subprocess
import sys
import time
from collections import Counter
from typing import List

from tests.slt.runner import DBNAME, FileResult, run_file, test_files
from benchmarks.report import write_section



def _machine() -> str:
    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2 ** 30
    except (ValueError, OSError, AttributeError):
        mem = float("nan")
    return f"{os.cpu_count()} cores (nproc), {mem:.0f} GiB RAM, {platform.system()} {platform.machine()}"


def _commit() -> str:
    if os.environ.get("SLT_COMMIT"):  # e.g. when run from an exported tree of a commit
        return os.environ["SLT_COMMIT"]
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10,
                             cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "planner", "sqlengine"], capture_output=True,
                               text=True, timeout=10, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        return out.stdout.strip() + (" (engine files modified in the working tree)" if dirty.stdout.strip() else "")
    except Exception:
        return "?"


def _md_escape(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def render(results: List[FileResult], command: str, max_queries, differential: str, show_wrong: int,
           wall: float) -> str:
    lines = []
    lines.append("## sqllogictest (SQLite's .test files through the engine)")
    lines.append("")
    lines.append(f"- Date: {dt.datetime.now(dt.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}; machine: {_machine()}; "
                 f"git commit {_commit()}")
    lines.append(f"- Command: `{command}`")
    cap = f"the first {max_queries} query records of each file" if max_queries else "every query record"
    lines.append(f"- Scope: {cap} (after skipif/onlyif filtering as database `{DBNAME}`); "
                 f"differential phase (delete a random third of each table's rows, re-insert them, compare every "
                 f"view and its integrated change stream with DuckDB) {differential}. "
                 f"Wall time {wall:.0f} s.")
    lines.append("- Columns: *pass* = the view's contents, read back and formatted with the file's sort mode "
                 "and hashing, match the recorded answer (and, with the differential phase, stay equal to "
                 "DuckDB's recomputation); *wrong* = a different result (an engine bug until shown otherwise); "
                 "*as DuckDB* = the same mismatch DuckDB gives for the same query (a SQLite dialect difference); "
                 "*unsupported* = rejected by the engine (reasons below); *error* = crashed. *DuckDB* = how many "
                 "of the queries DuckDB answers as recorded, for context. *pass %* is of all queries run. "
                 "*diff. checked* = passing views that also matched DuckDB after the deletes and after the re-inserts.")
    lines.append("")
    lines.append("| file | records | queries | pass | wrong | as DuckDB | unsupported | error | skipped | DuckDB | pass % | diff. checked | pipelines | time (s) |")
    lines.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    tot = Counter()
    for r in results:
        row = dict(records=r.records, queries=r.queries, ok=r.count("pass"), wrong=r.count("wrong"),
                   dialect=r.count("dialect"), unsup=r.count("unsupported"), error=r.count("error"),
                   skipped=r.skipped, duck=r.duckdb_pass, pipes=r.pipelines, diff=r.differential_views)
        tot.update(row)
        tot["secs"] += r.seconds
        pct = 100.0 * row["ok"] / row["queries"] if row["queries"] else 0.0
        lines.append(f"| {os.path.basename(r.path)} | {row['records']} | {row['queries']} | {row['ok']} | "
                     f"{row['wrong']} | {row['dialect']} | {row['unsup']} | {row['error']} | {row['skipped']} | "
                     f"{row['duck']} | {pct:.1f} | {row['diff']} | {row['pipes']} | {r.seconds:.0f} |")
    pct = 100.0 * tot["ok"] / tot["queries"] if tot["queries"] else 0.0
    lines.append(f"| **total** | {tot['records']} | {tot['queries']} | {tot['ok']} | {tot['wrong']} | "
                 f"{tot['dialect']} | {tot['unsup']} | {tot['error']} | {tot['skipped']} | {tot['duck']} | "
                 f"{pct:.1f} | {tot['diff']} | {tot['pipes']} | {tot['secs']:.0f} |")
    lines.append("")
    st = Counter()
    for r in results:
        st.update(r.statements)
    if st:
        lines.append("Statement records: " + ", ".join(f"{k} {v}" for k, v in sorted(st.items())) +
                     " (*unexpected outcome*: DuckDB, holding the tables, disagreed with `statement ok`/`error`).")
        lines.append("")
    for status, title in (("unsupported", "Unsupported records by reason"), ("error", "Errors by reason"),
                          ("dialect", "Mismatches shared with DuckDB")):
        reasons = Counter()
        per_file = {}
        for r in results:
            c = r.reasons(status)
            reasons.update(c)
            for k, v in c.items():
                per_file.setdefault(k, []).append(f"{os.path.basename(r.path).split('.')[0]} {v}")
        if not reasons:
            continue
        lines.append(f"{title} ({sum(reasons.values())}):")
        lines.append("")
        lines.append("| count | reason | files |")
        lines.append("|---:|---|---|")
        for k, v in reasons.most_common():
            lines.append(f"| {v} | {_md_escape(k)} | {', '.join(per_file[k])} |")
        lines.append("")
    wrong = [(r, o) for r in results for o in r.outcomes if o.status == "wrong"]
    lines.append(f"Wrong results ({len(wrong)}){':' if wrong else '.'}")
    lines.append("")
    for r, o in wrong[:show_wrong]:
        lines.append(f"- `{os.path.basename(r.path)}` line {o.line}: {o.reason}. {o.detail[:400]}")
        lines.append("")
        lines.append("  ```sql")
        for ln in o.sql.strip().splitlines():
            lines.append("  " + ln)
        lines.append("  ```")
    if len(wrong) > show_wrong:
        lines.append(f"- ... and {len(wrong) - show_wrong} more")
    return "\n".join(lines).rstrip() + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", nargs="*", help="test files (default: all of tests/slt/*.test)")
    ap.add_argument("--max-queries", type=int, default=None, help="query records per file (default: all)")
    ap.add_argument("--no-differential", action="store_true", help="skip the delete/re-insert phase")
    ap.add_argument("--differential-queries", type=int, default=None,
                    help="run the delete/re-insert phase only for the first N queries of each file (default: all)")
    ap.add_argument("--out", default=None, help="markdown file to write the section into (e.g. benchmarks/RESULTS.md)")
    ap.add_argument("--show-wrong", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    files = args.files or test_files()
    from sqlengine.executor.session import get_spark
    spark = get_spark({"spark.sql.shuffle.partitions": "1", "spark.driver.memory": "2g"})
    t0 = time.time()
    results = []
    command = ("python -m benchmarks.slt_report " + " ".join(argv if argv is not None else sys.argv[1:])).strip()
    diff = "off" if args.no_differential else ("on" if args.differential_queries is None else
                                                f"on for the first {args.differential_queries} queries of each file")
    for f in files:
        r = run_file(f, spark=spark, max_queries=args.max_queries, differential=not args.no_differential,
                     differential_queries=args.differential_queries, seed=args.seed)
        results.append(r)
        print(f"{os.path.basename(f)}: {r.queries} queries, {r.count('pass')} pass, {r.count('wrong')} wrong, "
              f"{r.count('dialect')} as DuckDB, {r.count('unsupported')} unsupported, {r.count('error')} errors, "
              f"{r.seconds:.0f} s", file=sys.stderr, flush=True)
        if args.out and len(results) < len(files):  # partial results survive an interrupted run
            write_section(args.out, "slt", render(results, command, args.max_queries, diff, args.show_wrong,
                                           time.time() - t0) + f"\n(Partial: {len(results)} of {len(files)} files.)\n")
    text = render(results, command, args.max_queries, diff, args.show_wrong, time.time() - t0)
    print(text)
    if args.out:
        write_section(args.out, "slt", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
