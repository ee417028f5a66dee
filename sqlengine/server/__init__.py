"""The pipeline server: a REST API (Feldera's layout, ``/v0/pipelines/...``) over several pipelines.

Needs the ``server`` extra (``pip install -e ".[server]"``: fastapi, uvicorn, httpx).

>>> from sqlengine.server import create_app, serve   # doctest: +SKIP
>>> serve(port=8080, storage_root="./pipelines", token="s3cret")   # doctest: +SKIP
"""
from __future__ import annotations

import ipaddress
import os
from typing import Any, Dict, Optional

DEFAULT_MAX_BODY_BYTES = 64 << 20
DEFAULT_STORAGE_ROOT = os.path.join(".", "sqlengine-pipelines")

__all__ = ["create_app", "serve", "is_loopback", "DEFAULT_MAX_BODY_BYTES"]


def is_loopback(host: str) -> bool:
    """True if ``host`` only accepts connections from this machine (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def create_app(storage_root: str = DEFAULT_STORAGE_ROOT, token: Optional[str] = None,
               max_body_bytes: int = DEFAULT_MAX_BODY_BYTES, spark_conf: Optional[Dict[str, str]] = None, **kw):
    """The FastAPI app serving the pipelines under ``storage_root`` (see :func:`sqlengine.server.app.create_app`)."""
    from .app import create_app as _create
    return _create(storage_root, token=token, max_body_bytes=max_body_bytes, spark_conf=spark_conf, **kw)


def serve(host: str = "127.0.0.1", port: int = 8080, storage_root: str = DEFAULT_STORAGE_ROOT,
          token: Optional[str] = None, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
          spark_conf: Optional[Dict[str, str]] = None, log_level: str = "info", log_config: Any = None,
          udfs=()) -> None:
    """Run the server until interrupted (blocking).  ``token`` defaults to the ``SQLENGINE_TOKEN`` environment
    variable; binding a host other than a loopback address without a token raises ``ValueError``.
    ``log_config``: uvicorn's ``log_config`` (default: uvicorn's own; ``sqlengine serve`` passes one that leaves
    its records to the root logger, see :mod:`sqlengine.logs`)."""
    if token is None:
        token = os.environ.get("SQLENGINE_TOKEN") or None
    if not is_loopback(host) and not token:
        raise ValueError(f"refusing to serve on {host!r} without a token: anyone who can reach it could run "
                         "pipelines. Pass a token (--token or SQLENGINE_TOKEN) or bind 127.0.0.1.")
    import uvicorn
    app = create_app(storage_root, token=token, max_body_bytes=max_body_bytes, spark_conf=spark_conf, udfs=udfs)
    kw = {} if log_config is None else {"log_config": log_config}
    uvicorn.run(app, host=host, port=port, log_level=log_level, **kw)
