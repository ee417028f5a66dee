"""The ``sqlengine`` command line: run, check, explain and query SQL programs, and an interactive shell.

    sqlengine run program.sql [--storage DIR] [--master URL] [--conf k=v ...] [--wait-for-lock SECONDS]
                              [--log-level LEVEL] [--log-format text|json]
    sqlengine check program.sql
    sqlengine explain program.sql [VIEW]
    sqlengine query DIR|URL "SELECT ..." [--format table|csv|json|parquet] [--output FILE] [--token T]
    sqlengine shell DIR|URL [--token T]
    sqlengine serve [--host H] [--port N] [--storage ROOT] [--token T] [--log-level LEVEL] [--log-format F]

``run`` keeps the program's storage in ``DIR`` (default ``<program>.storage`` beside the program) and
writes the program there too, so that ``query DIR`` and ``shell DIR`` can read the views after it stopped.
"""
from __future__ import annotations

import json
import logging
import os
import shlex
import signal
import sys
import threading
import time
from typing import Dict, List, Optional, Sequence, Tuple

import click

PROGRAM_FILE = "program.sql"
UDFS_FILE = "udfs.json"   # the --udfs files a `sqlengine run` storage was run with
MAX_ERRORS = 50


# ------------------------------------------------------------------ errors with positions
def _statement_spans(sql: str) -> List[Tuple[int, int]]:
    """(start, end) of each statement: the text between top-level semicolons."""
    from sqlglot.errors import TokenError
    from sqlglot.tokens import Tokenizer, TokenType
    try:
        tokens = Tokenizer().tokenize(sql)
    except TokenError:
        return [(0, len(sql))]
    spans, start = [], 0
    for t in tokens:
        if t.token_type == TokenType.SEMICOLON:
            spans.append((start, t.end + 1))
            start = t.end + 1
    if sql[start:].strip():
        spans.append((start, len(sql)))
    return spans


def program_errors(sql: str, storage_dir: Optional[str] = None, udfs=()):
    """Every error of a program, not only the first: after an error, the statement that holds it is blanked
    out (keeping its lines, so positions stay right) and the rest is compiled again.  Returns (errors in file
    order, the compiled program or None).  Later statements that use a failed one report their own error.
    ``udfs``: the Python functions the program may call (``--udfs``)."""
    import tempfile
    from planner import compile_program
    from sqlengine.udf import python_signatures
    from planner.errors import EngineError
    from sqlengine.declared import declare_program
    errors: list = []
    text = sql
    spans = _statement_spans(sql)

    def in_file_order(errs):   # a parse error, then bind errors, then connector ones: found out of order
        return sorted(errs, key=lambda e: (e.offset is None, e.offset or 0))
    while len(errors) < MAX_ERRORS:
        try:
            program = compile_program(text, functions=python_signatures(udfs))
            with tempfile.TemporaryDirectory() as tmp:
                declare_program(program, "check", storage_dir or tmp)
            return in_file_order(errors), (program if not errors else None)
        except EngineError as e:
            errors.append(e)
            if e.offset is None:
                return in_file_order(errors), None
            span = next(((a, b) for a, b in spans if a <= e.offset < b), None)
            if span is None:
                return in_file_order(errors), None
            a, b = span
            text = text[:a] + "".join(c if c == "\n" else " " for c in text[a:b]) + text[b:]
            spans = [s for s in spans if s != span]
    return in_file_order(errors), None


def format_error(path: str, e) -> str:
    """``file:line:col: error: message`` and the line with a caret, as compilers print them."""
    kind = type(e).__name__
    if e.line is None:
        return f"{path}: {kind}: {e.message}"
    return f"{path}:{e.line}:{e.column}: {kind}: {e.message}\n{e.excerpt('    ')}"


