"""The import graph: no cycles, one direction between packages, no private names across packages.

Read from the source with ``ast`` (nothing is imported), counting every ``import`` and ``from ... import``
statement wherever it is: at module level, inside functions and methods, under ``if``/``try``.  An import
inside a function still makes the importing module depend on the imported one; hiding it there only
postpones the cycle to run time.

Granularity (the nodes of the graphs checked):

* ``planner``: each module is a node, and no module of ``planner/`` (``planner/rules/`` included) may be in
  a cycle.  The binder's mixins share their context (scopes, relations, AST helpers) through
  ``planner.scope``, not through ``planner.bind``.
* Between packages, a node is a package as its code is layered: ``planner`` (pure: needs only sqlglot),
  ``connectors`` (sources, sinks and formats; it may use sqlengine's ingest and types API), and within
  ``sqlengine`` each subpackage (``sqlengine.api``, ``sqlengine.executor``, ``sqlengine.ingest``,
  ``sqlengine.state``, ``sqlengine.server``) and each top-level module (``sqlengine.errors``,
  ``sqlengine.zset``, ``sqlengine.types``, ``sqlengine.controller``, ``sqlengine.cli``, ...), with
  ``sqlengine`` itself (its ``__init__``, the public facade that imports ``sqlengine.api``) a node of its
  own.  A finer split (module by module) would flag the intended mutual help inside a subpackage; a
  coarser one (``sqlengine`` as one node) could not tell the facade and the CLI, which run connectors, from
  the leaves (errors, zset, types, ingest) that connectors build on.  Importing ``sqlengine.errors`` is an
  edge to ``sqlengine.errors``, not to the facade (whose ``__init__`` Python runs first, but which it does
  not depend on).
* sqlengine reaches connectors at one place only, ``sqlengine.declared`` (through the registry of
  ``connectors.declare``), and connectors import from sqlengine only its lower layers (``CONNECTOR_API``:
  ingest, types, errors, zset, state, executor), never the layers that run them.  With these nodes the
  former sqlengine <-> connectors cycle is a chain that does not lead back:
  ``sqlengine.api -> sqlengine.declared -> connectors -> sqlengine.ingest``.

Private names: no module may import a name with a leading underscore (dunders aside) from a module of
another package, with ``from m import _x`` or as ``m._x`` on an imported module.  Here a package is
``planner``, ``connectors``, ``sqlengine`` (its top-level modules) or one subpackage ``sqlengine.<sub>``:
``planner.rules`` is part of ``planner``.

``ALLOWED`` lists the known violations in files this change could not edit, each with the file and the
reason; it should become empty.
"""
from __future__ import annotations

import ast
import pathlib
from typing import Dict, Iterator, List, Set, Tuple

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGES = ("planner", "sqlengine", "connectors")
CONNECTOR_GATE = "sqlengine.declared"   # the one module of sqlengine that imports connectors
# What connectors may import from sqlengine: the converters (ingest) and type map (types), nested values'
# canonical form (nested), errors, Z-set helpers, atomic file writes (state) and the process's SparkSession
# (executor.session, for Spark readers).
CONNECTOR_API = {"sqlengine.ingest", "sqlengine.types", "sqlengine.nested", "sqlengine.errors", "sqlengine.zset",
                 "sqlengine.state", "sqlengine.executor"}

# (importing module, imported module or module.name): known violations, to be fixed and removed from here.
ALLOWED: Set[Tuple[str, str]] = set()


def modules() -> Dict[str, pathlib.Path]:
    """Every module of the three packages: dotted name -> file."""
    out = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


MODULES = modules()


def is_package(name: str) -> bool:
    return MODULES[name].name == "__init__.py"


def imports(name: str) -> Iterator[Tuple[str, str, ast.AST]]:
    """(imported module, imported name or "", node) for every import statement of module ``name``."""
    tree = ast.parse(MODULES[name].read_text(), str(MODULES[name]))
    here = name if is_package(name) else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield a.name, "", node
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = here.split(".")
                parent = parent[:len(parent) - (node.level - 1)]
                base = ".".join(parent + ([base] if base else []))
            for a in node.names:
                yield base, a.name, node


def internal(target: str) -> str:
    """The module of ours that ``target`` names (the longest known prefix), or ""."""
    parts = target.split(".")
    while parts:
        if ".".join(parts) in MODULES:
            return ".".join(parts)
        parts.pop()
    return ""


def edges() -> Iterator[Tuple[str, str, str]]:
    """(importer, imported module, what: "module" or "module.name") over all our modules."""
    for m in MODULES:
        for base, name, _ in imports(m):
            sub = f"{base}.{name}" if name else base
            target = internal(sub) if name and sub in MODULES else internal(base)
            if target and target != m:
                yield m, target, sub


def package_node(m: str) -> str:
    """The node of module ``m`` in the graph between packages (see the module docstring)."""
    parts = m.split(".")
    if parts[0] != "sqlengine":
        return parts[0]
    return ".".join(parts[:2])


