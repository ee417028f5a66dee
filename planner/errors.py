"""One small error hierarchy, shared by the planner and the engine.

Every error that points into user SQL carries the SQL text and a character
offset; ``str(err)`` then shows ``line L, column C`` and the offending line
with a caret under the position.

>>> err = UnsupportedError("window functions are not supported", sql="SELECT\\n  RANK() OVER ()", offset=9)
>>> print(err)
window functions are not supported (line 2, column 3)
    RANK() OVER ()
    ^
"""
from __future__ import annotations

from typing import Optional


class EngineError(Exception):
    """Base class of every error the engine raises on purpose."""

    def __init__(self, message: str, *, sql: Optional[str] = None, offset: Optional[int] = None):
        self.message = message
        self.sql = sql
        self.offset = offset
        self.line: Optional[int] = None
        self.column: Optional[int] = None
        if sql is not None and offset is not None:
            offset = max(0, min(offset, len(sql)))
            self.line = sql.count("\n", 0, offset) + 1
            self.column = offset - (sql.rfind("\n", 0, offset) + 1) + 1
        super().__init__(self._render())

    def _render(self) -> str:
        if self.line is None:
            return self.message
        return f"{self.message} (line {self.line}, column {self.column})\n{self.excerpt()}"

    def excerpt(self, indent: str = "  ") -> str:
        """The offending line of the SQL and a caret under the position ('' without a position)."""
        if self.line is None:
            return ""
        assert self.sql is not None and self.column is not None
        text = self.sql.split("\n")[self.line - 1]
        return f"{indent}{text}\n{indent}{' ' * (self.column - 1)}^"


class ParseError(EngineError):
    """The SQL text does not parse."""


class BindError(EngineError):
    """Unknown table or column, ambiguous name, or a type mismatch."""


class UnsupportedError(EngineError):
    """Valid SQL that the engine cannot maintain incrementally (yet)."""


class InputError(EngineError):
    """Rejected input rows: wrong columns, wrong types, NULL in NOT NULL, bad JSON."""


class ConnectorError(EngineError):
    """A source or sink failed.  Raised while running, it is *transient*: the connector retries with backoff
    (a broker or database that is down, the network, a full disk)."""


class PermanentConnectorError(ConnectorError):
    """A source or sink failed in a way that retrying cannot fix: a missing table or topic, a type mismatch
    against the external table, bad credentials, a topic owned by another pipeline.  The connector stops
    in state ``failed`` with this reason, and ``Pipeline.wait_for_completion()`` raises it."""


class PipelineError(EngineError):
    """Lifecycle misuse, or a failure inside the running pipeline (for example a callback)."""


class InternalError(EngineError):
    """A bug in the engine: an invariant did not hold."""
