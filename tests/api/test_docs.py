"""The code blocks of README.md and docs/**/*.md run as written.

Every fenced block has a language, and what the test does with it follows from the language:

* ``python``: the block runs (in a temporary working directory); a comment that states a printed value
  (``print(x)   # [1, 2]``, or a line ``# [...]`` right after the print) must match a line of its output,
  ``...`` matching anything. The blocks below with more to check have their own tests.
* ``sql``: the block is a whole program and compiles (``sqlengine check``: the SQL and its connector
  declarations).
* ``sh``: every ``sqlengine`` command runs (``check``, ``explain``) or at least parses (the others need a
  running pipeline or server); every ``./run.sh`` command is one that run.sh has; nothing else.
* ``text``: output shown in the docs, not code (some tests compare it with what the code prints).

A block that cannot run here is marked by an HTML comment on the line before it,
``<!-- not-run: the reason -->``, naming where it is tested instead if it is. Snippet lines
(``--8<-- "path"``, pymdownx.snippets) are replaced by the file they include, as MkDocs does.
"""
import glob
import json
import os
import re
import shlex
from dataclasses import dataclass
from typing import List, Optional

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
README = os.path.join(ROOT, "README.md")
LANGUAGES = {"python", "sql", "sh", "text"}


def doc_files() -> List[str]:
    return [README] + sorted(glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True))


@dataclass(frozen=True)
class Block:
    path: str              # relative to the repository root
    line: int              # of the opening fence, 1-based
    lang: str
    text: str
    marker: Optional[str]  # the HTML comment on the line before the fence, if any

    @property
    def id(self) -> str:
        return f"{self.path}:{self.line}"


def _include_snippets(text: str) -> str:
    def include(m):
        with open(os.path.join(ROOT, m.group(1))) as f:
            return f.read().rstrip("\n")
    return re.sub(r'^--8<-- "([^"]+)"$', include, text, flags=re.M)


def all_blocks() -> List[Block]:
    """Every fenced block of the docs, in file order."""
    out = []
    for path in doc_files():
        lines = open(path).read().split("\n")
        i = 0
        while i < len(lines):
            m = re.match(r"^```(\S*)\s*$", lines[i])
            if not m:
                i += 1
                continue
            start = i
            j = i + 1
            while not lines[j].startswith("```"):
                j += 1
            prev = next((lines[k].strip() for k in range(start - 1, -1, -1) if lines[k].strip()), "")
            marker = prev if prev.startswith("<!--") else None
            text = _include_snippets("\n".join(lines[start + 1:j]) + "\n")
            out.append(Block(os.path.relpath(path, ROOT), start + 1, m.group(1), text, marker))
            i = j + 1
    return out


BLOCKS = all_blocks()


def blocks(language: str, containing: str) -> List[str]:
    """The texts of the docs' blocks of ``language`` whose text contains ``containing``."""
    return [b.text for b in BLOCKS if b.lang == language and containing in b.text]


def python_blocks(containing: str) -> List[str]:
    return blocks("python", containing)


def not_run(b: Block) -> bool:
    return b.marker is not None and b.marker.startswith("<!-- not-run")


# -------------------------------------------------------------------------------------------- python
def expected_outputs(code: str) -> List[str]:
    """The values the block's comments say it prints: ``print(...)  # [..]`` and ``# [..]`` lines after a
    print. Only comments that look like a printed value (start with [ { or ( and end like one) count."""
    out = []
    prev_print = False
    for line in code.splitlines():
        s = line.strip()
        m = re.match(r"^print\(.*\)\s+#\s(.+)$", s)
        comment = m.group(1) if m else (s[2:] if s.startswith("# ") and prev_print else None)
        if comment and re.match(r"^[\[{(]", comment) and re.search(r"[\]})\d]$", comment):
            out.append(comment)
        if s.startswith("print("):
            prev_print = True
        elif not s.startswith("#"):
            prev_print = False
    return out


def check_output(code: str, out: str) -> None:
    lines = [line.strip() for line in out.splitlines()]
    for expected in expected_outputs(code):
        pattern = ".*".join(re.escape(part) for part in expected.split("..."))
        assert any(re.fullmatch(pattern, line) for line in lines), (expected, out[-3000:])


