"""The service: ``/healthz`` (no token needed) and ``/v0/metrics`` (Prometheus, see
:mod:`sqlengine.server.prometheus`)."""
from __future__ import annotations

from fastapi import APIRouter, Depends
from fastapi.responses import PlainTextResponse

from ..prometheus import prometheus
from ..registry import Manager
from .deps import get_manager

router = APIRouter()


@router.get("/healthz", summary="Liveness check (no token needed)")
def healthz():
    return {"status": "ok"}


@router.get("/v0/metrics", summary="Prometheus metrics of every pipeline", response_class=PlainTextResponse)
def metrics(mgr: Manager = Depends(get_manager)):
    return PlainTextResponse(prometheus(mgr), media_type="text/plain; version=0.0.4")
