"""The README's examples moved with the rest of the docs: tests/test_docs.py runs every code block of README.md
and docs/. This module only keeps the helpers that other tests import from it (test_kafka, test_server)."""
from tests.test_docs import blocks, python_blocks  # noqa: F401
