"""The pipeline server: several :class:`sqlengine.Pipeline` s behind a REST API (FastAPI), laid out like
Feldera's (``/v0/pipelines/{name}/...``).

Each pipeline lives in ``storage_root/<name>/``: ``pipeline.json`` holds its SQL program, its
``runtime_config`` and the state it should be in (``created``, ``running``, ``paused``, ``stopped``);
``storage/`` is the embedded pipeline's ``storage_dir``.  On startup the server re-creates every pipeline
found there and starts again those that were running (paused ones are started and paused); the others wait
for ``POST .../start``.  A pipeline that fails to be re-created is listed with its error and does not affect
the others.

Engine calls block, so lifecycle routes are synchronous (FastAPI runs them on its thread pool) and the
async routes (ingress, egress) hand blocking work to threads.  Every error body is
``{"message": ..., "error_code": ..., "details": {...}}``.
"""
from __future__ import annotations

import asyncio
import datetime as dt
import decimal
import hmac
import io
import json
import logging
import math
import os
import re
import shutil
import threading
import time
import uuid
from collections import deque
from contextlib import asynccontextmanager
from typing import Any, Dict, List, Optional

import pyarrow as pa
from fastapi import Body, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from planner.errors import (BindError, ConnectorError, EngineError, InputError, InternalError, ParseError,
                            PipelineError, UnsupportedError)

from ..api.pipeline import Pipeline
from ..api.runtime_config import RuntimeConfig
from ..zset import WEIGHT

log = logging.getLogger("sqlengine.server")

DEFAULT_MAX_BODY_BYTES = 64 << 20
EGRESS_QUEUE_BYTES = 64 << 20       # a subscriber that falls this far behind is disconnected
EGRESS_QUEUE_LINES = 100_000
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,99}$")
INT_KINDS = {"TINYINT", "SMALLINT", "INT", "BIGINT"}

STATUS_OF = {ParseError: 400, BindError: 400, UnsupportedError: 400, InputError: 400, ConnectorError: 400,
             PipelineError: 409, InternalError: 500}


# ---------------------------------------------------------------------------------------------- errors
class ApiError(Exception):
    def __init__(self, status: int, error_code: str, message: str, details: Optional[dict] = None):
        super().__init__(message)
        self.status, self.error_code, self.message, self.details = status, error_code, message, details or {}


class BodyTooLarge(StarletteHTTPException):
    def __init__(self, limit: int):
        super().__init__(413, f"request body larger than {limit} bytes")
        self.limit = limit


def error_body(message: str, error_code: str, details: Optional[dict] = None) -> dict:
    return {"message": message, "error_code": error_code, "details": details or {}}


def engine_error_response(e: EngineError) -> JSONResponse:
    status = next((s for cls, s in STATUS_OF.items() if isinstance(e, cls)), 400)
    details: Dict[str, Any] = {}
    if e.line is not None:   # the client rebuilds the error from these: str(e) the same as embedded
        details.update(line=e.line, column=e.column, offset=e.offset, rendered=str(e))
    return JSONResponse(error_body(e.message, type(e).__name__, details), status_code=status)


# ---------------------------------------------------------------------------------------------- JSON values
def json_value(v: Any, kind: str = "") -> Any:
    """One value as JSON: timestamps and dates as ISO 8601 text, decimals as strings (exact) except those of
    scale 0 (e.g. a HUGEINT ``SUM``), which are integers; NULL as null."""
    if v is None:
        return None
    if isinstance(v, float):
        return None if math.isnan(v) else (int(v) if kind in INT_KINDS else v)
    if isinstance(v, bool):
        return v
    if isinstance(v, int):
        return v
    if isinstance(v, str):
        return v
    if isinstance(v, decimal.Decimal):   # exact: as text; a scale-0 decimal (HUGEINT sums) as an integer
        return int(v) if v.is_finite() and v.as_tuple().exponent == 0 else str(v)
    try:
        import pandas as pd
        if v is pd.NaT:
            return None
        if isinstance(v, pd.Timestamp):
            return v.isoformat()
    except ImportError:  # pragma: no cover
        pass
    if isinstance(v, (dt.datetime, dt.date, dt.time)):
        return v.isoformat()
    if isinstance(v, dt.timedelta):
        return v.total_seconds()
    if hasattr(v, "item"):
        return json_value(v.item(), kind)
    if isinstance(v, (bytes, bytearray)):
        return bytes(v).hex()
    if isinstance(v, (list, tuple)):
        return [json_value(x) for x in v]
    if isinstance(v, dict):
        return {str(k): json_value(x) for k, x in v.items()}
    return str(v)


def dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), allow_nan=False, default=str)


def sql_type(t) -> str:
    return getattr(t, "sql", None) or str(t)


def columns_of(p: Pipeline, relation: str) -> List[dict]:
    if relation in p.program.tables:
        return [{"name": f.name, "type": sql_type(f.type)} for f in p.program.tables[relation].fields]
    names = list(p.program.circuit.outputs[relation].names)
    fields = list(p.program.views[relation].plan.fields)
    return [{"name": n, "type": sql_type(f.type)} for n, f in zip(names, fields)]