def _read_program(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError as e:
        raise click.ClickException(f"cannot read {path}: {e.strerror}")


# ------------------------------------------------------------------ the live display
def _fmt(n) -> str:
    if n is None:
        return "-"
    if isinstance(n, float):
        return f"{n:,.1f}"
    return f"{n:,}" if isinstance(n, int) else str(n)


def status_table(st: dict, rates: Dict[str, float]):
    """A rich renderable of ``Pipeline.status()``."""
    from rich.console import Group
    from rich.table import Table
    lat = st["step_latency_ms"]
    head = Table.grid(padding=(0, 2))
    head.add_row(f"[bold]{st['name']}[/]", f"state [bold]{st['state']}[/]", f"step {st['step']}",
                 f"latency p50 {_fmt(lat['p50'])} ms, p99 {_fmt(lat['p99'])} ms", f"backlog {st['backlog_batches']}")
    rel = Table(title=None, show_edge=False, header_style="bold")
    for c in ("relation", "rows", "rows/s", "errors"):
        rel.add_column(c, justify="left" if c == "relation" else "right")
    for t, n in st["rows_in"].items():
        rel.add_row(f"table {t}", _fmt(n), _fmt(rates.get(t)), _fmt(st["dead_letter_rows"].get(t) or None))
    for v, n in st["rows_out"].items():
        rel.add_row(f"view {v}", _fmt(n), _fmt(rates.get(v)), _fmt(st["errors"].get(v)))
    parts = [head, rel]
    if st.get("connectors"):
        con = Table(show_edge=False, header_style="bold")
        for c in ("connector", "kind", "state", "rows", "lag", "dead letters", "last error"):
            con.add_column(c)
        for k, c in st["connectors"].items():
            con.add_row(k, f"{c['kind']} {c['transport']}", c["state"], _fmt(c["rows"]), _fmt(c.get("lag")),
                        _fmt(c.get("dead_letter_rows") or None),
                        _connector_error(k, c.get("last_error") or "")[:80])
        parts.append(con)
    if st.get("error"):
        parts.append(f"[red]error: {st['error']}[/]")
    return Group(*parts)


def _total(d) -> int:
    return sum(v for v in (d or {}).values() if isinstance(v, (int, float)) and not isinstance(v, bool))


def _one_line(text: str, limit: int = 300) -> str:
    text = " | ".join(x.strip() for x in str(text).strip().splitlines() if x.strip())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _connector_error(key: str, err: str) -> str:
    """A connector's last error on one line, without the ``connector KEY (transport): `` it starts with."""
    import re
    return _one_line(re.sub(r"^connector " + re.escape(key) + r" \([^)]*\): ", "", str(err)))


def status_record(st: dict, seen: Optional[Dict[str, Optional[str]]] = None) -> Tuple[str, dict]:
    """A short status line of ``Pipeline.status()`` and its numbers as fields (for JSON logs).  ``seen``: the
    last error of each connector already shown; a connector's last error is shown only when it changed (and
    ``seen`` is updated)."""
    lat = st["step_latency_ms"]
    rows_in, rows_out = _total(st["rows_in"]), _total(st["rows_out"])
    dead, row_errors = _total(st.get("dead_letter_rows")), _total(st.get("errors"))
    fields: dict = {"pipeline": st["name"], "state": str(st["state"]), "step": st["step"], "rows_in": rows_in,
                    "rows_out": rows_out, "p50_ms": lat["p50"], "p99_ms": lat["p99"],
                    "backlog_batches": st["backlog_batches"], "dead_letter_rows": dead, "row_errors": row_errors}
    line = (f"{st['name']} state={st['state']} step={st['step']} rows_in={rows_in} rows_out={rows_out} "
            f"p50_ms={lat['p50']} p99_ms={lat['p99']} backlog={st['backlog_batches']}")
    if dead:
        line += f" dead_letters={dead}"
    if row_errors:
        line += f" row_errors={row_errors}"
    conns, changed = {}, {}
    for k, c in (st.get("connectors") or {}).items():
        cf = {"state": c.get("state"), "rows": c.get("rows"), "dead_letter_rows": c.get("dead_letter_rows") or 0,
              "errors": c.get("errors") or 0}
        conns[k] = cf
        part = f"{k}={c.get('state')}:{c.get('rows')}"
        if cf["dead_letter_rows"]:
            part += f",dead={cf['dead_letter_rows']}"
        if cf["errors"]:
            part += f",errors={cf['errors']}"
        line += " " + part
        err = c.get("last_error")
        if seen is not None and err and seen.get(k) != err:
            changed[k] = _connector_error(k, err)
        if seen is not None:
            seen[k] = err
        elif err:
            changed[k] = _connector_error(k, err)
    if conns:
        fields["connectors"] = conns
    for k, e in changed.items():
        line += f" last_error[{k}]={json.dumps(e, ensure_ascii=False)}"
    if changed:
        fields["last_errors"] = changed
    if st.get("error"):
        fields["error"] = _one_line(st["error"])
        line += f" error={json.dumps(fields['error'], ensure_ascii=False)}"
    return line, fields


def status_line(st: dict, seen: Optional[Dict[str, Optional[str]]] = None) -> str:
    return status_record(st, seen)[0]


def stop_summary(st: dict, dead_letter_paths: Dict[str, str], storage: str) -> List[Tuple[int, str, dict]]:
    """What a stopped run leaves to look at: per source its dead-lettered rows and their file, per view its
    row errors and how to query them, the connectors that failed.  (log level, message, fields) triples."""
    out: List[Tuple[int, str, dict]] = []
    for k, c in (st.get("connectors") or {}).items():
        n = c.get("dead_letter_rows") or 0
        if c.get("kind") == "source" and n:
            path, rows = dead_letter_paths.get(k), f"{n} row{'s' if n != 1 else ''}"
            out.append((logging.WARNING, f"dead letters: {rows} from source {k} (table {c.get('relation')})"
                        + (f" in {path}" if path else ""),
                        {"connector": k, "table": c.get("relation"), "dead_letter_rows": n, "path": path}))
    for v, n in sorted((st.get("errors") or {}).items()):
        if n:
            q, rows = f"SELECT * FROM sqlengine_errors WHERE view = '{v}'", f"{n} row{'s' if n != 1 else ''}"
            out.append((logging.WARNING, f"row errors: {rows} failed in view {v}; see them with: "
                        f"sqlengine query {shlex.quote(storage)} \"{q}\"", {"view": v, "row_errors": n, "query": q}))
    for k, c in (st.get("connectors") or {}).items():
        if c.get("state") == "failed" and c.get("last_error"):
            err = _connector_error(k, c["last_error"])
            out.append((logging.ERROR, f"connector {k} failed: {err}",
                        {"connector": k, "state": "failed", "last_error": err}))
    if not out:
        out.append((logging.INFO, "no dead letters and no row errors", {"dead_letter_rows": 0, "row_errors": 0}))
    return out


class Rates:
    """Rows per second per relation, over the last few samples of ``status()``."""

    def __init__(self):
        self.last: Optional[Tuple[float, Dict[str, int]]] = None
        self.rates: Dict[str, float] = {}

    def update(self, st: dict) -> Dict[str, float]:
        now = time.monotonic()
        counts = {**st["rows_in"], **st["rows_out"]}
        if self.last is not None and now - self.last[0] >= 0.5:
            dt = now - self.last[0]
            self.rates = {k: (v - self.last[1].get(k, 0)) / dt for k, v in counts.items()}
            self.last = (now, counts)
        elif self.last is None:
            self.last = (now, counts)
        return self.rates


def _sources_done(p) -> bool:
    cons = p.status().get("connectors", {})
    sources = [c for c in cons.values() if c["kind"] == "source"]
    return bool(sources) and all(c["state"] in ("finished", "failed") for c in sources)


# ------------------------------------------------------------------ commands
@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="sqlengine")
def main() -> None:
    """Incremental SQL views on Apache Spark: run a SQL program of tables, views and connectors."""