def run_python(code: str, capsys, where: str = "docs") -> tuple:
    """Run a block, check the values its comments state, and return (its globals, its output)."""
    g: dict = {"__name__": "__docs__"}
    exec(compile(code, where, "exec"), g)
    out = capsys.readouterr().out
    check_output(code, out)
    return g, out


# The blocks with their own tests below (by a piece of their text); every other python block runs in
# test_python_block.
SPECIFIC = ["class Countdown", "'emit_final' = 'window_end'", '"name": "file_input"',
            '"name": "datagen", "config": config', '"name": "nexmark", "config"',
            '"mode": "snapshot"}},\n     "format": {"name": "csv"}}])', '"name": "delta_table_input"',
            '"name": "iceberg_output"', "CREATE MATERIALIZED VIEW last_hour",
            "FROM SESSION(bid, ts, INTERVAL '10' SECOND, bidder)", "CREATE ROLE app"]
# What the prose after a block says it prints.
STATED = {'name="quickstart"':
          "[{'auction': 1, 'n': 1, 'top': 20}, {'auction': 2, 'n': 1, 'top': 50}, {'auction': 3, 'n': 1, 'top': 99}]",
          'name="transactions"': "0 []"}

GENERIC_PYTHON = [b for b in BLOCKS if b.lang == "python" and not not_run(b)
                  and not any(s in b.text for s in SPECIFIC)]


def test_every_block_is_classified():
    """Every block has a language the tests know; every exemption gives its reason; exemptions stay few."""
    for b in BLOCKS:
        assert b.lang in LANGUAGES, f"{b.id}: fenced block without a known language ({b.lang!r})"
        if b.marker is not None and b.marker.startswith("<!-- not-run"):
            assert re.match(r"<!-- not-run: \S.+ -->$", b.marker), f"{b.id}: a not-run marker needs a reason"
            assert b.lang != "text", f"{b.id}: text blocks never run; no marker needed"
    exempt = [b.id for b in BLOCKS if not_run(b)]
    assert len(exempt) <= 3, exempt
    for s in SPECIFIC:
        assert any(s in b.text for b in BLOCKS), f"no block holds {s!r} any more: update SPECIFIC"


@pytest.mark.parametrize("block", GENERIC_PYTHON, ids=lambda b: b.id)
def test_python_block(block, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _, out = run_python(block.text, capsys, block.id)
    for marker, expected in STATED.items():
        if marker in block.text:
            assert expected in out.splitlines(), out[-2000:]


# -------------------------------------------------------------------------------------------- sql
@pytest.mark.parametrize("block", [b for b in BLOCKS if b.lang == "sql" and not not_run(b)], ids=lambda b: b.id)
def test_sql_block_compiles(block):
    from sqlengine.cli import format_error, program_errors
    errors, program = program_errors(block.text)
    assert not errors, "\n".join(format_error(block.id, e) for e in errors)
    assert program.tables or program.views


# -------------------------------------------------------------------------------------------- sh
def _run_sh_commands():
    with open(os.path.join(ROOT, "run.sh")) as f:
        case = f.read().split('case "$cmd" in', 1)[1]
    return set(re.findall(r"^    ([a-z-]+)\)", case, re.M))


def shell_commands(text: str) -> List[List[str]]:
    return [words for line in text.splitlines() if (words := shlex.split(line, comments=True))]


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.lang == "sh" and not not_run(b)
                                   and not any(s in b.text for s in SPECIFIC)], ids=lambda b: b.id)
def test_sh_block(block, monkeypatch):
    """``sqlengine check`` and ``explain`` run and succeed; other sqlengine commands parse (their options
    exist, their values have the right types); ``./run.sh`` commands exist."""
    from click.testing import CliRunner

    from sqlengine.cli import main
    monkeypatch.chdir(ROOT)
    run_sh = _run_sh_commands()
    for words in shell_commands(block.text):
        if words[0] == "./run.sh":
            assert words[1] in run_sh, f"{block.id}: ./run.sh has no command {words[1]!r}"
        elif words[0] == "sqlengine":
            name, args = words[1], words[2:]
            if name in ("check", "explain"):
                r = CliRunner().invoke(main, [name] + args)
                assert r.exit_code == 0, (block.id, words, r.output)
            else:
                cmd = main.get_command(None, name)
                assert cmd is not None, f"{block.id}: sqlengine has no command {name!r}"
                cmd.make_context(name, list(args))          # raises on an unknown option or a bad value
        else:
            pytest.fail(f"{block.id}: a shell command the docs test cannot check: {' '.join(words)}")


