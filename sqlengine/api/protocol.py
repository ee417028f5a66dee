"""The methods that the embedded :class:`sqlengine.Pipeline` and the server's client
:class:`sqlengine.api.client.RemotePipeline` share, as a typing ``Protocol``.

Code written against :class:`PipelineLike` runs on either.  ``tests/api/test_api_protocol.py`` checks both classes
against it (method names, parameter names, kinds, defaults and annotations), so that they cannot drift apart.

Only the embedded pipeline has ``from_sql`` (the client's is ``Client.create_pipeline``), ``output_parquet``
(sinks on the server are declared as connectors), ``set_clock`` and ``advance_clock``.

It is not ``runtime_checkable``: ``isinstance`` would read ``runtime_config``, a request to the server for a
``RemotePipeline``.

>>> SHARED_METHODS[:4]
('start', 'pause', 'resume', 'stop')
"""
from __future__ import annotations

from typing import Callable, Iterator, Optional, Protocol

import pandas as pd
import pyarrow as pa

from sqlengine.api.output import OutputHandler

__all__ = ["PipelineLike", "SHARED_METHODS"]


class PipelineLike(Protocol):
    """A pipeline, embedded or on a server: lifecycle, connectors, input, output, waiting and queries."""

    name: str

    @property
    def runtime_config(self):
        """The settings the pipeline runs with (a ``RuntimeConfig``)."""

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None: ...

    def pause(self) -> None: ...

    def resume(self) -> None: ...

    def stop(self, force: bool = False) -> None: ...

    def restart(self) -> None: ...

    def clear_storage(self) -> None: ...

    def storage_status(self) -> str: ...

    def checkpoint(self) -> int: ...

    def status(self) -> dict: ...

    def metrics(self) -> dict: ...

    def delete(self, clear_storage: bool = False) -> None: ...

    def pause_connector(self, relation: str, name: str) -> None: ...

    def resume_connector(self, relation: str, name: str) -> None: ...

    # ------------------------------------------------------------------ input
    def input_pandas(self, table: str, df: pd.DataFrame, delete: bool = False, on_error: str = "reject",
                     dead_letter: Optional[str] = None, force: bool = False) -> None: ...

    def input_json(self, table: str, data, update_format: str = "raw", on_error: str = "reject",
                   dead_letter: Optional[str] = None, force: bool = False) -> None: ...

    def input_csv(self, table: str, data, delete: bool = False, on_error: str = "reject",
                  dead_letter: Optional[str] = None, force: bool = False) -> None: ...

    def execute(self, sql: str) -> int: ...

    # ------------------------------------------------------------------ output
    def foreach_chunk(self, view: str, callback: Callable[[pd.DataFrame, int], None], format: str = "pandas") -> None: ...

    def listen(self, view: str) -> OutputHandler: ...

    # ------------------------------------------------------------------ waiting
    def wait_for_idle(self, timeout_s: Optional[float] = None, idle_interval_s: Optional[float] = None) -> None: ...

    def wait_for_completion(self, timeout_s: Optional[float] = None) -> None: ...

    # ------------------------------------------------------------------ queries
    def query_arrow(self, sql: str) -> pa.Table: ...

    def query_pandas(self, sql: str) -> pd.DataFrame: ...

    def query(self, sql: str) -> Iterator[dict]: ...

    def query_tabular(self, sql: str) -> Iterator[str]: ...

    def query_parquet(self, sql: str, path: str) -> None: ...

    def explain(self, view: str, passes: bool = False) -> str: ...


# the protocol's methods, in the order above (its attributes ``name`` and ``runtime_config`` aside)
SHARED_METHODS = tuple(n for n, v in vars(PipelineLike).items() if callable(v) and not n.startswith("_"))