def _conf(pairs: Sequence[str], master: Optional[str], base: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    conf: Dict[str, str] = dict(base or {})
    for kv in pairs:
        if "=" not in kv:
            raise click.BadParameter(f"expected KEY=VALUE, got {kv!r}", param_hint="--conf")
        k, v = kv.split("=", 1)
        conf[k.strip()] = v.strip()
    if master:
        conf["spark.master"] = master
    conf.setdefault("sqlengine.spark.start", "eager" if master else "lazy")
    return conf


def _runtime_config(text: Optional[str], storage: Optional[str], conf, master: Optional[str],
                    wait_for_lock: Optional[float]):
    """The RuntimeConfig of ``run``: ``--runtime-config`` (RuntimeConfig.from_dict) with the options over it."""
    from sqlengine import RuntimeConfig
    d = {}
    if text:
        if text.startswith("@"):
            text = _read_program(text[1:])
        try:
            d = json.loads(text)
        except ValueError as e:
            raise click.ClickException(f"--runtime-config is not JSON: {e}")
    rc = RuntimeConfig.from_dict(d)
    d = rc.to_dict()
    d["spark_conf"] = _conf(conf, master, rc.spark_conf)
    if storage:
        d["storage"] = storage
    if wait_for_lock is not None:
        d["wait_for_lock_secs"] = wait_for_lock
    return RuntimeConfig.from_dict(d)


LOG_LEVEL = click.option("--log-level", "log_level", type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"],
                                                                     case_sensitive=False),
                         default="INFO", show_default=True, help="least severe log records shown")
