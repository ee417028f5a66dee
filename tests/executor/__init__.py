"""Running views: differential tests against DuckDB after every step, steps, operators, placement, state, merges,
row errors, the Spark path, event time at run time, TPC-H, Nexmark, the fuzzer's seeds, sqllogictest."""
