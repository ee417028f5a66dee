"""Ad-hoc queries: ``/query`` runs a read-only SELECT over the last committed step, answered as JSON, CSV,
text, Arrow IPC or parquet."""
from __future__ import annotations

import io

import pyarrow as pa
from fastapi import APIRouter, Depends, Query
from fastapi.responses import PlainTextResponse, Response

from sqlengine import nested

from ..encoding import columns_header, dumps, json_value
from ..errors import ApiError
from ..registry import Manager
from .deps import get_manager

router = APIRouter()


@router.get("/v0/pipelines/{name}/query", summary="Ad-hoc read-only SELECT over the last committed step; "
            "format=json (an array of row objects: timestamps ISO 8601, decimals as strings; the header x-columns "
            "gives the columns' names and SQL types as a JSON array), csv, text, "
            "arrow (IPC stream) or parquet")
def query(name: str, sql: str = Query(..., description="one SELECT statement"), format: str = "json",
          mgr: Manager = Depends(get_manager)):
    p = mgr.get(name).require()
    if format not in ("json", "csv", "text", "arrow", "arrow_ipc", "parquet"):
        raise ApiError(400, "InvalidRequest", f"unknown format {format!r}; use json, csv, text, arrow or parquet")
    if format == "text":
        return PlainTextResponse("".join(p.query_tabular(sql)))
    t = p.query_arrow(sql)
    if format == "json":
        columns = [nested.python_values(c) for c in t.columns]   # (a MAP as an object)
        rows = [{k: json_value(x) for k, x in zip(t.column_names, r)} for r in zip(*columns)]
        return Response(dumps(rows), media_type="application/json", headers={"x-columns": columns_header(t.schema)})
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
