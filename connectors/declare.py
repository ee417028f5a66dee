"""Connectors declared in SQL: ``WITH ('connectors' = '<JSON list>')`` on tables (sources) and views (sinks).

Every problem (JSON syntax, an unknown transport, format or option, a wrong value) raises
``ConnectorError`` when the program is compiled, with the line and column of the offending key in
the SQL and the valid choices.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Dict, List

from planner.errors import ConnectorError

from .base import FORMATS, SINKS, SOURCES, Connector, Context, Located, check_options, opt

TOP_LEVEL = {
    "name": opt(str, doc="the connector's name, unique per table or view (default: <transport>_<n>)"),
    "transport": opt(dict, required=True, doc='{"name": ..., "config": {...}}'),
    "format": opt(dict, doc='{"name": ..., "config": {...}}'),
    "paused": opt(bool, default=False, doc="start the connector paused (resume_connector starts it)"),
    "on_error": opt(str, default="dead_letter", choices=("dead_letter", "reject"),
                    doc="a record that does not convert: to the dead letter, or stop the connector"),
    "dead_letter": opt(str, doc="dead-letter file (default <storage_dir>/dead_letter/<table>.<name>.jsonl)"),
}


@dataclass
class Declared:
    relation: str          # table or view
    kind: str              # "source" or "sink"
    name: str
    connector: Connector
    options: Dict[str, Any]   # the top-level options (paused, on_error, dead_letter)

    @property
    def key(self) -> str:
        return f"{self.relation}.{self.name}"


def _load(text: str, where: Located) -> List[dict]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        at = where.literal_at
        offset = None if at is None else at + 1 + e.pos + text.count("'", 0, e.pos)
        raise ConnectorError(f"'connectors' is not valid JSON: {e.msg}", sql=where.sql, offset=offset) from None
    if isinstance(value, dict):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise where.error("'connectors' must be a JSON list of connector objects")
    return value


def declare(relation: str, kind: str, option, sql: str, pipeline: str, storage_dir: str, columns,
            key=(), table=None, materialized: bool = False) -> List[Declared]:
    """The connectors declared on one table (``kind="source"``) or view (``"sink"``)."""
    if option is None:
        return []
    text, at = option
    where = Located(sql, at, text)
    registry = SOURCES if kind == "source" else SINKS
    other = SINKS if kind == "source" else SOURCES
    out: List[Declared] = []
    names = set()
    for i, raw in enumerate(_load(text, where)):
        top = check_options("connector", TOP_LEVEL, raw, where)
        transport = top["transport"]
        tname = transport.get("name")
        if not isinstance(tname, str):
            raise where.error('connector: "transport" needs a "name"', "transport")
        if tname not in registry:
            noun = "tables take sources" if kind == "source" else "views take sinks"
            hint = f"{tname} is a {'sink' if kind == 'source' else 'source'}; " if tname in other else \
                f"unknown transport \"{tname}\"; "
            raise where.error(f"{hint}{noun}: {', '.join(sorted(registry))}", tname if tname in text else "transport")
        cls = registry[tname]
        extra = set(transport) - {"name", "config"}
        if extra:
            raise where.error(f"transport {tname}: unknown key \"{sorted(extra)[0]}\" (use \"name\" and \"config\")",
                              sorted(extra)[0])
        name = top["name"] or f"{tname}_{i}"
        if name in names:
            raise where.error(f"two connectors of {relation} are named {name!r}", name)
        names.add(name)
        cls.check_installed(where)
        config = check_options(f"transport {tname}", cls.OPTIONS, transport.get("config", {}), where, cls.passthrough)
        ctx = Context(pipeline=pipeline, storage_dir=storage_dir, relation=relation, connector=name,
                      columns=list(columns), key=tuple(key), table=table, materialized=materialized,
                      where=where)
        fmt = None
        fdecl = top["format"]
        if fdecl is not None and not cls.FORMATS:
            raise where.error(f"transport {tname} takes no format", "format")
        if cls.FORMATS:
            fdecl = fdecl or {"name": cls.FORMATS[0]}
            fname = fdecl.get("name")
            if fname not in cls.FORMATS:
                raise where.error(f"transport {tname}: format {fname!r} is not supported; formats: "
                                  f"{', '.join(cls.FORMATS)}", fname if isinstance(fname, str) else "format")
            fcls = FORMATS[fname]
            fconf = check_options(f"format {fname}", fcls.OPTIONS, fdecl.get("config", {}), where)
            fmt = fcls(fconf, ctx)
        conn = cls(config, fmt, ctx)
        conn.validate()
        out.append(Declared(relation, kind, name, conn, top))
    return out


def declare_program(program, pipeline: str, storage_dir: str) -> List[Declared]:
    """Every connector of a compiled program, sources first."""
    out: List[Declared] = []
    for t in program.tables.values():
        out += declare(t.name, "source", t.connectors, program.sql, pipeline, storage_dir,
                       [(f.name, f.type) for f in t.fields], t.primary_key, t)
    for v, d in program.views.items():
        cols = [(n, f.type) for n, f in zip(program.circuit.outputs[v].names, d.plan.fields)]   # the planner's types
        out += declare(v, "sink", d.connectors, program.sql, pipeline, storage_dir, cols, materialized=d.materialized)
    return out
