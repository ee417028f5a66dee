"""Incremental SQL views on Apache Spark.

>>> from sqlengine import Pipeline  # doctest: +SKIP
"""
from . import arrow_memory  # noqa: F401 - first: Arrow's pool is chosen when pyarrow loads
from .errors import (BindError, ConnectorError, EngineError, InputError, InternalError, ParseError,
                     PermanentConnectorError, PipelineError, UnsupportedError)
from .api.output import OutputHandler
from .api.pipeline import Pipeline
from .api.runtime_config import PipelineBuilder, PipelineStatus, RuntimeConfig
from .udf import udaf, udf
from .zset import WEIGHT

try:
    from importlib.metadata import PackageNotFoundError as _NotFound, version as _version
    __version__ = _version("sqlengine")
except _NotFound:   # not installed (run from a source tree): the version in pyproject.toml
    __version__ = "0.1.0"



def connect(url: str = "http://127.0.0.1:8080", token=None, timeout: float = 60.0):
    """A client of a pipeline server (``sqlengine serve``); ``token`` defaults to ``SQLENGINE_TOKEN``.
    ``connect(url).pipeline(name)`` has the methods of :class:`Pipeline`.  Needs the ``server`` extra."""
    from .api.client import connect as _connect
    return _connect(url, token=token, timeout=timeout)


__all__ = ["Pipeline", "OutputHandler", "WEIGHT", "EngineError", "ParseError", "BindError", "UnsupportedError",
           "InputError", "ConnectorError", "PermanentConnectorError", "PipelineError", "InternalError",
           "connect", "RuntimeConfig", "PipelineBuilder", "PipelineStatus", "udf", "udaf"]
