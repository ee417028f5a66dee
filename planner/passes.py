"""Plan rewrite passes: kept for its importers; the rules and the pass manager live in :mod:`planner.rules`."""
from __future__ import annotations

from .rules import RULES, Context, check_plan, merge_filters, optimize, rebuild
from .rules.tree import with_inputs as _with_inputs

PASSES = RULES

__all__ = ["PASSES", "RULES", "Context", "check_plan", "merge_filters", "optimize", "rebuild"]