# -------------------------------------------------------------------------------------------- specific examples
def test_custom_source_example(capsys):
    (block,) = python_blocks("class Countdown")
    _, out = run_python(block, capsys)
    assert "[{'total': 6}]" in out


def test_event_time_example(capsys):
    """The event-time example prints what the docs say it prints (the emitted windows, once each, the late
    row count and the watermark), the late bid is in the dead-letter file, and the explain excerpt is explain's."""
    (block,) = python_blocks("'emit_final' = 'window_end'")
    (expected,) = blocks("text", "{'bid': 1} {'bid': '2024-01-01 00:00:21'}")
    (excerpt,) = blocks("text", "emit final: window_end")
    g, out = run_python(block, capsys)
    assert out.splitlines() == expected.splitlines(), out
    p = g["p"]
    with open(os.path.join(p.storage_dir, "dead_letter", "bid.late.jsonl")) as f:
        late = [json.loads(line) for line in f]
    assert [r["row"]["price"] for r in late] == [99], late
    assert excerpt.strip() in p.explain("closed_windows"), p.explain("closed_windows")


def test_connector_examples(capsys):
    """The examples of the built-in connectors that need no outside system (Kafka's run in test_kafka)."""
    for marker, expect in [('"name": "file_input"', "['2024-06-01.csv', '2024-06-02.csv'] 1"),
                           ('"name": "datagen", "config": config', "'rows': 100000"),
                           ('"name": "nexmark", "config"', "'category': 10"),
                           ('"mode": "snapshot"}},\n     "format": {"name": "csv"}}])', "step-")]:
        (block,) = python_blocks(marker)
        _, out = run_python(block, capsys)
        assert expect in out, (marker, out[-2000:])


@pytest.mark.parametrize("module, marker, expect", [
    ("deltalake", '"name": "delta_table_input"',
     ["[{'customer': 'ann', 'n': 2, 'total': 22}, {'customer': 'cy', 'n': 1, 'total': 1}]"]),
    ("pyiceberg", '"name": "iceberg_output"',
     ["[{'customer': 'ann', 'n': 2, 'total': Decimal('17.75')}, {'customer': 'cy', 'n': 1, 'total': Decimal('1.00')}]",
      "['customer', 'n', 'total', '__weight', '__step'] 4"]),
])
def test_lake_examples(capsys, module, marker, expect):
    """The Delta Lake and Iceberg examples: local tables in temporary directories, no outside system."""
    pytest.importorskip(module)
    (block,) = python_blocks(marker)
    _, out = run_python(block, capsys)
    for e in expect:
        assert e in out, (marker, out[-2000:])