LOG_FORMAT = click.option("--log-format", "log_format", type=click.Choice(["text", "json"]), default="text",
                          show_default=True, help="json: one JSON object per line (time, level, logger, message "
                                                  "and fields such as pipeline and connector)")


UDFS = click.option("--udfs", type=click.Path(exists=True, dir_okay=False), multiple=True, metavar="FILE.py",
                    help="a Python file of functions the program calls: those declared with @sqlengine.udf, and "
                         "those a CREATE FUNCTION ... LANGUAGE PYTHON AS 'file:function' names (repeatable)")


def _udfs(paths) -> list:
    """The functions of the ``--udfs`` files (each imported as the module named by its file name)."""
    from sqlengine.udf import load_module
    return [u for path in paths for u in load_module(path)]


def _logger(name: str = "sqlengine.run") -> logging.Logger:
    return logging.getLogger(name)


@main.command()
@click.argument("program", type=click.Path(dir_okay=False))
@click.option("--storage", type=click.Path(file_okay=False), help="storage directory (default: <program>.storage)")
@click.option("--name", help="pipeline name (default: the program's file name)")
@click.option("--master", help="Spark master URL, e.g. spark://host:7077 (default: local, started when needed)")
@click.option("--conf", multiple=True, metavar="KEY=VALUE", help="Spark or sqlengine setting (repeatable)")
@click.option("--exit-when-done", is_flag=True, help="stop once every source has read all its input")
@click.option("--interval", type=float, default=2.0, show_default=True,
              help="seconds between status lines when not on a terminal")
@click.option("--wait-for-lock", "wait_for_lock", type=float, metavar="SECONDS",
              help="if another process has the storage open, wait up to SECONDS for it to stop (default: fail at "
                   "once, naming it)")
@click.option("--runtime-config", "runtime_config", metavar="JSON",
              help="a RuntimeConfig as a JSON object (or @FILE holding one), e.g. '{\"min_batch_size_records\": 1000}'; "
                   "--storage, --conf and --wait-for-lock override its fields")
