"""The server's registry of pipelines: one :class:`Entry` per named pipeline (its definition, persisted in
``<root>/<name>/pipeline.json``, its embedded :class:`sqlengine.Pipeline` and its egress fan-outs), kept by the
:class:`Manager`, which re-creates them when the server starts."""
from __future__ import annotations

import datetime as dt
import json
import logging
import os
import re
import threading
import time
from typing import Any, Dict, Optional

from planner.errors import EngineError, InternalError, PipelineError

from ..api.pipeline import Pipeline
from ..api.runtime_config import RuntimeConfig
from .encoding import columns_of
from .errors import ApiError, error_body
from .fanout import Fanout

log = logging.getLogger("sqlengine.server")

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,99}$")


def check_name(name: str) -> None:
    if not NAME_RE.match(name):
        raise ApiError(400, "InvalidName", f"invalid pipeline name {name!r}: use letters, digits, '_' and '-' "
                       "(at most 100, starting with a letter or digit)")


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
                              runtime_config=RuntimeConfig.from_dict(self.runtime_config), udfs=self.manager.udfs)
        fanouts = {}
        for v in p.program.views:
            cols = columns_of(p, v)
            f = Fanout([c["name"] for c in cols], [c["type"] for c in cols])
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
    def __init__(self, root: str, spark_conf: Optional[dict] = None, udfs=()):
        self.root = os.path.abspath(root)
        os.makedirs(self.root, exist_ok=True)
        self.spark_conf = dict(spark_conf or {})
        self.udfs = list(udfs)   # Python functions every pipeline's program may call (``serve --udfs``)
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
