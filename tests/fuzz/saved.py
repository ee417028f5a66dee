"""Shrunk reproductions saved under ``tests/fuzz/regressions/``: ``<name>.sql`` (the program, one statement a
line) and ``<name>.json`` (its steps, the failure kind and detail seen, the executor, and ``xfail``: the bug's
description while it is open, which ``tests/executor/test_fuzz.py`` turns into a strict xfail; ``fixed``: that description
once the bug is fixed, the regression then a guard)."""
from __future__ import annotations

import json
import os
import re
from typing import List, Tuple

from .program import Op, Program, Table, View

DIRECTORY = os.path.join(os.path.dirname(__file__), "regressions")
_TABLE = re.compile(r"^CREATE TABLE (\w+) \((.*?)\)( WITH \('append_only' = 'true'\))?;$")
_VIEW = re.compile(r"^CREATE (MATERIALIZED )?VIEW (\w+) AS (.*);$")


def parse_sql(text: str) -> Tuple[List[Table], List[View], List[str]]:
    """Tables, views and functions (CREATE MACRO statements) of a program written by :meth:`Program.sql`."""
    tables, views, functions = [], [], []
    for line in text.splitlines():
        if line.startswith("CREATE MACRO "):
            functions.append(line)
        elif m := _TABLE.match(line):
            tables.append(Table(m.group(1), _columns(m.group(2)), bool(m.group(3))))
        elif m := _VIEW.match(line):
            views.append(View(m.group(2), m.group(3), bool(m.group(1))))
    return tables, views, functions


def _columns(text: str) -> List[Tuple[str, str]]:
    """``c0 INT, c1 DECIMAL(10,2), c2 MAP(VARCHAR, INT)`` -> [(name, type)], split at the top-level commas."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(text + ","):
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            name, _, ty = text[start:i].strip().partition(" ")
            out.append((name, ty.strip()))
            start = i + 1
    return out


def save(name: str, program: Program, kind: str, detail: str, executor: str, directory: str = DIRECTORY) -> str:
    os.makedirs(directory, exist_ok=True)
    base = os.path.join(directory, name)
    with open(base + ".sql", "w") as f:
        f.write(program.sql() + "\n")
    meta = {"seed": program.seed, "transactions": program.transactions, "kind": kind, "executor": executor, "detail": detail[:2000],
            "xfail": f"{kind}: {detail[:300]}",
            "steps": json.loads(program.to_json())["steps"]}
    with open(base + ".json", "w") as f:
        json.dump(meta, f, indent=1)
    return base


def load(name: str, directory: str = DIRECTORY) -> Tuple[Program, dict]:
    base = os.path.join(directory, name)
    with open(base + ".sql") as f:
        tables, views, functions = parse_sql(f.read())
    with open(base + ".json") as f:
        meta = json.load(f)
    steps = [[Op(**o) for o in s] for s in meta["steps"]]
    return Program(tables, views, steps, meta.get("seed"), functions, meta.get("transactions", False)), meta


def names(directory: str = DIRECTORY) -> List[str]:
    if not os.path.isdir(directory):
        return []
    return sorted(f[:-5] for f in os.listdir(directory) if f.endswith(".json"))