@UDFS
@LOG_LEVEL
@LOG_FORMAT
def run(program, storage, name, master, conf, exit_when_done, interval, wait_for_lock, runtime_config, udfs,
        log_level, log_format):
    """Run PROGRAM (a .sql file) with its declared connectors until Ctrl-C.

    On a terminal a live display shows the pipeline's state, step, rows and rates per table and view, step
    latency and connectors.  Otherwise (nohup, systemd, docker) a status line is logged every --interval
    seconds (logger sqlengine.status): state, step, rows, latency, backlog, dead-lettered rows and row
    errors, each connector's state and rows, and a connector's last error once when it changes.  Ctrl-C (or
    SIGTERM) processes the input already read, checkpoints and stops, then logs the dead letters (per source,
    with their file) and row errors (per view); a second Ctrl-C stops at once.
    """
    from planner.errors import EngineError
    from sqlengine import Pipeline
    from sqlengine.logs import setup_logging
    live = sys.stdout.isatty()
    console = None
    if live:
        from rich.console import Console
        console = Console()
    setup_logging(log_level, log_format, console=console)
    log, status_log = _logger(), _logger("sqlengine.status")

    def fail(message: str, **fields) -> None:
        if log_format == "json":
            log.error(message, extra=fields)
        else:
            click.echo(message, err=True)

    def fail_at(e) -> None:
        fail(format_error(program, e) if e.line else f"error: {e.message}", file=program, line=e.line,
             column=e.column, error=type(e).__name__)

    sql = _read_program(program)
    stem = os.path.splitext(os.path.basename(program))[0]
    try:
        rc = _runtime_config(runtime_config, storage, conf, master, wait_for_lock)
        functions = _udfs(udfs)
    except EngineError as e:
        raise click.ClickException(e.message)
    storage = rc.storage or os.path.join(os.path.dirname(os.path.abspath(program)), f"{stem}.storage")
    errors, _ = program_errors(sql, storage, functions)
    if errors:
        for e in errors:
            fail_at(e)
        sys.exit(1)
    try:
        p = Pipeline.from_sql(sql, name=name or stem, storage_dir=storage, runtime_config=rc, udfs=functions)
        with open(os.path.join(storage, PROGRAM_FILE), "w") as f:
            f.write(sql)
        with open(os.path.join(storage, UDFS_FILE), "w") as f:   # for `sqlengine query STORAGE`
            json.dump([os.path.abspath(u) for u in udfs], f)
        p.start()
    except EngineError as e:
        fail_at(e)
        sys.exit(1)
    pl = {"pipeline": p.name}
    log.info("pipeline %s started at step %s (storage %s)", p.name, p.status()["step"], storage,
             extra={**pl, "storage": storage})
    interrupts = {"n": 0}
    stopping = threading.Event()

    def on_signal(signum, frame):
        interrupts["n"] += 1
        if interrupts["n"] == 1:
            stopping.set()
        else:
            log.warning("forced stop", extra=pl)
            p.stop(force=True)
            logging.shutdown()
            os._exit(130)

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    rates = Rates()
    code = 0

    def finished() -> bool:
        return stopping.is_set() or (exit_when_done and _sources_done(p)) or p.status()["state"] == "failed"

    if live:
        from rich.live import Live
        with Live(status_table(p.status(), {}), console=console, refresh_per_second=4, transient=False) as view:
            while not finished():
                time.sleep(0.25)
                st = p.status()
                view.update(status_table(st, rates.update(st)))
            st = p.status()
            view.update(status_table(st, rates.update(st)))
    else:
        seen: Dict[str, Optional[str]] = {}
        last_line = 0.0
        while not finished():
            time.sleep(0.1)
            if time.monotonic() - last_line >= interval:
                msg, fields = status_record(p.status(), seen)
                status_log.info(msg, extra=fields)
                last_line = time.monotonic()
    if stopping.is_set():
        log.info("stopping: processing the input read so far (Ctrl-C again to stop now)", extra=pl)
    elif exit_when_done and _sources_done(p):
        failed = sorted(k for k, c in p.status().get("connectors", {}).items()
                        if c["kind"] == "source" and c["state"] == "failed")
        if failed:   # the input was not all read: the exit status says so
            log.error("every source is done (failed: %s): stopping", ", ".join(failed),
                      extra={**pl, "failed": failed})
            code = 1
        else:
            log.info("every source has read all its input: stopping", extra=pl)
    st = p.status()
    if st["state"] == "failed":
        log.error("pipeline %s failed: %s", p.name, st["error"], extra={**pl, "error": st["error"]})
        code = 1
    paths = {k: c["dead_letter"] for k, c in st.get("connectors", {}).items() if c.get("dead_letter")}
    try:
        p.stop()
        st = p.status()
        if not live:
            msg, fields = status_record(st, seen)
            status_log.info(msg, extra=fields)
        for level, msg, fields in stop_summary(st, paths, storage):
            log.log(level, msg, extra={**pl, **fields})
        step = p.store.current.step
        log.info("stopped at step %s; query it with: sqlengine query %s \"SELECT ...\"", step,
                 shlex.quote(storage), extra={**pl, "step": step, "storage": storage})
    except EngineError as e:
        log.error("error: %s", e, extra={**pl, "error": str(e)})
        code = 1
    logging.shutdown()
    sys.exit(code)


