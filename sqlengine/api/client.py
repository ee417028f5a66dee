"""A Python client of the pipeline server (``sqlengine serve``), with the embedded ``Pipeline``'s methods.

>>> from sqlengine.api.client import connect                  # doctest: +SKIP
>>> c = connect("http://127.0.0.1:8080", token="s3cret")      # doctest: +SKIP
>>> p = c.create_pipeline("shop", "CREATE TABLE t (x INT); CREATE MATERIALIZED VIEW v AS SELECT SUM(x) AS s FROM t;")  # doctest: +SKIP
>>> p.start(); p.input_json("t", [{"x": 1}]); p.wait_for_idle(); list(p.query("SELECT * FROM v"))  # doctest: +SKIP
[{'s': 1}]

Server errors raise the ``sqlengine`` exception classes (``InputError``, ``BindError``, ...) with the server's
message and, when known, ``line`` and ``column``; a timeout of ``wait_for_idle`` raises ``TimeoutError``.
"""
from __future__ import annotations

import datetime as dt
import decimal
import io
import json
import math
import os
import threading
import uuid
from collections import Counter
from typing import Any, Callable, Iterator, List, Optional

import httpx
import pandas as pd
import pyarrow as pa

from planner.errors import (BindError, ConnectorError, EngineError, InputError, InternalError, ParseError,
                            PermanentConnectorError, PipelineError, UnsupportedError)

from sqlengine.api.output import OutputHandler, check_format
from sqlengine.zset import WEIGHT

ERRORS = {"ParseError": ParseError, "BindError": BindError, "UnsupportedError": UnsupportedError,
          "InputError": InputError, "ConnectorError": ConnectorError,
          "PermanentConnectorError": PermanentConnectorError, "PipelineError": PipelineError,
          "InternalError": InternalError, "UnknownTable": InputError, "UnknownView": BindError,
          "UnknownPipeline": PipelineError, "InvalidName": PipelineError, "PipelineFailed": PipelineError,
          "PipelineDeleted": PipelineError}


class ServerError(EngineError):
    """An HTTP error that is not an engine error (401 Unauthorized, 413 PayloadTooLarge, ...)."""

    def __init__(self, message: str, status: int = 0, error_code: str = "", details: Optional[dict] = None):
        super().__init__(message)
        self.status, self.error_code, self.details = status, error_code, details or {}


def _raise_for(r: httpx.Response, sql: Optional[str] = None) -> None:
    """Raise the error of a failed response; ``sql``: the SQL text sent (a program or a query), to point into."""
    if r.status_code < 400:
        return
    try:
        body = r.json()
        message, code, details = body.get("message", r.text), body.get("error_code", ""), body.get("details") or {}
    except ValueError:
        message, code, details = r.text or r.reason_phrase, "", {}
    _raise_error(message, code, details, r.status_code, sql)


def _engine_error(cls, message: str, details: dict, sql: Optional[str] = None) -> EngineError:
    """The server's error as the embedded one: with line, column and the caret under the position in
    ``str(e)``.  From the SQL sent and the offset if they agree with the server's line and column, else from
    the text the server rendered."""
    line, column, offset, rendered = (details.get("line"), details.get("column"), details.get("offset"),
                                      details.get("rendered"))
    if line is not None and sql is not None and isinstance(offset, int):
        err = cls(message, sql=sql, offset=offset)
        if (err.line, err.column) == (line, column) and (rendered is None or str(err) == rendered):
            return err
    err = cls(message)
    err.line, err.column = line, column
    if line is not None and isinstance(rendered, str):
        err.args = (rendered,)
        source = rendered.split("\n")
        if len(source) >= 2:   # "message (line L, column C)", "  <the line>", "  <caret>": excerpt() works too
            err.sql = "\n" * (line - 1) + source[-2][2:]
    return err


def _raise_error(message: str, code: str, details: dict, status: int = 0, sql: Optional[str] = None) -> None:
    if code == "Timeout" or status == 408:
        raise TimeoutError(message)
    cls = ERRORS.get(code)
    if cls is None:
        raise ServerError(f"{message} (HTTP {status} {code})" if status else message, status, code, details)
    err = _engine_error(cls, message, details, sql)
    err.status, err.error_code, err.details = status, code, details
    raise err


