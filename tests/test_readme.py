"""The README's examples run as written."""
import json
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")


def blocks(language: str, containing: str):
    """The README's fenced blocks of ``language`` ("" for none) whose text contains ``containing``."""
    text = open(README).read()
    return [b for lang, b in re.findall(r"^```(\w*)\n(.*?)^```$", text, re.S | re.M)
            if lang == language and containing in b]


def python_blocks(containing: str):
    return blocks("python", containing)


def test_custom_source_example(capsys):
    (block,) = python_blocks("class Countdown")
    exec(compile(block, "README.md", "exec"), {})
    assert "[{'total': 6}]" in capsys.readouterr().out


def test_event_time_example(capsys):
    """The event-time example prints what the README says it prints (the emitted windows, once each, the late
    row count and the watermark), the late bid is in the dead-letter file, and the explain excerpt is explain's."""
    (block,) = python_blocks("'emit_final' = 'window_end'")
    (expected,) = blocks("", "{'bid': 1} {'bid': '2024-01-01 00:00:21'}")
    (excerpt,) = blocks("", "emit final: window_end")
    g: dict = {}
    exec(compile(block, "README.md", "exec"), g)
    out = capsys.readouterr().out
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
        exec(compile(block, "README.md", "exec"), {})
        out = capsys.readouterr().out
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
    exec(compile(block, "README.md", "exec"), {})
    out = capsys.readouterr().out
    for e in expect:
        assert e in out, (marker, out[-2000:])


def test_postgres_example(tmp_path, monkeypatch):
    """The README's PostgreSQL program (= examples/postgres_shop.sql), on a throwaway server prepared with the
    README's commands: the snapshot, then an update, a delete and an insert reach the PostgreSQL output table
    and the Delta mirror."""
    pytest.importorskip("psycopg")
    pytest.importorskip("deltalake")
    from deltalake import DeltaTable

    from sqlengine import Pipeline
    from tests.postgres_server import PostgresServer, PostgresUnavailable
    from tests.test_postgres import wait_consumed, wait_delivered, wal_lsn

    (program,) = blocks("sql", '"name": "postgres_input"')
    example = open(os.path.join(ROOT, "examples", "postgres_shop.sql")).read()
    assert example.endswith(program), "examples/postgres_shop.sql differs from the README's program"
    (setup,) = blocks("", "CREATE ROLE app")
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
        assert p.status()["connectors"]["orders.pg"]["errors"] == 0
        conn.close()
    finally:
        if p is not None:
            p.stop(force=True)
        pg.stop()


def test_connector_option_tables():
    """Every option table in the README lists exactly its connector's options, with their defaults and choices,
    and every built-in connector has one."""
    from connectors.base import SINKS, SOURCES
    text = open(README).read()
    tables = re.finditer(r"^\*\*(\w+)\*\*[^\n]*(?:\n[^\n|]+)*\n\n\| option \| type \| default \| meaning \|\n"
                         r"\|---\|---\|---\|---\|\n((?:\|[^\n]*\n)+)", text, re.M)
    seen = set()
    for m in tables:
        name, body = m.group(1), m.group(2)
        cls = SOURCES.get(name) or SINKS.get(name)
        assert cls is not None, f"README documents options of an unknown connector {name}"
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
    exec(compile(block, "README.md", "exec"), {})
    assert capsys.readouterr().out.splitlines()[-2:] == ["[1]", "[]"]


def test_session_and_asof_example(capsys):
    """The SESSION / ASOF example prints what its comments say."""
    (block,) = python_blocks("FROM SESSION(bid, ts, INTERVAL '10' SECOND, bidder)")
    exec(compile(block, "README.md", "exec"), {})
    expected = [line[2:] for line in block.splitlines() if line.startswith("# [")]
    assert capsys.readouterr().out.splitlines()[-3:] == expected
