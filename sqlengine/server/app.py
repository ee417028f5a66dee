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

from contextlib import asynccontextmanager
from typing import Dict, Optional

from fastapi import FastAPI
from starlette.concurrency import run_in_threadpool

from .auth import DEFAULT_MAX_BODY_BYTES, Guard
from .errors import install_error_handlers
from .fanout import EGRESS_QUEUE_BYTES
from .registry import Manager
from .routes import ROUTERS

# the app is assembled from these modules:
#   registry.py    the pipelines (Entry, Manager): definitions persisted under storage_root, restored at startup
#   auth.py        the bearer-token check and the request body limit (ASGI middleware)
#   errors.py      error bodies and the exception handlers
#   encoding.py    values as JSON;  fanout.py: egress streams;  prometheus.py: the metrics text
#   routes/        one APIRouter per resource: pipelines, ingress, egress, query, metrics
#   console.py     the web console's static files (middleware in front of the token check)


def create_app(storage_root: str, token: Optional[str] = None, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
               spark_conf: Optional[Dict[str, str]] = None, egress_queue_bytes: int = EGRESS_QUEUE_BYTES,
               restore: bool = True, udfs=()) -> FastAPI:
    """The FastAPI app serving the pipelines kept under ``storage_root``.

    ``token``: if set, every request but ``GET /healthz`` needs ``Authorization: Bearer <token>``.
    ``max_body_bytes``: larger request bodies get 413.  ``spark_conf``: defaults for every pipeline's
    ``runtime_config["spark_conf"]``.  ``restore``: re-create the pipelines found in ``storage_root`` (and
    start those that were running) when the app starts.  ``udfs``: Python functions (``sqlengine.udf``) every
    pipeline's program may call.
    """
    if token is not None and not token:
        raise ValueError("token must be a non-empty string or None")
    mgr = Manager(storage_root, spark_conf, udfs)

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

    install_error_handlers(app)
    app.state.egress_queue_bytes = egress_queue_bytes
    for router in ROUTERS:
        app.include_router(router)
    return app
