"""The engine's error hierarchy (defined in the pure planner, re-exported here)."""
from planner.errors import (BindError, ConnectorError, EngineError, InputError, InternalError, ParseError,
                            PipelineError, UnsupportedError)

__all__ = ["EngineError", "ParseError", "BindError", "UnsupportedError", "InputError", "ConnectorError",
           "PipelineError", "InternalError"]