def _json(v: Any) -> Any:
    """A Python / pandas / numpy value as JSON the engine's ``input_json`` takes."""
    if v is None:
        return None
    if isinstance(v, float):
        return None if math.isnan(v) else v
    if isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, decimal.Decimal):
        return str(v)
    if v is pd.NaT:
        return None
    if isinstance(v, (pd.Timestamp, dt.datetime, dt.date)):
        return v.isoformat()
    if hasattr(v, "item"):
        return _json(v.item())
    if isinstance(v, dict):
        return {str(k): _json(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_json(x) for x in v]
    return str(v)


def _decoder(sql_type: str) -> Callable[[Any], Any]:
    base = sql_type.split("(")[0].strip().upper()
    if base == "DECIMAL":
        return lambda v: None if v is None else decimal.Decimal(str(v))
    if base == "TIMESTAMP":
        return lambda v: None if v is None else pd.Timestamp(v)
    if base == "DATE":
        return lambda v: None if v is None else dt.date.fromisoformat(str(v)[:10])
    return lambda v: v


class _Stream:
    """A background thread reading one ``egress`` stream and calling ``callback(chunk, step)`` per line."""

    def __init__(self, rp: "RemotePipeline", view: str, callback: Callable[[pd.DataFrame, int], None]):
        self.rp, self.view, self.callback = rp, view, callback
        cols = rp._info()["views"][view]["columns"]
        self.names = [c["name"] for c in cols]
        self.decoders = [_decoder(c["type"]) for c in cols]
        self.markers: set = set()
        self.cv = threading.Condition()
        self.ready = threading.Event()
        self.done = False
        self.error: Optional[BaseException] = None
        self.response: Optional[httpx.Response] = None
        self.thread = threading.Thread(target=self._run, name=f"sqlengine-egress-{view}", daemon=True)
        self.thread.start()
        self.ready.wait(timeout=rp._client.timeout)
        if self.error is not None:
            raise self.error
        if not self.ready.is_set():
            raise TimeoutError(f"egress stream of view {view} did not open")

    def _chunk(self, elems: List[dict]) -> pd.DataFrame:
        weights: Counter = Counter()
        order: List[tuple] = []
        for e in elems:
            (kind, row), = e.items()
            key = tuple(row.get(n) for n in self.names)
            if key not in weights:
                order.append(key)
            weights[key] += 1 if kind == "insert" else -1
        rows = [[d(v) for d, v in zip(self.decoders, k)] + [weights[k]] for k in order if weights[k] != 0]
        df = pd.DataFrame(rows, columns=self.names + [WEIGHT])
        df[WEIGHT] = df[WEIGHT].astype("int64")
        return df

    def _run(self) -> None:
        c = self.rp._client
        try:
            with c._http.stream("POST", c._url(f"/v0/pipelines/{self.rp.name}/egress/{self.view}"),
                                timeout=httpx.Timeout(c.timeout, read=None)) as r:
                if r.status_code >= 400:
                    r.read()
                    try:
                        _raise_for(r)
                    except BaseException as e:  # noqa: BLE001 - delivered to the caller of foreach_chunk
                        self.error = e
                        return
                self.response = r
                self.ready.set()
                for line in r.iter_lines():
                    if not line.strip():
                        continue
                    msg = json.loads(line)
                    if "marker" in msg:
                        with self.cv:
                            self.markers.add(msg["marker"])
                            self.cv.notify_all()
                        continue
                    if "error" in msg:
                        err = msg["error"]
                        try:
                            _raise_error(err.get("message", ""), err.get("error_code", ""), err.get("details") or {})
                        except BaseException as e:  # noqa: BLE001
                            self.error = e
                        self.rp._failed(self.view, self.error)
                        return
                    chunk = self._chunk(msg.get("json_data") or [])
                    if len(chunk):
                        try:
                            self.callback(chunk, int(msg.get("sequence_number", 0)))
                        except BaseException as e:  # noqa: BLE001 - as embedded: the pipeline (client) fails
                            self.rp._failed(self.view, PipelineError(
                                f"callback for view {self.view} raised {type(e).__name__}: {e}"))
        except (httpx.HTTPError, OSError) as e:
            if not self.done:
                self.error = ConnectionError(f"egress stream of view {self.view} broke: {e}")
        finally:
            with self.cv:
                self.done = True
                self.cv.notify_all()
            self.ready.set()

    def wait_marker(self, marker: str, timeout: Optional[float]) -> bool:
        with self.cv:
            return self.cv.wait_for(lambda: marker in self.markers or self.done, timeout=timeout)

    def close(self, timeout: Optional[float] = 10) -> None:
        self.done = True
        r = self.response
        if r is not None:
            try:
                r.close()
            except Exception:  # noqa: BLE001
                pass
        self.thread.join(timeout=timeout)


class RemotePipeline:
    """A pipeline on a server, with the methods of :class:`sqlengine.Pipeline` (those of
    :class:`sqlengine.api.protocol.PipelineLike`, checked by ``tests/api/test_api_protocol.py``)."""

    def __init__(self, client: "Client", name: str):
        self._client = client
        self.name = name
        self._streams: List[_Stream] = []
        self._error: Optional[BaseException] = None
        self._info_cache: Optional[dict] = None

    def __repr__(self) -> str:
        return f"RemotePipeline({self.name!r} at {self._client.url})"

    # ------------------------------------------------------------------ plumbing
    def _path(self, tail: str = "") -> str:
        return f"/v0/pipelines/{self.name}{tail}"

    def _call(self, method: str, tail: str = "", **kw) -> httpx.Response:
        self._check()
        return self._client._request(method, self._path(tail), **kw)

    def _info(self) -> dict:
        if self._info_cache is None:
            self._info_cache = self._client._request("GET", self._path()).json()
        return self._info_cache

    def _failed(self, view: str, e: BaseException) -> None:
        if self._error is None:
            self._error = e

    def _check(self) -> None:
        if self._error is not None:
            err = self._error
            if isinstance(err, EngineError):
                raise _engine_error(type(err), err.message, getattr(err, "details", None) or {}) from err
            raise PipelineError(f"pipeline failed: {type(err).__name__}: {err}") from err

    @property
    def runtime_config(self):
        """The settings the pipeline runs with on the server, as ``Pipeline.runtime_config`` (``storage``: its
        storage directory on the server's machine)."""
        from sqlengine.api.runtime_config import RuntimeConfig
        return RuntimeConfig.from_dict(self._client._request("GET", self._path()).json()["runtime_config"])

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        self._call("POST", "/start")

    def pause(self) -> None:
        self._call("POST", "/pause")

    def resume(self) -> None:
        self._call("POST", "/resume")

    def stop(self, force: bool = False) -> None:
        """Stop the pipeline (unless ``force``, after processing all acknowledged input); the changes of the
        last steps are delivered to ``foreach_chunk`` callbacks before this returns."""
        self._client._request("POST", self._path("/stop"), params={"force": str(bool(force)).lower()},
                              timeout=None)
        for s in self._streams:
            s.thread.join(timeout=None if not force else 5)
            s.close(timeout=1)
        self._streams = []

    def restart(self) -> None:
        """Stop (processing all acknowledged input) and start again."""
        self.stop()
        self.start()

    def clear_storage(self) -> None:
        """Delete the stopped pipeline's state, input log and outbox; it can then be started afresh."""
        self._call("POST", "/clear_storage")

    def storage_status(self) -> str:
        """``"in_use"`` or ``"cleared"``."""
        return str(self._call("GET", "/storage_status").json()["storage_status"])

    def checkpoint(self) -> int:
        return int(self._call("POST", "/checkpoint", timeout=None).json()["step"])

    def status(self) -> dict:
        return self._client._request("GET", self._path("/stats")).json()

    def metrics(self) -> dict:
        return self.status()

    def delete(self, clear_storage: bool = False) -> None:
        for s in self._streams:
            s.close(timeout=1)
        self._streams = []
        self._client._request("DELETE", self._path(), params={"clear_storage": str(bool(clear_storage)).lower()})

    def pause_connector(self, relation: str, name: str) -> None:
        self._call("POST", f"/{self._kind(relation)}/{relation}/connectors/{name}/pause")

    def resume_connector(self, relation: str, name: str) -> None:
        self._call("POST", f"/{self._kind(relation)}/{relation}/connectors/{name}/start")

    def _kind(self, relation: str) -> str:
        return "views" if relation.lower() in self._info().get("views", {}) else "tables"

    # ------------------------------------------------------------------ input
    def _ingress(self, table: str, body: bytes, **params) -> None:
        params = {k: (str(v).lower() if isinstance(v, bool) else v) for k, v in params.items() if v is not None}
        self._call("POST", f"/ingress/{table}", content=body, params=params, timeout=None)

    @staticmethod
    def _no_dead_letter_path(dead_letter: Optional[str]) -> None:
        """``dead_letter`` is in the signatures so that they match ``Pipeline``'s (:mod:`sqlengine.api.protocol`);
        the server chooses where the bad rows go."""
        if dead_letter is not None:
            raise InputError("dead_letter: a pipeline on a server writes the bad rows of on_error='dead_letter' to "
                             "its own storage (<storage_dir>/dead_letter/<table>.jsonl); leave dead_letter unset")

    def input_pandas(self, table: str, df: pd.DataFrame, delete: bool = False, on_error: str = "reject",
                     dead_letter: Optional[str] = None, force: bool = False) -> None:
        """Insert (or delete) the rows of ``df``; sent as an Arrow IPC stream, converted back to a DataFrame on
        the server and pushed with ``Pipeline.input_pandas``."""
        self._no_dead_letter_path(dead_letter)
        t = pa.Table.from_pandas(df, preserve_index=False)
        buf = io.BytesIO()
        with pa.ipc.new_stream(buf, t.schema) as w:
            w.write_table(t)
        self._ingress(table, buf.getvalue(), format="arrow", delete=delete, on_error=on_error)

    def input_json(self, table: str, data, update_format: str = "raw", on_error: str = "reject",
                   dead_letter: Optional[str] = None, force: bool = False) -> None:
        self._no_dead_letter_path(dead_letter)
        if isinstance(data, (str, bytes, bytearray)):
            body = data.encode() if isinstance(data, str) else bytes(data)
        else:
            body = json.dumps(_json(data if isinstance(data, list) else [data])).encode()
        self._ingress(table, body, format="json", update_format=update_format, on_error=on_error)

    def input_csv(self, table: str, data, delete: bool = False, on_error: str = "reject",
                  dead_letter: Optional[str] = None, force: bool = False) -> None:
        """``data``: CSV text (with a header row) or the path of a local CSV file (uploaded)."""
        self._no_dead_letter_path(dead_letter)
        if isinstance(data, os.PathLike) or (isinstance(data, str) and "\n" not in data and os.path.exists(data)):
            with open(data, "rb") as f:
                body = f.read()
        else:
            body = data.encode() if isinstance(data, str) else bytes(data)
        self._ingress(table, body, format="csv", delete=delete, on_error=on_error)

    def execute(self, sql: str) -> int:
        return int(self._call("POST", "/execute", content=sql.encode(), timeout=None, sql=sql).json()["rows"])

    # ------------------------------------------------------------------ output
    def _view(self, view: str) -> str:
        v = view.lower()
        views = self._info().get("views", {})
        if v not in views:
            self._info_cache = None
            views = self._info().get("views", {})
        if v not in views:
            raise BindError(f"unknown view '{view}'. Views: {', '.join(views) or '(none)'}")
        return v

    def foreach_chunk(self, view: str, callback: Callable[[pd.DataFrame, int], None], format: str = "pandas") -> None:
        """Call ``callback(chunk, seq_no)`` on a background thread once per step that changed ``view`` (from now
        on); ``chunk`` holds the view's columns plus ``__weight``, as a DataFrame or (``format="arrow"``) a
        ``pyarrow.Table`` made from it."""
        self._check()
        if check_format(format) == "arrow":
            pandas_callback = callback

            def callback(chunk, seq, pandas_callback=pandas_callback):
                pandas_callback(pa.Table.from_pandas(chunk, preserve_index=False), seq)
        self._streams.append(_Stream(self, self._view(view), callback))

    def listen(self, view: str) -> OutputHandler:
        v = self._view(view)
        h = OutputHandler(v, [c["name"] for c in self._info()["views"][v]["columns"]])
        self.foreach_chunk(v, h._push)
        return h

    # ------------------------------------------------------------------ waiting
    def wait_for_idle(self, timeout_s: Optional[float] = None, idle_interval_s: Optional[float] = None) -> None:
        """Block until all acknowledged input is processed and its changes delivered, also to this client's
        ``foreach_chunk`` callbacks and ``listen`` handlers (``idle_interval_s`` as for ``Pipeline``)."""
        marker = uuid.uuid4().hex if self._streams else None
        params = {"timeout_s": timeout_s, "marker": marker, "idle_interval_s": idle_interval_s}
        self._call("POST", "/wait_for_idle", params={k: v for k, v in params.items() if v is not None},
                   timeout=None if timeout_s is None else timeout_s + self._client.timeout)
        for s in list(self._streams):
            if not s.wait_marker(marker, timeout_s):
                raise TimeoutError(f"pipeline {self.name}: changes of view {s.view} not delivered after "
                                   f"{timeout_s} s")
        self._check()

    def wait_for_completion(self, timeout_s: Optional[float] = None) -> None:
        params = {} if timeout_s is None else {"timeout_s": timeout_s}
        self._call("POST", "/wait_for_completion", params=params, timeout=None)
        self.wait_for_idle(timeout_s)

    # ------------------------------------------------------------------ queries
    def _query(self, sql: str, fmt: str) -> httpx.Response:
        return self._call("GET", "/query", params={"sql": sql, "format": fmt}, timeout=None, sql=sql)

    def query_arrow(self, sql: str) -> pa.Table:
        return pa.ipc.open_stream(self._query(sql, "arrow").content).read_all()

    def query_pandas(self, sql: str) -> pd.DataFrame:
        return self.query_arrow(sql).to_pandas()

    def query(self, sql: str) -> Iterator[dict]:
        t = self.query_arrow(sql)
        for batch in t.to_batches():
            yield from batch.to_pylist()

    def query_tabular(self, sql: str) -> Iterator[str]:
        yield from self._query(sql, "text").text.splitlines(keepends=True)

    def query_parquet(self, sql: str, path: str) -> None:
        data = self._query(sql, "parquet").content
        path = os.path.abspath(os.fspath(path))
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(data)
        except OSError as e:
            raise InputError(f"cannot write the query result to {path}: {e}") from e

    def explain(self, view: str, passes: bool = False) -> str:
        return self._call("GET", f"/explain/{view}", params={"passes": str(bool(passes)).lower()}).text


class Client:
    """A connection to a pipeline server."""

    def __init__(self, url: str, token: Optional[str] = None, timeout: float = 60.0):
        self.url = url.rstrip("/")
        self.timeout = timeout
        token = token if token is not None else (os.environ.get("SQLENGINE_TOKEN") or None)
        headers = {"authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(headers=headers, timeout=timeout)

    def _url(self, path: str) -> str:
        return self.url + path

    def _request(self, method: str, path: str, timeout: Any = "default", sql: Optional[str] = None,
                 **kw) -> httpx.Response:
        if timeout != "default":
            kw["timeout"] = httpx.Timeout(self.timeout, read=timeout) if timeout is not None else \
                httpx.Timeout(self.timeout, read=None)
        r = self._http.request(method, self._url(path), **kw)
        _raise_for(r, sql)
        return r

    def create_pipeline(self, name: str, sql: str, runtime_config=None) -> RemotePipeline:
        """Create (or replace, if it is not running) the pipeline ``name``; program errors raise ``ParseError``,
        ``BindError`` or ``UnsupportedError`` with line and column.  ``runtime_config``: a
        :class:`~sqlengine.RuntimeConfig` or its ``to_dict()`` (checked here, sent whole)."""
        from sqlengine.api.runtime_config import RuntimeConfig
        rc = RuntimeConfig.coerce(runtime_config).to_dict()
        self._request("PUT", f"/v0/pipelines/{name}", json={"program_code": sql, "runtime_config": rc}, sql=sql)
        return RemotePipeline(self, name)

    def pipeline(self, name: str) -> RemotePipeline:
        """An existing pipeline (``PipelineError`` if there is none of that name)."""
        self._request("GET", f"/v0/pipelines/{name}")
        return RemotePipeline(self, name)

    def pipelines(self) -> List[dict]:
        """Every pipeline: name, status, desired_status, deployment_error."""
        return self._request("GET", "/v0/pipelines").json()

    def metrics(self) -> str:
        return self._request("GET", "/v0/metrics").text

    def close(self) -> None:
        self._http.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def connect(url: str = "http://127.0.0.1:8080", token: Optional[str] = None, timeout: float = 60.0) -> Client:
    """A :class:`Client` of the server at ``url``; ``token`` defaults to the ``SQLENGINE_TOKEN`` environment
    variable."""
    return Client(url, token=token, timeout=timeout)