# ---------------------------------------------------------------------------------------------- egress
class Subscriber:
    """One egress connection: a bounded queue of encoded lines filled by the pipeline's output thread and
    drained by the response's async generator (``loop.call_soon_threadsafe`` wakes it)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, after_step: int, max_bytes: int, max_lines: int):
        self.loop = loop
        self.after_step = after_step
        self.max_bytes, self.max_lines = max_bytes, max_lines
        self.lines: deque = deque()
        self.bytes = 0
        self.lock = threading.Lock()
        self.event = asyncio.Event()
        self.closed = False
        self.error: Optional[dict] = None

    def _wake(self) -> None:
        try:
            self.loop.call_soon_threadsafe(self.event.set)
        except RuntimeError:   # the loop is closed: the server is shutting down
            pass

    def offer(self, step: Optional[int], line: bytes) -> None:
        with self.lock:
            if self.closed or (step is not None and step <= self.after_step):
                return
            if self.lines and (self.bytes + len(line) > self.max_bytes or len(self.lines) >= self.max_lines):
                self.error = error_body(
                    f"egress subscriber fell behind by more than {self.max_bytes} bytes or {self.max_lines} "
                    "steps and was disconnected; reconnect and re-read the view's contents with /query",
                    "EgressQueueOverflow")
                self.closed = True
                self.lines.clear()
            else:
                self.lines.append(line)
                self.bytes += len(line)
        self._wake()

    def close(self, error: Optional[dict] = None) -> None:
        with self.lock:
            if error is not None and self.error is None:
                self.error = error
            self.closed = True
        self._wake()

    def take(self):
        with self.lock:
            lines = list(self.lines)
            self.lines.clear()
            self.bytes = 0
            return lines, self.closed, self.error


class Fanout:
    """The single ``foreach_chunk`` callback of one view: encodes each changed step once and offers the line
    to every subscriber.  It never raises (a raising callback would fail the pipeline)."""

    def __init__(self, names: List[str], kinds: List[str]):
        self.names, self.kinds = names, kinds
        self.subs: List[Subscriber] = []
        self.lock = threading.Lock()

    def add(self, s: Subscriber) -> None:
        with self.lock:
            self.subs.append(s)

    def remove(self, s: Subscriber) -> None:
        with self.lock:
            if s in self.subs:
                self.subs.remove(s)

    def subscribers(self) -> List[Subscriber]:
        with self.lock:
            return list(self.subs)

    def __call__(self, chunk, step: int) -> None:
        subs = self.subscribers()
        if not subs:
            return
        try:
            line = (dumps({"sequence_number": int(step), "json_data": self.encode(chunk)}) + "\n").encode()
        except Exception as e:  # noqa: BLE001 - reported to the subscribers, never to the pipeline
            log.exception("cannot encode a chunk")
            for s in subs:
                s.close(error_body(f"cannot encode step {step}: {e}", "InternalError"))
            return
        for s in subs:
            s.offer(int(step), line)

    def encode(self, chunk) -> List[dict]:
        cols = [chunk[c].tolist() for c in self.names]
        out: List[dict] = []
        for i, w in enumerate(chunk[WEIGHT].tolist()):
            row = {n: json_value(cols[j][i], self.kinds[j]) for j, n in enumerate(self.names)}
            out.extend([{"insert" if w > 0 else "delete": row}] * abs(int(w)))
        return out

    def close_all(self, error: Optional[dict] = None) -> None:
        for s in self.subscribers():
            s.close(error)


# ---------------------------------------------------------------------------------------------- pipelines
class Entry:
    """One named pipeline of the server: its definition, its embedded Pipeline and its egress fan-outs."""

    def __init__(self, manager: "Manager", name: str, sql: str, runtime_config: dict, desired: str = "created"):
        self.manager = manager
        self.name = name
        self.sql = sql
        self.runtime_config = runtime_config
        self.desired = desired
        self.pipeline: Optional[Pipeline] = None
        self.error: Optional[EngineError] = None     # the pipeline could not be created (on server restart)
        self.lock = threading.RLock()                 # serializes lifecycle changes
        self.fanouts: Dict[str, Fanout] = {}
        self.created_at = time.time()
        self.ingress_requests: Dict[str, int] = {}
        self.ingress_bytes: Dict[str, int] = {}
        self.ingress_errors = 0

    @property
    def dir(self) -> str:
        return os.path.join(self.manager.root, self.name)

    def spark_conf(self) -> dict:
        return {**self.manager.spark_conf, **dict(self.runtime_config.get("spark_conf") or {})}

    @property
    def storage_dir(self) -> str:
        """``runtime_config.storage`` if given, else ``<root>/<name>/storage``."""
        return self.runtime_config.get("storage") or os.path.join(self.dir, "storage")

    def build(self) -> Pipeline:
        """A new embedded Pipeline over this entry's storage, with a fan-out callback on every view (so that
        egress subscribers see every step from the moment they connect)."""
        p = Pipeline.from_sql(self.sql, name=self.name, storage_dir=self.storage_dir, spark_conf=self.spark_conf(),
                              runtime_config=RuntimeConfig.from_dict(self.runtime_config))
        fanouts = {}
        for v in p.program.views:
            cols = columns_of(p, v)
            f = Fanout([c["name"] for c in cols], [c["type"].split("(")[0].upper() for c in cols])
            p.foreach_chunk(v, f)
            fanouts[v] = f
        old = self.fanouts
        self.pipeline, self.fanouts, self.error = p, fanouts, None
        for f in old.values():
            f.close_all()
        return p

    def persist(self) -> None:
        os.makedirs(self.dir, exist_ok=True)
        tmp = os.path.join(self.dir, "pipeline.json.tmp")
        with open(tmp, "w") as f:
            json.dump({"name": self.name, "program_code": self.sql, "runtime_config": self.runtime_config,
                       "desired_state": self.desired}, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, os.path.join(self.dir, "pipeline.json"))

    def state(self) -> str:
        if self.error is not None:
            return "failed"
        if self.pipeline is None:
            return "created"
        p = self.pipeline
        return "failed" if p._error is not None else p._state

    def require(self) -> Pipeline:
        if self.pipeline is None:
            if self.error is not None:
                raise type(self.error)(f"pipeline {self.name} could not be created: {self.error.message}")
            raise PipelineError(f"pipeline {self.name} does not exist")
        return self.pipeline

    def live(self) -> Pipeline:
        """The pipeline, re-created if it was stopped (an embedded Pipeline cannot start again)."""
        p = self.pipeline
        if p is None or p._state == "stopped":
            p = self.build()
        return p

    def close_streams(self, error: Optional[dict] = None) -> None:
        for f in self.fanouts.values():
            f.close_all(error)

    def info(self, full: bool = True) -> dict:
        out: Dict[str, Any] = {"name": self.name, "status": self.state(), "desired_status": self.desired,
                               "created_at": dt.datetime.fromtimestamp(self.created_at, dt.timezone.utc).isoformat(),
                               "deployment_error": None}
        p = self.pipeline
        if self.error is not None:
            out["deployment_error"] = error_body(self.error.message, type(self.error).__name__)
        elif p is not None and p._error is not None:
            out["deployment_error"] = error_body(str(p._error), type(p._error).__name__)
        if full:
            out["program_code"] = self.sql
            out["runtime_config"] = p.runtime_config.to_dict() if p is not None else self.runtime_config
            if p is not None:
                out["tables"] = {t: {"columns": columns_of(p, t), "primary_key": list(d.primary_key)}
                                 for t, d in p.program.tables.items()}
                out["views"] = {v: {"columns": columns_of(p, v), "materialized": d.materialized}
                                for v, d in p.program.views.items()}
        return out


class Manager:
    def __init__(self, root: str, spark_conf: Optional[dict] = None):
        self.root = os.path.abspath(root)
        os.makedirs(self.root, exist_ok=True)
        self.spark_conf = dict(spark_conf or {})
        self.entries: Dict[str, Entry] = {}
        self.lock = threading.Lock()
        self.http_requests = 0
        self.egress_overflows = 0

    def get(self, name: str) -> Entry:
        with self.lock:
            e = self.entries.get(name)
            known = sorted(self.entries)
        if e is None:
            raise ApiError(404, "UnknownPipeline", f"unknown pipeline '{name}'. Pipelines: {', '.join(known) or '(none)'}",
                           {"pipelines": known})
        return e

    def restore(self) -> None:
        """Re-create the pipelines found in ``root``; start those that were running or paused."""
        for name in sorted(os.listdir(self.root)):
            path = os.path.join(self.root, name, "pipeline.json")
            if not NAME_RE.match(name) or not os.path.isfile(path):
                continue
            try:
                with open(path) as f:
                    d = json.load(f)
            except (OSError, ValueError) as ex:
                log.error("pipeline %s: cannot read %s: %s", name, path, ex)
                continue
            e = Entry(self, name, d.get("program_code", ""), d.get("runtime_config") or {},
                      d.get("desired_state", "created"))
            with self.lock:
                self.entries[name] = e
            try:
                with e.lock:
                    p = e.build()
                    if e.desired in ("running", "paused"):
                        p.start()
                        if e.desired == "paused":
                            p.pause()
            except EngineError as ex:
                e.error = ex
                log.error("pipeline %s: %s", name, ex)
            except Exception as ex:  # noqa: BLE001 - one pipeline never stops the server
                e.error = InternalError(f"{type(ex).__name__}: {ex}")
                log.exception("pipeline %s", name)

    def shutdown(self) -> None:
        with self.lock:
            entries = list(self.entries.values())
        for e in entries:
            with e.lock:
                if e.pipeline is not None:
                    try:
                        e.pipeline.stop(force=True)
                    except Exception:  # noqa: BLE001
                        log.exception("pipeline %s: stop at shutdown", e.name)
                e.close_streams()


# ---------------------------------------------------------------------------------------------- middleware
class Guard:
    """Pure ASGI middleware: bearer-token check (constant time; ``GET /healthz`` is open) and the request body
    limit (``Content-Length`` checked up front, streamed bytes counted)."""

    def __init__(self, app, token: Optional[str], max_body_bytes: int, manager: Manager):
        self.app, self.token, self.max, self.manager = app, token, max_body_bytes, manager

    async def _reply(self, send, status: int, body: dict, headers=()) -> None:
        data = json.dumps(body).encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode()),
                                (b"connection", b"close"), *headers]})
        await send({"type": "http.response.body", "body": data})

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        self.manager.http_requests += 1
        headers = {k.lower(): v for k, v in scope.get("headers", [])}
        if self.token is not None and not (scope["path"] == "/healthz" and scope["method"] in ("GET", "HEAD")):
            auth = headers.get(b"authorization", b"")
            given = auth[7:].strip() if auth[:7].lower() == b"bearer " else b""
            if not hmac.compare_digest(given, self.token.encode()):
                return await self._reply(send, 401, error_body(
                    "missing or wrong bearer token (send 'Authorization: Bearer <token>')", "Unauthorized"),
                    [(b"www-authenticate", b"Bearer")])
        cl = headers.get(b"content-length")
        if cl is not None:
            try:
                n = int(cl)
            except ValueError:
                return await self._reply(send, 400, error_body("invalid Content-Length", "InvalidRequest"))
            if n > self.max:
                return await self._reply(send, 413, error_body(
                    f"request body of {n} bytes is larger than the limit of {self.max} bytes", "PayloadTooLarge",
                    {"limit": self.max}))
        count = 0
        limit = self.max

        async def limited():
            nonlocal count
            msg = await receive()
            if msg["type"] == "http.request":
                count += len(msg.get("body", b""))
                if count > limit:
                    raise BodyTooLarge(limit)
            return msg

        return await self.app(scope, limited, send)


# ---------------------------------------------------------------------------------------------- the app
def create_app(storage_root: str, token: Optional[str] = None, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
               spark_conf: Optional[Dict[str, str]] = None, egress_queue_bytes: int = EGRESS_QUEUE_BYTES,
               restore: bool = True) -> FastAPI:
    """The FastAPI app serving the pipelines kept under ``storage_root``.

    ``token``: if set, every request but ``GET /healthz`` needs ``Authorization: Bearer <token>``.
    ``max_body_bytes``: larger request bodies get 413.  ``spark_conf``: defaults for every pipeline's
    ``runtime_config["spark_conf"]``.  ``restore``: re-create the pipelines found in ``storage_root`` (and
    start those that were running) when the app starts.
    """
    if token is not None and not token:
        raise ValueError("token must be a non-empty string or None")
    mgr = Manager(storage_root, spark_conf)

    @asynccontextmanager
    async def lifespan(app):
        if restore:
            await run_in_threadpool(mgr.restore)
        yield
        await run_in_threadpool(mgr.shutdown)

    app = FastAPI(title="sqlengine pipeline server", version="0.1.0", lifespan=lifespan,
                  description="Incremental SQL pipelines over HTTP; the layout follows Feldera's REST API "
                              "(/v0/pipelines/...). Errors are JSON {message, error_code, details}.")
    app.state.manager = mgr
    app.add_middleware(Guard, token=token, max_body_bytes=max_body_bytes, manager=mgr)
    from .console import mount_console   # the web console (/, /console/): outside the token check
    mount_console(app)

    # ------------------------------------------------------------------ error handlers
    @app.exception_handler(EngineError)
    async def _engine_error(request, e: EngineError):
        return engine_error_response(e)

    @app.exception_handler(ApiError)
    async def _api_error(request, e: ApiError):
        return JSONResponse(error_body(e.message, e.error_code, e.details), status_code=e.status)

    @app.exception_handler(TimeoutError)
    async def _timeout(request, e: TimeoutError):
        return JSONResponse(error_body(str(e), "Timeout"), status_code=408)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request, e: StarletteHTTPException):
        code = {404: "NotFound", 405: "MethodNotAllowed", 413: "PayloadTooLarge"}.get(e.status_code, "HttpError")
        details = {"limit": e.limit} if isinstance(e, BodyTooLarge) else {}
        return JSONResponse(error_body(str(e.detail), code, details), status_code=e.status_code)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request, e: RequestValidationError):
        errs = json.loads(dumps(e.errors()))
        msg = "; ".join(f"{'.'.join(str(x) for x in er.get('loc', ()))}: {er.get('msg')}" for er in errs)
        return JSONResponse(error_body(f"invalid request: {msg}", "InvalidRequest", {"errors": errs}),
                            status_code=400)

    @app.exception_handler(Exception)
    async def _internal(request, e: Exception):
        log.exception("internal error")
        return JSONResponse(error_body(f"{type(e).__name__}: {e}", "InternalError"), status_code=500)

    # ------------------------------------------------------------------ helpers
    def table_of(p: Pipeline, table: str) -> str:
        t = table.lower()
        if t not in p.program.tables:
            known = sorted(p.program.tables)
            raise ApiError(404, "UnknownTable", f"unknown table '{table}'. Tables: {', '.join(known) or '(none)'}",
                           {"tables": known})
        return t

    def view_of(p: Pipeline, view: str) -> str:
        v = view.lower()
        if v not in p.program.views:
            known = sorted(p.program.views)
            raise ApiError(404, "UnknownView", f"unknown view '{view}'. Views: {', '.join(known) or '(none)'}",
                           {"views": known})
        return v

    def check_name(name: str) -> None:
        if not NAME_RE.match(name):
            raise ApiError(400, "InvalidName", f"invalid pipeline name {name!r}: use letters, digits, '_' and '-' "
                           "(at most 100, starting with a letter or digit)")

    # ------------------------------------------------------------------ routes: service
    @app.get("/healthz", summary="Liveness check (no token needed)")
    def healthz():
        return {"status": "ok"}

    @app.get("/v0/pipelines", summary="List the pipelines with their status")
    def list_pipelines():
        with mgr.lock:
            entries = list(mgr.entries.values())
        return [e.info(full=False) for e in entries]

    @app.put("/v0/pipelines/{name}", summary="Create or replace a pipeline (its SQL program and runtime_config)")
    def put_pipeline(name: str, body: Dict[str, Any] = Body(..., examples=[{
            "program_code": "CREATE TABLE t (x INT); CREATE MATERIALIZED VIEW v AS SELECT COUNT(*) AS n FROM t;",
            "runtime_config": {"spark_conf": {"sqlengine.spark.start": "lazy"}}}])):
        check_name(name)
        sql = body.get("program_code")
        if not isinstance(sql, str):
            raise ApiError(400, "InvalidRequest", "body needs 'program_code' (the SQL program, a string)")
        try:   # the one serialization of RuntimeConfig (the client sends to_dict())
            rc = RuntimeConfig.from_dict(body.get("runtime_config") or {}).to_dict()
        except PipelineError as ex:
            raise ApiError(400, "InvalidRequest", ex.message) from None
        with mgr.lock:
            e = mgr.entries.get(name)
            created = e is None
            if created:
                e = Entry(mgr, name, sql, rc)
                mgr.entries[name] = e
        with e.lock:
            if not created and e.state() in ("running", "paused"):
                raise ApiError(409, "PipelineError", f"pipeline {name} is {e.state()}; stop it before replacing "
                               "its program")
            old = (e.sql, e.runtime_config, e.pipeline, e.fanouts, e.error)
            e.sql, e.runtime_config = sql, rc
            try:
                if e.pipeline is not None:
                    e.pipeline.stop(force=True)
                e.build()
            except BaseException:
                if created:
                    with mgr.lock:
                        mgr.entries.pop(name, None)
                    if not os.path.exists(os.path.join(e.dir, "pipeline.json")):
                        shutil.rmtree(e.dir, ignore_errors=True)
                else:
                    e.sql, e.runtime_config, e.pipeline, e.fanouts, e.error = old
                raise
            e.desired = "created"
            e.persist()
        return JSONResponse(e.info(), status_code=201 if created else 200)

    @app.get("/v0/pipelines/{name}", summary="A pipeline: program, runtime_config, status, tables and views")
    def get_pipeline(name: str):
        return mgr.get(name).info()

    @app.delete("/v0/pipelines/{name}", summary="Stop and delete a pipeline (clear_storage=true also removes its "
                "stored state)")
    def delete_pipeline(name: str, clear_storage: bool = False):
        e = mgr.get(name)
        with e.lock:
            if e.pipeline is not None:
                e.pipeline.stop(force=True)
            e.close_streams(error_body(f"pipeline {name} was deleted", "PipelineDeleted"))
            with mgr.lock:
                mgr.entries.pop(name, None)
            if clear_storage:
                shutil.rmtree(e.dir, ignore_errors=True)
                shutil.rmtree(e.storage_dir, ignore_errors=True)   # runtime_config.storage, if elsewhere
            else:
                try:
                    os.remove(os.path.join(e.dir, "pipeline.json"))
                except FileNotFoundError:
                    pass
        return {"name": name, "deleted": True, "storage_cleared": clear_storage}

    @app.post("/v0/pipelines/{name}/clear_storage", summary="Delete a stopped pipeline's state, input log and "
              "outbox (409 while it runs); it can then be started afresh")
    def clear_storage(name: str):
        e = mgr.get(name)
        with e.lock:
            e.live().clear_storage()
        return {"name": name, "storage_status": e.pipeline.storage_status() if e.pipeline else "cleared"}

    @app.get("/v0/pipelines/{name}/storage_status", summary="\"in_use\" or \"cleared\"")
    def storage_status(name: str):
        e = mgr.get(name)
        with e.lock:
            return {"name": name, "storage_status": e.live().storage_status()}

    @app.post("/v0/pipelines/{name}/start", summary="Start (or restart after stop) a pipeline")
    def start(name: str):
        e = mgr.get(name)
        with e.lock:
            try:
                e.live().start()
            except EngineError as ex:
                e.error = ex
                raise
            e.error = None
            e.desired = "running"
            e.persist()
        return {"name": name, "status": e.state()}

    @app.post("/v0/pipelines/{name}/pause", summary="Pause: stop taking steps (input is still accepted)")
    def pause(name: str):
        e = mgr.get(name)
        with e.lock:
            e.require().pause()
            e.desired = "paused"
            e.persist()
        return {"name": name, "status": e.state()}

    @app.post("/v0/pipelines/{name}/resume", summary="Resume a paused pipeline")
    def resume(name: str):
        e = mgr.get(name)
        with e.lock:
            e.require().resume()
            e.desired = "running"
            e.persist()
        return {"name": name, "status": e.state()}

    @app.post("/v0/pipelines/{name}/stop", summary="Stop a pipeline (unless force=true, after processing all "
              "acknowledged input); egress streams end")
    def stop(name: str, force: bool = False):
        e = mgr.get(name)
        with e.lock:
            if e.pipeline is not None:
                e.pipeline.stop(force=force)
            e.close_streams()
            e.desired = "stopped"
            e.persist()
        return {"name": name, "status": e.state()}

    @app.post("/v0/pipelines/{name}/checkpoint", summary="Process all acknowledged input; returns the committed "
              "step")
    def checkpoint(name: str):
        return {"step": mgr.get(name).require().checkpoint()}

    @app.get("/v0/pipelines/{name}/stats", summary="Pipeline.status(): state, step, row counters, latency, errors")
    def stats(name: str):
        e = mgr.get(name)
        p = e.require()
        st = json.loads(dumps(json_value(p.status())))
        st["egress_subscribers"] = {v: len(f.subscribers()) for v, f in e.fanouts.items()}
        return st

    @app.post("/v0/pipelines/{name}/wait_for_idle", summary="Block until all acknowledged input is processed and "
              "delivered (408 on timeout)")
    def wait_for_idle(name: str, timeout_s: Optional[float] = None, marker: Optional[str] = None,
                      idle_interval_s: Optional[float] = None):
        e = mgr.get(name)
        p = e.require()
        p.wait_for_idle(timeout_s=timeout_s, idle_interval_s=idle_interval_s)
        if marker:
            line = (dumps({"marker": marker}) + "\n").encode()
            for f in list(e.fanouts.values()):
                for s in f.subscribers():
                    s.offer(None, line)
        return {"step": p.store.current.step}

    @app.post("/v0/pipelines/{name}/wait_for_completion", summary="Wait until every source connector has read "
              "all its input and everything is processed (408 on timeout)")
    def wait_for_completion(name: str, timeout_s: Optional[float] = None):
        p = mgr.get(name).require()
        p.wait_for_completion(timeout_s=timeout_s)
        return {"step": p.store.current.step}

    @app.post("/v0/pipelines/{name}/execute", summary="Run one INSERT ... VALUES/SELECT or DELETE ... WHERE "
              "(the body is the SQL text); returns the rows affected")
    async def execute(name: str, request: Request):
        p = mgr.get(name).require()
        sql = (await request.body()).decode("utf-8", errors="replace")
        n = await run_in_threadpool(p.execute, sql)
        return {"rows": int(n)}

    @app.get("/v0/pipelines/{name}/explain/{view}", summary="The view's logical plan and incremental circuit "
             "(text)", response_class=PlainTextResponse)
    def explain(name: str, view: str, passes: bool = False):
        p = mgr.get(name).require()
        return PlainTextResponse(p.explain(view_of(p, view), passes=passes))

    @app.post("/v0/pipelines/{name}/tables/{relation}/connectors/{connector}/{action}",
              summary="Pause or resume a source connector (action: pause|start|resume)")
    @app.post("/v0/pipelines/{name}/views/{relation}/connectors/{connector}/{action}",
              summary="Pause or resume a sink connector (action: pause|start|resume)")
    def connector_action(name: str, relation: str, connector: str, action: str):
        p = mgr.get(name).require()
        if action == "pause":
            p.pause_connector(relation, connector)
        elif action in ("start", "resume"):
            p.resume_connector(relation, connector)
        else:
            raise ApiError(400, "InvalidRequest", f"unknown connector action {action!r}; use pause or start")
        return {"relation": relation, "connector": connector, "action": action}

    # ------------------------------------------------------------------ data in
    @app.post("/v0/pipelines/{name}/ingress/{table}", summary="Push rows into a table: format=json (a JSON array "
              "or one record per line; update_format=raw|insert_delete), csv (header row) or arrow (IPC stream). "
              "Returns once the input is durable.")
    async def ingress(name: str, table: str, request: Request, format: str = "json", update_format: str = "raw",
                      array: Optional[bool] = None, delete: bool = False, on_error: str = "reject"):
        e = mgr.get(name)
        p = e.require()
        t = table_of(p, table)
        if on_error not in ("reject", "dead_letter"):
            raise ApiError(400, "InvalidRequest", f"on_error must be 'reject' or 'dead_letter', not {on_error!r}")
        body = bytearray()
        async for part in request.stream():
            body.extend(part)
        e.ingress_requests[t] = e.ingress_requests.get(t, 0) + 1
        e.ingress_bytes[t] = e.ingress_bytes.get(t, 0) + len(body)
        try:
            if format == "json":
                try:
                    text = body.decode("utf-8")
                except UnicodeDecodeError as ex:
                    raise InputError(f"table {t}: the body is not UTF-8 text (byte {ex.start})") from None
                if array is True and not text.lstrip().startswith("["):
                    raise InputError(f"table {t}: array=true but the body is not a JSON array")
                await run_in_threadpool(p.input_json, t, text, update_format=update_format, on_error=on_error)
            elif format == "csv":
                if update_format != "raw":
                    raise InputError("format=csv takes rows to insert (or with delete=true, to delete); "
                                     f"update_format={update_format!r} is for JSON")
                await run_in_threadpool(p.input_csv, t, bytes(body), delete=delete, on_error=on_error)
            elif format in ("arrow", "arrow_ipc"):
                try:
                    df = pa.ipc.open_stream(bytes(body)).read_all().to_pandas()
                except (pa.ArrowInvalid, OSError) as ex:
                    raise InputError(f"table {t}: the body is not an Arrow IPC stream: {ex}") from None
                await run_in_threadpool(p.input_pandas, t, df, delete=delete, on_error=on_error)
            else:
                raise ApiError(400, "InvalidRequest", f"unknown format {format!r}; use json, csv or arrow")
        except (EngineError, ApiError):
            e.ingress_errors += 1
            raise
        return {"table": t, "bytes": len(body)}

    # ------------------------------------------------------------------ data out
    @app.post("/v0/pipelines/{name}/egress/{view}", summary="Stream the view's changes as NDJSON, one line per "
              "step from the moment of connection: {\"sequence_number\": step, \"json_data\": [{\"insert\": row} "
              "| {\"delete\": row}, ...]}")
    async def egress(name: str, view: str, format: str = "json"):
        e = mgr.get(name)
        p = e.require()
        v = view_of(p, view)
        if format != "json":
            raise ApiError(400, "InvalidRequest", "egress supports format=json only")
        if p._error is not None:
            p._check()
        if p._state == "stopped":
            raise PipelineError(f"pipeline {name} is stopped; start it before streaming its changes")
        fan = e.fanouts[v]
        sub = Subscriber(asyncio.get_running_loop(), 0, egress_queue_bytes, EGRESS_QUEUE_LINES)
        fan.add(sub)
        sub.after_step = p.store.current.step   # read after add: steps up to it happened before the connection

        async def lines():
            try:
                while True:
                    sub.event.clear()
                    out, closed, err = sub.take()
                    if out:
                        yield b"".join(out)
                    if err is not None:
                        if err.get("error_code") == "EgressQueueOverflow":
                            mgr.egress_overflows += 1
                        yield (dumps({"error": err}) + "\n").encode()
                        return
                    if closed:
                        return
                    if out:
                        continue
                    try:
                        await asyncio.wait_for(sub.event.wait(), timeout=1.0)
                    except asyncio.TimeoutError:
                        if p._error is not None:
                            sub.close(error_body(f"pipeline {name} failed: {p._error}", "PipelineFailed"))
            finally:
                fan.remove(sub)

        return StreamingResponse(lines(), media_type="application/x-ndjson",
                                 headers={"x-sequence-number": str(sub.after_step), "cache-control": "no-cache"})

    @app.get("/v0/pipelines/{name}/query", summary="Ad-hoc read-only SELECT over the last committed step; "
             "format=json (an array of row objects: timestamps ISO 8601, decimals as strings), csv, text, "
             "arrow (IPC stream) or parquet")
    def query(name: str, sql: str = Query(..., description="one SELECT statement"), format: str = "json"):
        p = mgr.get(name).require()
        if format not in ("json", "csv", "text", "arrow", "arrow_ipc", "parquet"):
            raise ApiError(400, "InvalidRequest", f"unknown format {format!r}; use json, csv, text, arrow or parquet")
        if format == "text":
            return PlainTextResponse("".join(p.query_tabular(sql)))
        t = p.query_arrow(sql)
        if format == "json":
            rows = [{k: json_value(x) for k, x in r.items()} for b in t.to_batches() for r in b.to_pylist()]
            return Response(dumps(rows), media_type="application/json")
        buf = io.BytesIO()
        if format == "csv":
            import pyarrow.csv as pcsv
            pcsv.write_csv(t, buf)
            return Response(buf.getvalue(), media_type="text/csv")
        if format == "parquet":
            import pyarrow.parquet as pq
            pq.write_table(t, buf)
            return Response(buf.getvalue(), media_type="application/vnd.apache.parquet")
        with pa.ipc.new_stream(buf, t.schema) as w:
            w.write_table(t)
        return Response(buf.getvalue(), media_type="application/vnd.apache.arrow.stream")

    # ------------------------------------------------------------------ metrics
    @app.get("/v0/metrics", summary="Prometheus metrics of every pipeline", response_class=PlainTextResponse)
    def metrics():
        return PlainTextResponse(prometheus(mgr), media_type="text/plain; version=0.0.4")

    return app


def _label(v: str) -> str:
    return str(v).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def prometheus(mgr: Manager) -> str:
    """The Prometheus text exposition of every pipeline's counters."""
    series: Dict[str, tuple] = {}   # metric -> (type, help, [(labels, value)])

    def add(metric: str, kind: str, help_: str, labels: dict, value) -> None:
        if value is None:
            return
        series.setdefault(metric, (kind, help_, []))[2].append((labels, value))

    add("sqlengine_http_requests_total", "counter", "HTTP requests received", {}, mgr.http_requests)
    add("sqlengine_egress_overflows_total", "counter", "egress subscribers disconnected for falling behind", {},
        mgr.egress_overflows)
    with mgr.lock:
        entries = list(mgr.entries.values())
    for e in entries:
        pl = {"pipeline": e.name}
        state = e.state()
        for s in ("created", "running", "paused", "stopped", "failed"):
            add("sqlengine_pipeline_state", "gauge", "1 for the pipeline's current state", {**pl, "state": s},
                int(state == s))
        add("sqlengine_pipeline_failed", "gauge", "1 if the pipeline failed", pl, int(state == "failed"))
        for t, n in e.ingress_requests.items():
            add("sqlengine_ingress_requests_total", "counter", "ingress requests per table", {**pl, "table": t}, n)
        for t, n in e.ingress_bytes.items():
            add("sqlengine_ingress_bytes_total", "counter", "ingress body bytes per table", {**pl, "table": t}, n)
        add("sqlengine_ingress_errors_total", "counter", "rejected ingress requests", pl, e.ingress_errors)
        for v, f in e.fanouts.items():
            add("sqlengine_egress_subscribers", "gauge", "connected egress streams", {**pl, "view": v},
                len(f.subscribers()))
        p = e.pipeline
        if p is None:
            continue
        try:
            st = p.status()
        except Exception:  # noqa: BLE001
            continue
        add("sqlengine_pipeline_step", "gauge", "the last committed step", pl, st.get("step"))
        merges = st.get("state_merges", {})
        add("sqlengine_state_merges_total", "counter", "background merges of state runs put in place", pl,
            merges.get("installed"))
        add("sqlengine_state_merge_stalls_total", "counter", "steps that waited for a background merge", pl,
            merges.get("stalls"))
        add("sqlengine_state_merge_running", "gauge", "1 while a background merge of state runs runs", pl,
            None if not merges else int(merges.get("running", False)))
        ops = st.get("spark_step_ops", {})
        add("sqlengine_spark_step_ops_on_driver_total", "counter",
            "ops of Spark steps run on the driver, where their changes were", pl, ops.get("on_driver"))
        add("sqlengine_spark_step_ops_declined_total", "counter",
            "ops of Spark steps whose state reads were too wide for the driver (run on Spark)", pl,
            ops.get("declined"))
        for t, n in st.get("rows_in", {}).items():
            add("sqlengine_table_rows_in_total", "counter", "rows (weight units) processed per table",
                {**pl, "table": t}, n)
        for v, n in st.get("rows_out", {}).items():
            add("sqlengine_view_rows_out_total", "counter", "changed rows output per view", {**pl, "view": v}, n)
        for q, key in (("0.5", "p50"), ("0.99", "p99")):
            add("sqlengine_step_latency_ms", "summary", "step latency (last 1000 steps)", {**pl, "quantile": q},
                st.get("step_latency_ms", {}).get(key))
        add("sqlengine_step_latency_last_ms", "gauge", "latency of the last step", pl,
            st.get("step_latency_ms", {}).get("last"))
        add("sqlengine_backlog_batches", "gauge", "logged input batches not yet processed", pl,
            st.get("backlog_batches"))
        for v, n in (st.get("errors") or {}).items():
            if isinstance(n, (int, float)):
                add("sqlengine_view_row_errors_total", "counter", "rows that failed in a view's expressions",
                    {**pl, "view": v}, n)
        for t, n in (st.get("dead_letter_rows") or {}).items():
            add("sqlengine_dead_letter_rows_total", "counter", "dead-lettered input rows", {**pl, "table": t}, n)
        for c, cs in (st.get("connectors") or {}).items():
            cl = {**pl, "connector": c, "kind": str(cs.get("kind"))}
            add("sqlengine_connector_rows_total", "counter", "rows read (source) or written (sink)", cl,
                cs.get("rows"))
            add("sqlengine_connector_errors_total", "counter", "connector errors", cl,
                cs.get("errors") if isinstance(cs.get("errors"), (int, float)) else None)
        add("sqlengine_pipeline_error", "gauge", "1 if the pipeline has an error", pl, int(bool(st.get("error"))))
    lines: List[str] = []
    for metric, (kind, help_, points) in series.items():
        lines.append(f"# HELP {metric} {help_}")
        lines.append(f"# TYPE {metric} {kind}")
        for labels, value in points:
            lab = ",".join(f'{k}="{_label(v)}"' for k, v in labels.items())
            lines.append(f"{metric}{{{lab}}} {value}" if lab else f"{metric} {value}")
    return "\n".join(lines) + "\n"