def test_postgres_example(tmp_path, monkeypatch):
    """The docs' PostgreSQL program (= examples/postgres_shop.sql), on a throwaway server prepared with the
    docs' commands: the snapshot, then an update, a delete and an insert reach the PostgreSQL output table
    and the Delta mirror."""
    pytest.importorskip("psycopg")
    pytest.importorskip("deltalake")
    from deltalake import DeltaTable

    from sqlengine import Pipeline
    from tests.support.postgres_server import PostgresServer, PostgresUnavailable
    from tests.connectors.test_postgres import wait_consumed, wait_delivered, wal_lsn

    (program,) = blocks("sql", '"name": "postgres_input"')
    example = open(os.path.join(ROOT, "examples", "postgres_shop.sql")).read()
    assert example.endswith(program), "examples/postgres_shop.sql differs from the docs' program"
    (setup,) = blocks("sh", "CREATE ROLE app")
    try:
        pg = PostgresServer().start()
    except PostgresUnavailable as e:
        pytest.skip(str(e))
    p = None
    try:
        app_uri = f"postgresql://app@127.0.0.1:{pg.port}/shop"
        for line in setup.splitlines():
            for command in re.findall(r'-c "([^"]+)"', line):
                if "sudo -u postgres psql" in line:
                    pg.execute(command)                      # as the superuser
                else:
                    assert "psql postgresql://app:secret@127.0.0.1:5432/shop" in line, line
                    with pg.connect("shop", user="app") as c:   # as app (the test server trusts local users)
                        c.execute(command)
        import psycopg
        conn = psycopg.connect(app_uri, autocommit=True)
        conn.execute("INSERT INTO orders VALUES (1, 10, 5.00), (2, 10, 7.50), (3, 11, 1.25)")

        monkeypatch.chdir(tmp_path)                          # the Delta mirror goes to lake/customer_totals here
        before = wal_lsn(conn)
        p = Pipeline.from_sql(program.replace("127.0.0.1:5432", f"127.0.0.1:{pg.port}"),
                              storage_dir=str(tmp_path / "storage"))
        p.start()

        def check(expected):
            wait_delivered(p)
            got = {tuple(r.values()) for r in p.query("SELECT * FROM customer_totals")}
            assert got == expected, got
            assert set(conn.execute("SELECT customer, n, total FROM customer_totals").fetchall()) == expected
            mirror = DeltaTable(str(tmp_path / "lake" / "customer_totals")).to_pyarrow_table().to_pylist()
            assert {tuple(r.values()) for r in mirror} == expected, mirror

        from decimal import Decimal as D
        wait_consumed(p, before, keys=("orders.pg",))
        check({(10, 2, D("12.50")), (11, 1, D("1.25"))})
        before = wal_lsn(conn)
        with conn.transaction():
            conn.execute("UPDATE orders SET amount = amount + 1 WHERE id = 1")
            conn.execute("DELETE FROM orders WHERE id = 3")
            conn.execute("INSERT INTO orders VALUES (4, 12, 2.00)")
        wait_consumed(p, before, keys=("orders.pg",))
        check({(10, 2, D("13.50")), (12, 1, D("2.00"))})
        st = p.status()["connectors"]["orders.pg"]
        assert st["errors"] == 0, st   # (the status names the last error)
        conn.close()
    finally:
        if p is not None:
            p.stop(force=True)
        pg.stop()


def test_connector_option_tables():
    """Every option table in the docs lists exactly its connector's options, with their defaults and choices,
    and every built-in connector has one."""
    from connectors.base import SINKS, SOURCES
    seen = set()
    for path in doc_files():
        text = open(path).read()
        tables = re.finditer(r"^\*\*(\w+)\*\*[^\n]*(?:\n[^\n|]+)*\n\n\| option \| type \| default \| meaning \|\n"
                             r"\|---\|---\|---\|---\|\n((?:\|[^\n]*\n)+)", text, re.M)
        for m in tables:
            name, body = m.group(1), m.group(2)
            cls = SOURCES.get(name) or SINKS.get(name)
            assert cls is not None, f"{path} documents options of an unknown connector {name}"
            seen.add(name)
            rows = {}
            for line in body.splitlines():
                cells = [c.strip() for c in line.strip("|").split(" | ")]
                key = re.fullmatch(r"`([^`]+)`", cells[0])
                if key:
                    rows[key.group(1)] = cells
            assert set(rows) == set(cls.OPTIONS), (name, set(rows) ^ set(cls.OPTIONS))
            for k, o in cls.OPTIONS.items():
                _, typ, default, _ = rows[k]
                if o.required:
                    assert default == "required", (name, k, default)
                elif o.default is None:
                    assert default in ("—", "derived"), (name, k, default)
                else:
                    assert json.loads(default.strip("`")) == o.default, (name, k, default, o.default)
                if o.choices:
                    assert {json.loads(c) for c in re.findall(r"`([^`]+)`", typ)} == set(o.choices), (name, k, typ)
    built_in = {n for reg in (SOURCES, SINKS) for n, c in reg.items() if c.__module__.startswith("connectors.")}
    assert built_in <= seen, built_in - seen


def test_now_example(capsys):
    """The NOW() example: a row leaves the temporal filter when the clock passes it."""
    (block,) = python_blocks("CREATE MATERIALIZED VIEW last_hour")
    _, out = run_python(block, capsys)
    assert out.splitlines()[-2:] == ["[1]", "[]"]


def test_session_and_asof_example(capsys):
    """The SESSION / ASOF example prints what its comments say."""
    (block,) = python_blocks("FROM SESSION(bid, ts, INTERVAL '10' SECOND, bidder)")
    _, out = run_python(block, capsys)
    expected = [line[2:] for line in block.splitlines() if line.startswith("# [")]
    assert out.splitlines()[-3:] == expected


