"""Pipelines: create or replace (``PUT``), list, get and delete; the lifecycle (start, pause, resume, stop,
checkpoint, clear storage); stats, waiting, explain, and pausing or resuming connectors.

Engine calls block: these routes are synchronous (FastAPI runs them on its thread pool).  Lifecycle changes
hold the entry's lock and persist its desired state.
"""
from __future__ import annotations

import json
import os
import shutil
from typing import Any, Dict, Optional

from fastapi import APIRouter, Body, Depends
from fastapi.responses import JSONResponse, PlainTextResponse

from planner.errors import EngineError, PipelineError

from ...api.runtime_config import RuntimeConfig
from ..encoding import dumps, json_value
from ..errors import ApiError, error_body
from ..registry import Entry, Manager, check_name
from .deps import get_manager, view_of

router = APIRouter()


@router.get("/v0/pipelines", summary="List the pipelines with their status")
def list_pipelines(mgr: Manager = Depends(get_manager)):
    with mgr.lock:
        entries = list(mgr.entries.values())
    return [e.info(full=False) for e in entries]


@router.put("/v0/pipelines/{name}", summary="Create or replace a pipeline (its SQL program and runtime_config)")
def put_pipeline(name: str, body: Dict[str, Any] = Body(..., examples=[{
        "program_code": "CREATE TABLE t (x INT); CREATE MATERIALIZED VIEW v AS SELECT COUNT(*) AS n FROM t;",
        "runtime_config": {"spark_conf": {"sqlengine.spark.start": "lazy"}}}]),
                 mgr: Manager = Depends(get_manager)):
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


@router.get("/v0/pipelines/{name}", summary="A pipeline: program, runtime_config, status, tables and views")
def get_pipeline(name: str, mgr: Manager = Depends(get_manager)):
    return mgr.get(name).info()


@router.delete("/v0/pipelines/{name}", summary="Stop and delete a pipeline (clear_storage=true also removes its "
               "stored state)")
def delete_pipeline(name: str, clear_storage: bool = False, mgr: Manager = Depends(get_manager)):
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


@router.post("/v0/pipelines/{name}/clear_storage", summary="Delete a stopped pipeline's state, input log and "
             "outbox (409 while it runs); it can then be started afresh")
def clear_storage(name: str, mgr: Manager = Depends(get_manager)):
    e = mgr.get(name)
    with e.lock:
        e.live().clear_storage()
    return {"name": name, "storage_status": e.pipeline.storage_status() if e.pipeline else "cleared"}


@router.get("/v0/pipelines/{name}/storage_status", summary="\"in_use\" or \"cleared\"")
def storage_status(name: str, mgr: Manager = Depends(get_manager)):
    e = mgr.get(name)
    with e.lock:
        return {"name": name, "storage_status": e.live().storage_status()}


@router.post("/v0/pipelines/{name}/start", summary="Start (or restart after stop) a pipeline")
def start(name: str, mgr: Manager = Depends(get_manager)):
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


@router.post("/v0/pipelines/{name}/pause", summary="Pause: stop taking steps (input is still accepted)")
def pause(name: str, mgr: Manager = Depends(get_manager)):
    e = mgr.get(name)
    with e.lock:
        e.require().pause()
        e.desired = "paused"
        e.persist()
    return {"name": name, "status": e.state()}


@router.post("/v0/pipelines/{name}/resume", summary="Resume a paused pipeline")
def resume(name: str, mgr: Manager = Depends(get_manager)):
    e = mgr.get(name)
    with e.lock:
        e.require().resume()
        e.desired = "running"
        e.persist()
    return {"name": name, "status": e.state()}


@router.post("/v0/pipelines/{name}/stop", summary="Stop a pipeline (unless force=true, after processing all "
             "acknowledged input); egress streams end")
def stop(name: str, force: bool = False, mgr: Manager = Depends(get_manager)):
    e = mgr.get(name)
    with e.lock:
        if e.pipeline is not None:
            e.pipeline.stop(force=force)
        e.close_streams()
        e.desired = "stopped"
        e.persist()
    return {"name": name, "status": e.state()}


@router.post("/v0/pipelines/{name}/checkpoint", summary="Process all acknowledged input; returns the committed "
             "step")
def checkpoint(name: str, mgr: Manager = Depends(get_manager)):
    return {"step": mgr.get(name).require().checkpoint()}


@router.get("/v0/pipelines/{name}/stats", summary="Pipeline.status(): state, step, row counters, latency, errors")
def stats(name: str, mgr: Manager = Depends(get_manager)):
    e = mgr.get(name)
    p = e.require()
    st = json.loads(dumps(json_value(p.status())))
    st["egress_subscribers"] = {v: len(f.subscribers()) for v, f in e.fanouts.items()}
    return st


@router.post("/v0/pipelines/{name}/wait_for_idle", summary="Block until all acknowledged input is processed and "
             "delivered (408 on timeout)")
def wait_for_idle(name: str, timeout_s: Optional[float] = None, marker: Optional[str] = None,
                  idle_interval_s: Optional[float] = None, mgr: Manager = Depends(get_manager)):
    e = mgr.get(name)
    p = e.require()
    p.wait_for_idle(timeout_s=timeout_s, idle_interval_s=idle_interval_s)
    if marker:
        line = (dumps({"marker": marker}) + "\n").encode()
        for f in list(e.fanouts.values()):
            for s in f.subscribers():
                s.offer(None, line)
    return {"step": p.store.current.step}


@router.post("/v0/pipelines/{name}/wait_for_completion", summary="Wait until every source connector has read "
             "all its input and everything is processed (408 on timeout)")
def wait_for_completion(name: str, timeout_s: Optional[float] = None, mgr: Manager = Depends(get_manager)):
    p = mgr.get(name).require()
    p.wait_for_completion(timeout_s=timeout_s)
    return {"step": p.store.current.step}


@router.get("/v0/pipelines/{name}/explain/{view}", summary="The view's logical plan and incremental circuit "
            "(text)", response_class=PlainTextResponse)
def explain(name: str, view: str, passes: bool = False, mgr: Manager = Depends(get_manager)):
    p = mgr.get(name).require()
    return PlainTextResponse(p.explain(view_of(p, view), passes=passes))


@router.post("/v0/pipelines/{name}/tables/{relation}/connectors/{connector}/{action}",
             summary="Pause or resume a source connector (action: pause|start|resume)")
@router.post("/v0/pipelines/{name}/views/{relation}/connectors/{connector}/{action}",
             summary="Pause or resume a sink connector (action: pause|start|resume)")
def connector_action(name: str, relation: str, connector: str, action: str, mgr: Manager = Depends(get_manager)):
    p = mgr.get(name).require()
    if action == "pause":
        p.pause_connector(relation, connector)
    elif action in ("start", "resume"):
        p.resume_connector(relation, connector)
    else:
        raise ApiError(400, "InvalidRequest", f"unknown connector action {action!r}; use pause or start")
    return {"relation": relation, "connector": connector, "action": action}
