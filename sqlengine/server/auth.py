"""The server's guard: the bearer-token check and the request body limit, as pure ASGI middleware."""
from __future__ import annotations

import hmac
import json
from typing import Optional

from .errors import BodyTooLarge, error_body
from .registry import Manager

DEFAULT_MAX_BODY_BYTES = 64 << 20


class Guard:
    """Pure ASGI middleware: bearer-token check (constant time; ``GET /healthz`` is open) and the request body
    limit (``Content-Length`` checked up front, streamed bytes counted)."""

    def __init__(self, app, token: Optional[str], max_body_bytes: int, manager: Manager):
        self.app, self.token, self.max, self.manager = app, token, max_body_bytes, manager

    async def _reply(self, send, status: int, body: dict, headers=()) -> None:
        data = json.dumps(body).encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode()),
                                (b"connection", b"close"), *headers]})
        await send({"type": "http.response.body", "body": data})

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        self.manager.http_requests += 1
        headers = {k.lower(): v for k, v in scope.get("headers", [])}
        if self.token is not None and not (scope["path"] == "/healthz" and scope["method"] in ("GET", "HEAD")):
            auth = headers.get(b"authorization", b"")
            given = auth[7:].strip() if auth[:7].lower() == b"bearer " else b""
            if not hmac.compare_digest(given, self.token.encode()):
                return await self._reply(send, 401, error_body(
                    "missing or wrong bearer token (send 'Authorization: Bearer <token>')", "Unauthorized"),
                    [(b"www-authenticate", b"Bearer")])
        cl = headers.get(b"content-length")
        if cl is not None:
            try:
                n = int(cl)
            except ValueError:
                return await self._reply(send, 400, error_body("invalid Content-Length", "InvalidRequest"))
            if n > self.max:
                return await self._reply(send, 413, error_body(
                    f"request body of {n} bytes is larger than the limit of {self.max} bytes", "PayloadTooLarge",
                    {"limit": self.max}))
        count = 0
        limit = self.max

        async def limited():
            nonlocal count
            msg = await receive()
            if msg["type"] == "http.request":
                count += len(msg.get("body", b""))
                if count > limit:
                    raise BodyTooLarge(limit)
            return msg

        return await self.app(scope, limited, send)