@main.command()
@click.argument("program", type=click.Path(dir_okay=False))
@UDFS
def check(program, udfs):
    """Compile PROGRAM and print every error as file:line:col with the line and a caret (exit status 1)."""
    from planner.errors import EngineError
    sql = _read_program(program)
    try:
        functions = _udfs(udfs)
    except EngineError as e:
        raise click.ClickException(e.message)
    errors, prog = program_errors(sql, udfs=functions)
    for e in errors:
        click.echo(format_error(program, e), err=True)
    if errors:
        click.echo(f"{len(errors)} error{'s' if len(errors) > 1 else ''}", err=True)
        sys.exit(1)
    mat = sum(1 for v in prog.views.values() if v.materialized)
    conns = sum(len(json.loads(d.connectors[0])) if d.connectors else 0
                for d in list(prog.tables.values()) + list(prog.views.values()))
    click.echo(f"{program}: ok: {len(prog.tables)} tables, {len(prog.views)} views ({mat} materialized), "
               f"{conns} connectors")


@main.command()
@click.argument("program", type=click.Path(dir_okay=False))
@click.argument("view", required=False)
@click.option("--passes", is_flag=True, help="also the plan after each rewrite rule")
@UDFS
def explain(program, view, passes, udfs):
    """Print the logical plan and incremental circuit of VIEW (default: every view)."""
    from planner import compile_program
    from planner.errors import EngineError
    from sqlengine.udf import python_signatures
    sql = _read_program(program)
    try:
        prog = compile_program(sql, functions=python_signatures(_udfs(udfs)))
        views = [view.lower()] if view else list(prog.views)
        for v in views:
            if v not in prog.views:
                raise click.ClickException(f"unknown view {view!r}; views: {', '.join(prog.views)}")
            click.echo(f"-- view {v}")
            click.echo(prog.explain(v, passes=passes))
    except EngineError as e:
        click.echo(format_error(program, e), err=True)
        sys.exit(1)


def open_storage(target: str):
    """A pipeline over the committed state of a stopped pipeline's storage directory, for queries only."""
    from sqlengine import Pipeline
    path = os.path.join(target, PROGRAM_FILE)
    if not os.path.isdir(target):
        raise click.ClickException(f"{target} is not a storage directory")
    if not os.path.exists(path):
        raise click.ClickException(f"{target} has no {PROGRAM_FILE}: it was not written by `sqlengine run`")
    with open(path) as f:
        sql = f.read()
    udfs = []
    if os.path.exists(os.path.join(target, UDFS_FILE)):   # the --udfs files it ran with
        with open(os.path.join(target, UDFS_FILE)) as f:
            udfs = json.load(f)
    from sqlengine.errors import StorageLockedError
    try:
        p = Pipeline.from_sql(sql, name=os.path.basename(os.path.abspath(target)), storage_dir=target,
                              spark_conf={"sqlengine.spark.start": "lazy"}, udfs=_udfs(udfs))
    except StorageLockedError as e:
        raise click.ClickException(f"{target} belongs to a running pipeline; query it after it stops, or run it "
                                   f"with `sqlengine serve` to query it while it runs. {e.message}")
    p._open_for_queries()
    return p


def _open_target(target: str, token: Optional[str] = None):
    """A storage directory opened for queries, or a pipeline on a server (``token``: its bearer token)."""
    if target.startswith(("http://", "https://")):
        import httpx

        from planner.errors import EngineError
        from sqlengine.api.client import ServerError, connect
        url, _, name = target.rstrip("/").rpartition("/pipelines/")
        if not name:
            raise click.ClickException("a server target is http(s)://HOST:PORT/pipelines/NAME")
        try:
            return connect(url, token=token).pipeline(name)
        except ServerError as e:
            if e.status in (401, 403):
                raise click.ClickException(
                    f"{url} refused the request (HTTP {e.status}): "
                    + ("wrong token" if token else "it needs a token")
                    + "; pass --token or set SQLENGINE_TOKEN")
            raise click.ClickException(f"{url}: {e.message}")
        except EngineError as e:
            raise click.ClickException(f"{url}: {e.message}")
        except httpx.HTTPError as e:
            raise click.ClickException(f"cannot reach {url}: {e or type(e).__name__}")
    return open_storage(target)