# -------------------------------------------------------------------------------------------- links
def test_readme_links_resolve():
    """The README's relative links (into docs/ and the repository) point at files that exist; the docs'
    own links are checked by `mkdocs build --strict` (./run.sh test)."""
    text = open(README).read()
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text):
        if "://" not in target:
            assert os.path.exists(os.path.join(ROOT, target)), target


# A measured figure: a time, a rate, a size in MiB/GiB, or a speed ratio (9×, 9x, 9-fold, 9 times faster).
_AMOUNT = r"\d+(?:[.,]\d+)*(?:\s?[kM])?\s?(?:ms|µs|s|seconds|hours|[a-z]+/s|MiB|GiB|MB|GB)(?!\w)"
FIGURE = re.compile(rf"\b{_AMOUNT}|\b\d+(?:\.\d+)?\s?[×x](?!\w)|\b\d+(?:\.\d+)?-fold\b"
                    r"|\b\d+(?:\.\d+)? times (?:faster|slower|as)\b")
# A default stated as one is a setting: "(default 500 ms)", "1 s by default".
DEFAULT = re.compile(rf"\bdefault:? {_AMOUNT}|\b{_AMOUNT} by default")
# Settings, limits, targets and benchmark parameters written like figures: exact phrases (whitespace collapsed).
NOT_MEASURED = [
    "added later are found within 10 s",        # kafka.md: the connector's metadata refresh interval
    "facility every 10 s",                      # kafka.md: rate limit of librdkafka's log lines
    "backoff (up to 10 s)",                     # operations/errors.md: the retry backoff's cap
    "at most once per 30 s per connector",      # operations/errors.md: rate limit of the warnings
    "bodies over 64 MiB",                       # server.md: the request body limit (413)
    "keys (up to 64 MiB)",                      # design.md: the broadcast limit of the clamp's keys
    "(about 2-3x the executors' cores)",        # operations/cluster.md: advice for a Spark setting
    "(target with LATENESS: within 1.2×)",      # developer.md: a benchmark's target
    "with a 4 s watermark",                     # developer.md: the windowed Nexmark benchmark's parameter
    "at 1k and 10k changes/s",                  # developer.md: the CDC benchmark's input rates
    "with a 1 GiB cache budget",                # developer.md: the state_disk benchmark's parameter
    "with a 1 GiB budget",                      # SCALING.md: the same parameter
]


def test_no_figures_in_the_docs():
    """Measured figures live in benchmarks/RESULTS.md (docs/benchmarks.md includes it): no other page of docs/
    quotes one; it links to the section of RESULTS.md that holds it. Code (fenced blocks, `spans`) is SQL,
    options and output, not prose figures, and is left out."""
    pages = [p for p in doc_files() if p != README and os.path.basename(p) != "benchmarks.md"]
    assert any(p.endswith("SCALING.md") for p in pages) and any(p.endswith("limitations.md") for p in pages)
    used = set()
    found = []
    for path in pages:
        text = re.sub(r"^```.*?^```", " ", open(path).read(), flags=re.M | re.S)
        text = " ".join(re.sub(r"`[^`]*`", "`...`", text).split())
        for phrase in NOT_MEASURED:
            if phrase in text:
                used.add(phrase)
                text = text.replace(phrase, " ")
        text = DEFAULT.sub(" ", text)
        found += [f"{os.path.relpath(path, ROOT)}: ...{text[max(0, m.start() - 50):m.end() + 20]}..."
                  for m in FIGURE.finditer(text)]
    assert not found, "measured figures belong in benchmarks/RESULTS.md:\n" + "\n".join(found)
    assert used == set(NOT_MEASURED), f"allowlisted phrases no page has any more: {set(NOT_MEASURED) - used}"


def test_mkdocs_build_strict(tmp_path):
    """The site builds with no warning (broken links, anchors, nav entries, snippet paths): what ./run.sh test
    runs before pytest. Not with --quiet, which drops the warnings that strict mode counts."""
    pytest.importorskip("mkdocs")
    pytest.importorskip("material")
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                       cwd=ROOT, capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, NO_MKDOCS_2_WARNING="1"))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
