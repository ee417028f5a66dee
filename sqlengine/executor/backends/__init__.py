"""The two backends the operators run on, behind one small protocol (:class:`Backend`).

* :mod:`.duckdb` (:class:`~.duckdb.DuckDBBackend`): DuckDB over Arrow tables on the driver, for small steps
  and for the operators of Spark steps whose changes are on the driver; it isolates rows whose expressions
  fail (they are recorded as row errors, the step goes on);
* :mod:`.spark` (:class:`~.spark.SparkBackend`): lazy Spark plans over DataFrames, the rules transpiled by
  sqlglot; a row that fails fails the Spark job, and the step is run again on the driver.

An operator kind's module (:mod:`sqlengine.executor.ops`) runs its delta rule on either through the same two
calls; reading the state an op needs by key is the executors' (``LocalExecutor.read``, ``SparkState.read_state``).
"""
from __future__ import annotations

from typing import Any, List, Optional, Protocol


class Backend(Protocol):
    def rule(self, sql: str, **relations: Any) -> Any:
        """Run one term of a rule (:mod:`sqlengine.executor.delta_rules`, SQL in the planner's dialect) over
        the named relations: the op's input changes and the state it reads."""

    def lower(self, op, ins: List[Optional[Any]], reads: List[Any], initial: bool = False) -> Any:
        """The change of ``op`` from its inputs' changes ``ins`` and the state it reads, ``reads``: its kind's
        rule (``ops.of(op.kind).local`` or ``.spark``) run here."""