def _net_errors() -> tuple:
    """The exceptions of a broken connection to a server (none if the client is not installed)."""
    try:
        import httpx
    except ImportError:   # pragma: no cover - without the server extra
        return ()
    return (httpx.HTTPError,)


TOKEN_OPTION = click.option("--token", envvar="SQLENGINE_TOKEN", metavar="TOKEN",
                            help="bearer token of the server, when TARGET is an http(s) URL (default: the "
                                 "SQLENGINE_TOKEN environment variable)")


def write_result(t, fmt: str, output: Optional[str]) -> None:
    import pyarrow as pa
    if fmt == "parquet":
        import pyarrow.parquet as pq
        if not output:
            raise click.ClickException("--format parquet needs --output FILE")
        pq.write_table(t, output)
        return
    if fmt == "table":
        text = render_table(t)
    elif fmt == "csv":
        import io

        import pyarrow.csv as pcsv
        buf = io.BytesIO()
        pcsv.write_csv(t, buf)
        text = buf.getvalue().decode()
    else:
        text = "".join(json.dumps(r, default=str) + "\n" for r in t.to_pylist())
    if output:
        with open(output, "w") as f:
            f.write(text)
    else:
        click.echo(text, nl=False)
    del pa


def render_table(t) -> str:
    """A result as psql and the DuckDB CLI show it: a boxed table, NULL as NULL, then the row count."""
    from io import StringIO

    from rich.console import Console
    from rich.table import Table
    from rich import box
    tab = Table(box=box.SIMPLE_HEAD, show_edge=True, header_style="bold")
    numeric = []
    for f in t.schema:
        import pyarrow as pa
        num = pa.types.is_integer(f.type) or pa.types.is_floating(f.type) or pa.types.is_decimal(f.type)
        numeric.append(num)
        tab.add_column(f.name, justify="right" if num else "left")
    for r in t.to_pylist():
        tab.add_row(*["NULL" if v is None else str(v) for v in r.values()])
    out = StringIO()
    Console(file=out, width=max(80, min(250, 12 * max(1, t.num_columns))), force_terminal=False,
            color_system=None).print(tab)
    n = t.num_rows
    return out.getvalue() + f"({n} row{'s' if n != 1 else ''})\n"


@main.command()
@click.argument("target")
@click.argument("sql")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json", "parquet"]), default="table",
              show_default=True)
@click.option("--output", "-o", type=click.Path(dir_okay=False), help="write to FILE instead of stdout")
@TOKEN_OPTION
def query(target, sql, fmt, output, token):
    """Run a SELECT over TARGET: the storage directory of a stopped pipeline (`sqlengine run --storage`), or
    a running pipeline on a server, http://HOST:PORT/pipelines/NAME (with --token or SQLENGINE_TOKEN if the
    server has a token)."""
    from planner.errors import EngineError
    p = _open_target(target, token)
    try:
        write_result(p.query_arrow(sql), fmt, output)
    except EngineError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(1)
    except _net_errors() as e:
        raise click.ClickException(f"cannot reach {target}: {e or type(e).__name__}")


SHELL_HELP = """Enter a SELECT ending with ';' (it may span lines).  Commands:
  \\d          list tables and views       \\d NAME   columns of NAME
  \\timing     toggle the time of queries  \\q        quit (also Ctrl-D)"""


