"""The engine's private in-memory DuckDB connections (the driver executor, the key hasher, the query snapshot,
the type deriver): UTC session time, and an allocator that gives freed memory back to the operating system
(background purging, and a flush after any task that peaked above 16 MiB; DuckDB's default keeps up to
128 MiB cached per database after a bulk step, outside the state cache's budget)."""
import threading

import duckdb

from planner.nested_types import MARK_MACRO

from sqlengine import nested


def connect() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect(":memory:")
    con.execute("SET TimeZone = 'UTC'")
    con.execute("SET allocator_background_threads = true")
    con.execute("SET allocator_flush_threshold = '16MiB'")
    con.execute(MARK_MACRO)   # (planner.nested_types.mark_duckdb)
    nested.register_duckdb(con)   # __canonical_json, which canonical JSON values call
    return con


_SHARED: dict = {}
_SHARED_LOCK = threading.Lock()


def cursor(sandboxed: bool = False) -> duckdb.DuckDBPyConnection:
    """A connection of its own (the tables it registers and its temporary objects are its own) to one in-memory
    database per process, for short queries on a step's path: opening a database costs about 10 ms, a cursor
    on an open one microseconds.  Session settings are the cursor's own, so it gets UTC again.  ``sandboxed``:
    a database that reads no file (``enable_external_access`` off: statements a user wrote run there).  Close
    it after use."""
    with _SHARED_LOCK:
        db = _SHARED.get(sandboxed)
        if db is None:
            db = _SHARED[sandboxed] = connect()
            if sandboxed:
                db.execute("SET enable_external_access = false")
        con = db.cursor()
    con.execute("SET TimeZone = 'UTC'")
    return con
