"""Data in: rows pushed into a table (``/ingress/{table}``: JSON, CSV or Arrow IPC; durable before the reply)
and ``/execute`` (one INSERT or DELETE statement)."""
from __future__ import annotations

from typing import Optional

import pyarrow as pa
from fastapi import APIRouter, Depends, Request
from starlette.concurrency import run_in_threadpool

from planner.errors import EngineError, InputError

from ..errors import ApiError
from ..registry import Manager
from .deps import get_manager, table_of

router = APIRouter()


@router.post("/v0/pipelines/{name}/execute", summary="Run one INSERT ... VALUES/SELECT or DELETE ... WHERE "
             "(the body is the SQL text); returns the rows affected")
async def execute(name: str, request: Request, mgr: Manager = Depends(get_manager)):
    p = mgr.get(name).require()
    sql = (await request.body()).decode("utf-8", errors="replace")
    n = await run_in_threadpool(p.execute, sql)
    return {"rows": int(n)}


@router.post("/v0/pipelines/{name}/ingress/{table}", summary="Push rows into a table: format=json (a JSON array "
             "or one record per line; update_format=raw|insert_delete), csv (header row) or arrow (IPC stream). "
             "Returns once the input is durable.")
async def ingress(name: str, table: str, request: Request, format: str = "json", update_format: str = "raw",
                  array: Optional[bool] = None, delete: bool = False, on_error: str = "reject",
                  mgr: Manager = Depends(get_manager)):
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
