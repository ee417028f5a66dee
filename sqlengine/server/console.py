"""The web console: static HTML/CSS/JS (``static/``) served by the pipeline server at ``/`` and ``/console/...``.

The page itself needs no token (it holds no data); everything it shows comes from the REST API (``/v0/...``),
which it calls with the bearer token the user enters (kept in the tab's ``sessionStorage``).  So the assets are
served by an ASGI middleware placed in front of the token check, for ``GET``/``HEAD`` of exactly these paths:

* ``/``, ``/console`` and ``/console/``: ``index.html``;
* ``/console/<file>``: a file of ``static/`` (no sub-directories).

Any other request goes on to the app untouched.  The responses forbid framing and any script, style or
connection that is not from the server itself (``Content-Security-Policy``): nothing is loaded from a CDN.
"""
from __future__ import annotations

import os
import re
from typing import Dict, Optional

from starlette.responses import FileResponse

STATIC_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static")
PREFIX = "/console"
INDEX = "index.html"
FILE_RE = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9_.-]*$")
TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
         ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml", ".png": "image/png",
         ".ico": "image/x-icon", ".json": "application/json"}
HEADERS = {
    "cache-control": "no-cache",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "content-security-policy": "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                               "connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'",
}

__all__ = ["ConsoleAssets", "mount_console", "asset_for"]


def asset_for(path: str, static_dir: str = STATIC_DIR) -> Optional[str]:
    """The file of ``static_dir`` that ``path`` (a request path) names, or None if it names none.

    >>> asset_for("/") == asset_for("/console/") == os.path.join(STATIC_DIR, "index.html")
    True
    >>> asset_for("/console/console.js").endswith("console.js"), asset_for("/console/../app.py")
    (True, None)
    """
    if path in ("/", PREFIX, PREFIX + "/"):
        name = INDEX
    elif path.startswith(PREFIX + "/"):
        name = path[len(PREFIX) + 1:]
        if not FILE_RE.match(name):
            return None
    else:
        return None
    full = os.path.join(static_dir, name)
    return full if os.path.isfile(full) else None


class ConsoleAssets:
    """Pure ASGI middleware serving the console's static files ahead of the rest of the app."""

    def __init__(self, app, static_dir: str = STATIC_DIR):
        self.app = app
        self.static_dir = static_dir

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["method"] in ("GET", "HEAD"):
            full = asset_for(scope["path"], self.static_dir)
            if full is not None:
                media = TYPES.get(os.path.splitext(full)[1], "application/octet-stream")
                headers: Dict[str, str] = dict(HEADERS)
                return await FileResponse(full, media_type=media, headers=headers)(scope, receive, send)
        return await self.app(scope, receive, send)


def mount_console(app, static_dir: str = STATIC_DIR) -> None:
    """Serve the console from ``app`` (call after adding the token middleware, so that the console's middleware
    is the outer one: the page loads without a token; the API calls it makes carry one)."""
    app.add_middleware(ConsoleAssets, static_dir=static_dir)
