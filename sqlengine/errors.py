"""The engine's error hierarchy (defined in the pure planner, re-exported here), plus the storage's own."""
from planner.errors import (BindError, ConnectorError, EngineError, InputError, InternalError, ParseError,
                            PermanentConnectorError, PipelineError, UnsupportedError)


class StorageLockedError(PipelineError):
    """Another process has the storage directory open (its PID, host and start time are in the message)."""


class StorageFencedError(PipelineError):
    """This process no longer owns the storage (another one locked it since, with a newer epoch): it must not
    commit steps nor write sinks any more."""


__all__ = ["EngineError", "ParseError", "BindError", "UnsupportedError", "InputError", "ConnectorError",
           "PermanentConnectorError", "PipelineError", "InternalError", "StorageLockedError", "StorageFencedError"]
