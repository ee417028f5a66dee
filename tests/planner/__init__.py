"""The compiler's tests, without Spark: compile errors and types at compile time, rules and their golden plans,
join ordering, event time in the planner, parsed nodes, semantics, the import graph."""
