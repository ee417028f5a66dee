"""The REST API, one ``APIRouter`` per resource (Feldera's layout, ``/v0/pipelines/...``):

* :mod:`.pipelines`: create, replace, list, delete; lifecycle (start, pause, resume, stop, checkpoint, clear
  storage); stats, waiting, explain and connector actions;
* :mod:`.ingress`: rows pushed into tables, and ``execute`` (INSERT / DELETE statements);
* :mod:`.egress`: streams of a view's changes;
* :mod:`.query`: ad-hoc SELECTs over the last committed step;
* :mod:`.metrics`: ``/healthz`` and the Prometheus metrics.

The web console is not a router: it is served by middleware ahead of the token check
(:mod:`sqlengine.server.console`).  Every route finds the pipelines through :func:`.deps.get_manager`.
"""
from __future__ import annotations

from . import egress, ingress, metrics, pipelines, query

# in the order they are included (none of their paths overlap)
ROUTERS = (metrics.router, pipelines.router, ingress.router, egress.router, query.router)

__all__ = ["ROUTERS"]
