"""Plan rewrite rules: pure functions ``(plan, ctx) -> plan``, one per module named verb_object, run in the
order of ``RULES`` by the pass manager (:mod:`planner.rules.manager`)."""
from .exprs import conjoin, conjuncts, refs, remap, shift, substitute
from .fold_constants import fold_constants
from .manager import RULES, Context, PassRecord, check_node, check_plan, format_trace, optimize
from .merge_filters import merge_filters
from .merge_projects import merge_projects
from .order_joins import order_joins
from .prune_columns import prune_columns
from .push_down_filters import push_down_filters
from .remove_noop_projects import remove_noop_projects
from .tree import rebuild, with_inputs

__all__ = ["RULES", "Context", "PassRecord", "check_node", "check_plan", "format_trace", "optimize", "rebuild",
           "with_inputs", "fold_constants", "merge_filters", "merge_projects", "order_joins", "prune_columns", "push_down_filters",
           "remove_noop_projects", "conjoin", "conjuncts", "refs", "remap", "shift", "substitute"]
