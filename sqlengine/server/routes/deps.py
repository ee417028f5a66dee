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


def table_of(p: Pipeline, table: str) -> str:
    t = table.lower()
    if t not in p.program.tables:
        known = sorted(p.program.tables)
        raise ApiError(404, "UnknownTable", f"unknown table '{table}'. Tables: {', '.join(known) or '(none)'}",
                       {"tables": known})
    return t


def view_of(p: Pipeline, view: str) -> str:
    v = view.lower()
    if v not in p.program.views:
        known = sorted(p.program.views)
        raise ApiError(404, "UnknownView", f"unknown view '{view}'. Views: {', '.join(known) or '(none)'}",
                       {"views": known})
    return v
