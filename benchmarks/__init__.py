"""Benchmarks of the engine, each a module run with ``python -m benchmarks.<name>``.

The engine is imported first, as ``sqlengine run`` does, so that Arrow takes its memory pool from it
(``sqlengine.arrow_memory``) rather than from pandas importing pyarrow before it.
"""
import sqlengine.arrow_memory  # noqa: F401
