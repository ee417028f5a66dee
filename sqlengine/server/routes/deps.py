"""What the routers share: the app's :class:`~sqlengine.server.registry.Manager` (a dependency) and the
lookups of a pipeline's tables and views by name (404 listing the known ones)."""
from __future__ import annotations

from fastapi import Request

from ...api.pipeline import Pipeline
from ..errors import ApiError
from ..registry import Manager


def get_manager(request: Request) -> Manager:
    """The registry of the app serving ``request`` (``app.state.manager``, set by ``create_app``)."""
    return request.app.state.manager


def _one_of(names, name: str, kind: str) -> str:
    """``name`` (case-insensitive) if it is one of ``names`` (the program's tables or views), else a 404."""
    n = name.lower()
    if n not in names:
        known = sorted(names)
        raise ApiError(404, f"Unknown{kind.capitalize()}", f"unknown {kind} '{name}'. {kind.capitalize()}s: "
                       f"{', '.join(known) or '(none)'}", {f"{kind}s": known})
    return n


def table_of(p: Pipeline, table: str) -> str:
    return _one_of(p.program.tables, table, "table")


def view_of(p: Pipeline, view: str) -> str:
    return _one_of(p.program.views, view, "view")