@main.command()
@click.argument("target")
@TOKEN_OPTION
def shell(target, token):
    """An interactive SQL prompt over TARGET (a storage directory or http://HOST:PORT/pipelines/NAME, with
    --token or SQLENGINE_TOKEN if the server has a token): ad-hoc SELECTs with history, results as tables."""
    from planner.errors import EngineError
    try:
        import readline
        hist = os.path.expanduser("~/.sqlengine_history")
        try:
            readline.read_history_file(hist)
        except OSError:
            pass
    except ImportError:   # pragma: no cover - no readline on this platform
        readline, hist = None, None
    p = _open_target(target, token)
    click.echo(f"sqlengine shell on {target}. \\? for help.")
    timing, buf = True, []
    while True:
        try:
            line = input("sql> " if not buf else "...> ")
        except EOFError:
            click.echo()
            break
        except KeyboardInterrupt:
            click.echo()
            buf = []
            continue
        stripped = line.strip()
        if not buf and stripped.startswith("\\"):
            cmd, _, arg = stripped.partition(" ")
            if cmd in ("\\q", "\\quit"):
                break
            if cmd in ("\\?", "\\h", "\\help"):
                click.echo(SHELL_HELP)
            elif cmd == "\\timing":
                timing = not timing
                click.echo(f"timing {'on' if timing else 'off'}")
            elif cmd == "\\d":
                _describe(p, arg.strip())
            else:
                click.echo(f"unknown command {cmd}; \\? for help")
            continue
        if not stripped:
            continue
        buf.append(line)
        if not stripped.endswith(";"):
            continue
        text, buf = "\n".join(buf).rstrip().rstrip(";"), []
        t0 = time.perf_counter()
        try:
            result = p.query_arrow(text)
        except EngineError as e:
            click.echo(f"error: {e}")
            continue
        except _net_errors() as e:
            click.echo(f"error: cannot reach {target}: {e or type(e).__name__}")
            continue
        click.echo(render_table(result), nl=False)
        if timing:
            click.echo(f"Time: {(time.perf_counter() - t0) * 1000:.1f} ms")
    if readline is not None and hist:
        try:
            readline.write_history_file(hist)
        except OSError:
            pass


def _describe(p, name: str) -> None:
    import pyarrow as pa
    prog = getattr(p, "program", None)
    if prog is None:   # a remote pipeline: ask the server
        t = p.query_arrow("SELECT 1 AS x WHERE false") if not name else p.query_arrow(f"SELECT * FROM {name} LIMIT 0")
        click.echo(render_table(pa.table({"column": t.schema.names, "type": [str(f.type) for f in t.schema]})), nl=False)
        return
    if not name:
        rows = [("table", t) for t in prog.tables] + [
            ("materialized view" if v.materialized else "view", n) for n, v in prog.views.items()]
        click.echo(render_table(pa.table({"kind": [k for k, _ in rows], "name": [n for _, n in rows]})), nl=False)
        return
    n = name.lower()
    if n in prog.tables:
        fields = [(f.name, f.type.sql, "" if f.type.nullable else "NOT NULL") for f in prog.tables[n].fields]
    elif n in prog.views and prog.views[n].materialized:
        t = p.query_arrow(f"SELECT * FROM {n} LIMIT 0")
        fields = [(f.name, str(f.type), "") for f in t.schema]
    else:
        click.echo(f"no table or materialized view {name!r}")
        return
    click.echo(render_table(pa.table({"column": [f[0] for f in fields], "type": [f[1] for f in fields],
                                      "null": [f[2] for f in fields]})), nl=False)


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="address to bind (not loopback: needs --token)")
@click.option("--port", type=int, default=8080, show_default=True)
@click.option("--storage", "storage_root", type=click.Path(file_okay=False), default="sqlengine-pipelines",
              show_default=True, help="directory holding each pipeline's storage")
@click.option("--token", envvar="SQLENGINE_TOKEN", help="bearer token required from clients (env SQLENGINE_TOKEN)")
@UDFS
@LOG_LEVEL
@LOG_FORMAT
def serve(host, port, storage_root, token, udfs, log_level, log_format):
    """Run the pipeline server (REST API, change streams, ad-hoc queries).  Logs (the server's, uvicorn's and
    its access log, the pipelines') go to stderr as --log-format text or json."""
    try:
        from sqlengine.server import serve as run_server
    except ImportError as e:
        raise click.ClickException(f"the server needs the 'server' extra: pip install 'sqlengine[server]' ({e})")
    from sqlengine.logs import setup_logging, uvicorn_log_config
    setup_logging(log_level, log_format)
    from planner.errors import EngineError
    try:
        functions = _udfs(udfs)
    except EngineError as e:
        raise click.ClickException(e.message)
    try:
        run_server(host=host, port=port, storage_root=storage_root, token=token, log_level=log_level.lower(),
                   log_config=uvicorn_log_config(log_level), udfs=functions)
    except ValueError as e:
        raise click.ClickException(str(e))


if __name__ == "__main__":
    main()
