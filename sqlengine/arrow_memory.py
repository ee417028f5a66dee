"""Arrow's memory pool for the engine's process: jemalloc where the pyarrow build has it.

On the machines measured here (a VM whose first touch of a page is slow) pyarrow's default pool, mimalloc, took
about 1.5-2× as long for a 10M-row step as jemalloc, most of it faulting in fresh pages, and Nexmark's
stateless queries ran up to 2× faster with jemalloc; small steps are the same with both.

Arrow's C++ code (Acero, casts, IPC and parquet) takes its pool from ``ARROW_DEFAULT_MEMORY_POOL``, read when
pyarrow is loaded.  Importing ``sqlengine`` before ``pyarrow`` (as ``sqlengine run`` and ``sqlengine serve``
do) sets it to jemalloc unless it is set; a process that loaded pyarrow first keeps its pool for that code, and
:func:`use_jemalloc` still moves pyarrow's own allocations to jemalloc.  A value the user set is left alone.
"""
from __future__ import annotations

import logging
import os
import sys

ENV = "ARROW_DEFAULT_MEMORY_POOL"
USER_CHOSE = ENV in os.environ
if not USER_CHOSE and sys.platform.startswith("linux") and "pyarrow" not in sys.modules:   # (Linux wheels have it)
    os.environ[ENV] = "jemalloc"

import pyarrow as pa  # noqa: E402 - after the environment is set

log = logging.getLogger(__name__)


def use_jemalloc() -> None:
    """Make jemalloc pyarrow's default pool, unless the user chose one (idempotent)."""
    if USER_CHOSE or pa.default_memory_pool().backend_name == "jemalloc":
        return
    try:
        pa.set_memory_pool(pa.jemalloc_memory_pool())
    except NotImplementedError:   # a build without jemalloc: keep the default
        log.debug("pyarrow has no jemalloc pool; keeping %s", pa.default_memory_pool().backend_name)
