"""The README's examples moved with the rest of the docs: tests/api/test_docs.py runs every code block of README.md
and docs/. This module only keeps the helpers that other tests import from it (test_kafka, test_server)."""
from tests.api.test_docs import blocks, python_blocks  # noqa: F401
