"""Data out: ``/egress/{view}`` streams the view's changes as NDJSON, one line per step from the moment of
connection (see :mod:`sqlengine.server.fanout`)."""
from __future__ import annotations

import asyncio

from fastapi import APIRouter, Depends, Request
from fastapi.responses import StreamingResponse

from planner.errors import PipelineError

from ..encoding import dumps
from ..errors import ApiError, error_body
from ..fanout import EGRESS_QUEUE_LINES, Subscriber
from ..registry import Manager
from .deps import get_manager, view_of

router = APIRouter()


@router.post("/v0/pipelines/{name}/egress/{view}", summary="Stream the view's changes as NDJSON, one line per "
             "step from the moment of connection: {\"sequence_number\": step, \"json_data\": [{\"insert\": row} "
             "| {\"delete\": row}, ...]}")
async def egress(name: str, view: str, request: Request, format: str = "json",
                 mgr: Manager = Depends(get_manager)):
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
    sub = Subscriber(asyncio.get_running_loop(), 0, request.app.state.egress_queue_bytes, EGRESS_QUEUE_LINES)
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
