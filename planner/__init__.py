"""SQL program -> logical plan -> incremental circuit.  Pure: imports sqlglot only."""
from .errors import (BindError, ConnectorError, EngineError, InputError, InternalError, ParseError,
                     PipelineError, UnsupportedError)
from .program import Program, compile_program

__all__ = ["compile_program", "Program", "EngineError", "ParseError", "BindError", "UnsupportedError",
           "InputError", "ConnectorError", "PipelineError", "InternalError"]