def privacy_package(m: str) -> str:
    """The package that owns module ``m``'s private names (see the module docstring)."""
    parts = m.split(".")
    if parts[0] != "sqlengine" or len(parts) == 1:
        return parts[0]
    sub = ".".join(parts[:2])
    return sub if is_package(sub) else "sqlengine"


def cycles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """The strongly connected components of more than one node (Tarjan)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on: Set[str] = set()
    out: List[List[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def explain(comps: List[List[str]], pairs: List[Tuple[str, str, str]], node) -> str:
    lines = []
    for comp in comps:
        lines.append(" <-> ".join(comp))
        lines += sorted({f"    {a} imports {what}" for a, b, what in pairs if node(a) in comp and node(b) in comp})
    return "\n".join(lines)


def test_no_cycle_within_planner():
    pairs = [(a, b, w) for a, b, w in edges() if a.startswith("planner") and b.startswith("planner")
             and (a, w) not in ALLOWED]
    graph: Dict[str, Set[str]] = {}
    for a, b, _ in pairs:
        graph.setdefault(a, set()).add(b)
    comps = cycles(graph)
    assert not comps, "import cycles in planner/:\n" + explain(comps, pairs, lambda m: m)


def test_no_cycle_between_packages():
    pairs = [(a, b, w) for a, b, w in edges() if package_node(a) != package_node(b) and (a, w) not in ALLOWED]
    graph: Dict[str, Set[str]] = {}
    for a, b, _ in pairs:
        graph.setdefault(package_node(a), set()).add(package_node(b))
    comps = cycles(graph)
    assert not comps, "import cycles between packages:\n" + explain(comps, pairs, package_node)


def test_planner_imports_only_planner():
    bad = [f"{a} imports {w}" for a, b, w in edges() if a.startswith("planner") and not b.startswith("planner")]
    assert not bad, bad


def test_sqlengine_reaches_connectors_at_one_place():
    bad = [f"{a} imports {w}" for a, b, w in edges()
           if b.startswith("connectors") and not a.startswith("connectors") and a != CONNECTOR_GATE
           and (a, w) not in ALLOWED]
    assert not bad, f"only {CONNECTOR_GATE} may import connectors:\n" + "\n".join(bad)


def test_connectors_use_only_the_engines_lower_layers():
    """Connectors build on the engine's ingest and types API and its leaves, never on the layers that run
    them (``sqlengine`` itself, ``api``, ``controller``, ``server``, ``cli``, ``declared``)."""
    bad = sorted({f"{a} imports {w}" for a, b, w in edges()
                  if a.startswith("connectors") and b.startswith("sqlengine") and package_node(b) not in CONNECTOR_API})
    assert not bad, "connectors may use only " + ", ".join(sorted(CONNECTOR_API)) + ":\n" + "\n".join(bad)


def private_uses() -> Iterator[Tuple[str, str]]:
    """(importer, "module._name") for every private name of another package that a module uses."""
    for m in MODULES:
        tree = ast.parse(MODULES[m].read_text(), str(MODULES[m]))
        aliases: Dict[str, str] = {}   # local name -> our module it is bound to
        for base, name, node in imports(m):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if internal(a.name) == a.name:
                        if a.asname:
                            aliases[a.asname] = a.name
                        else:   # ``import x.y`` binds x; x.y._z is found through the attribute chain
                            aliases[a.name.split(".")[0]] = a.name.split(".")[0]
                continue
            owner = internal(base)
            if not owner:
                continue
            sub = f"{base}.{name}"
            if sub in MODULES:
                alias = next((a.asname for a in node.names if a.name == name and a.asname), None)
                aliases[alias or name] = sub
            if is_private(name) and privacy_package(internal(sub)) != privacy_package(m):
                yield m, sub
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and is_private(node.attr):
                chain = dotted(node.value)
                if chain and chain.split(".")[0] in aliases:
                    target = aliases[chain.split(".")[0]] + chain[len(chain.split(".")[0]):]
                    owner = internal(target)
                    if owner and owner == target and privacy_package(owner) != privacy_package(m):
                        yield m, f"{target}.{node.attr}"


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def dotted(node: ast.AST) -> str:
    """``a.b.c`` for a chain of attributes on a name, else ""."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return ""
    return ".".join([node.id] + parts[::-1])


def test_no_private_names_across_packages():
    bad = sorted({f"{a} uses {w}" for a, w in private_uses() if (a, w) not in ALLOWED})
    assert not bad, "private names used from another package:\n" + "\n".join(bad)


def test_the_checks_see_function_level_imports():
    """The graph holds imports inside functions (the kind that hid cycles), and allow-listed pairs exist."""
    found = set(edges())
    # ``program_errors`` imports it inside the function
    assert ("sqlengine.cli", "sqlengine.declared", "sqlengine.declared.declare_program") in found
    real = found | {(a, None, w) for a, w in private_uses()}
    stale = [p for p in ALLOWED if not any((a, w) == p for a, _, w in real)]
    assert not stale, f"ALLOWED lists violations that are gone: {stale}"
