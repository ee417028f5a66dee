"""One operator, one place: every op kind of the circuit has a module under ``sqlengine/executor/ops`` that
says everything the executors need about it, found through one registry (``ops.KINDS``)."""
from __future__ import annotations

import pytest

from planner import compile_program
from planner.errors import UnsupportedError
from sqlengine.executor import ops
from sqlengine.executor.backends.duckdb import DuckDBBackend
from sqlengine.executor.op_schemas import derive

# what each kind's module holds (see the package's docstring)
INTERFACE = ("SKIPS_UNCHANGED", "probes", "reads_state", "change_schema", "state_schema", "merge_rule", "local",
             "spark")

SQL = """
CREATE TABLE t (k INT, v INT, s VARCHAR);
CREATE TABLE u (k INT, w VARCHAR);
CREATE VIEW j AS SELECT t.k, t.v, u.w FROM t JOIN u ON t.k = u.k WHERE t.v > 0;
CREATE VIEW a AS SELECT k, COUNT(*) AS n, SUM(v) AS s, AVG(v) AS m FROM t GROUP BY k;
CREATE VIEW mm AS SELECT k, MIN(v) AS lo FROM t GROUP BY k;
CREATE VIEW d AS SELECT DISTINCT k FROM t;
CREATE VIEW x AS SELECT k FROM t EXCEPT SELECT k FROM u;
CREATE VIEW un AS SELECT k FROM t UNION ALL SELECT k FROM u;
CREATE VIEW w AS SELECT k, v, ROW_NUMBER() OVER (PARTITION BY k ORDER BY v) AS r FROM t;
CREATE VIEW c AS SELECT 1 AS one;
CREATE VIEW rec AS WITH RECURSIVE r (a, b) AS (SELECT k, v FROM t UNION SELECT r.a, t.v FROM r JOIN t ON r.b = t.k) SELECT * FROM r;
"""


@pytest.mark.parametrize("kind", sorted(ops.KINDS))
def test_every_kind_has_a_module_with_the_whole_interface(kind):
    m = ops.of(kind)
    assert (m.__doc__ or "").strip(), f"{m.__name__} states no delta rule"
    missing = [n for n in INTERFACE if not hasattr(m, n)]
    assert not missing, f"{m.__name__} lacks {missing}"


def test_the_circuit_uses_only_registered_kinds_and_every_read_has_a_probe():
    p = compile_program(SQL)
    kinds = {op.kind for op in p.circuit.ops}
    assert kinds <= set(ops.KINDS) and len(kinds) == len(ops.KINDS), kinds ^ set(ops.KINDS)
    for op in p.circuit.ops:
        probes = ops.probes(op)
        assert not op.reads or len(probes) == len(op.reads) or ops.of(op.kind) is ops.of("integrate"), op
    schemas, states = derive(p.circuit)
    assert set(schemas) == {op.id for op in p.circuit.ops}
    # every integral's runs (a derived one's as read), and every state an op owns (accumulating aggregates)
    assert set(states) == {op.id for op in p.circuit.ops if op.owns_state or op.kind == "integrate"}


def test_an_unknown_kind_names_the_registered_ones():
    class Fake:
        kind, id = "teleport", 0
    with pytest.raises(UnsupportedError, match="'teleport' has no module.*join"):
        DuckDBBackend().lower(Fake(), [], [])
