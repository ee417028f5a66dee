"""Incremental SQL views on Apache Spark.

>>> from sqlengine import Pipeline  # doctest: +SKIP
"""
from .errors import (BindError, ConnectorError, EngineError, InputError, InternalError, ParseError,
                     PipelineError, UnsupportedError)
from .output import OutputHandler
from .pipeline import Pipeline
from .zset import WEIGHT

__all__ = ["Pipeline", "OutputHandler", "WEIGHT", "EngineError", "ParseError", "BindError", "UnsupportedError",
           "InputError", "ConnectorError", "PipelineError", "InternalError"]
