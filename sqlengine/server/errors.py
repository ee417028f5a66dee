"""The server's errors: every error body is ``{"message": ..., "error_code": ..., "details": {...}}``.

Engine errors keep their class name as ``error_code`` (the client raises the same class) and their SQL
position in ``details``; :func:`install_error_handlers` maps every other failure to such a body.
"""
from __future__ import annotations

import json
import logging
from typing import Any, Dict, Optional

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from planner.errors import (BindError, ConnectorError, EngineError, InputError, InternalError, ParseError,
                            PipelineError, UnsupportedError)

from .encoding import dumps

log = logging.getLogger("sqlengine.server")

STATUS_OF = {ParseError: 400, BindError: 400, UnsupportedError: 400, InputError: 400, ConnectorError: 400,
             PipelineError: 409, InternalError: 500}


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


def install_error_handlers(app: FastAPI) -> None:
    """Answer every error with an error body: engine errors, :class:`ApiError`, timeouts (408), HTTP errors,
    invalid requests (400) and anything else (500, logged)."""

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
