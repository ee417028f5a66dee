"""A differential SQL fuzzer in the manner of SQLancer and SQLsmith.

- :mod:`tests.fuzz.generator`: random programs (typed tables, views, steps of changes), from a seed;
- :mod:`tests.fuzz.runner`: runs one program on the engine and checks every view against DuckDB after every step;
- :mod:`tests.fuzz.shrink`: reduces a failing program while its failure persists;
- :mod:`tests.fuzz.regressions`: saved reproductions, replayed by ``tests/executor/test_fuzz.py``.

``python -m benchmarks.fuzz --seeds 0:20000 [--spark]`` runs it for long.
"""
