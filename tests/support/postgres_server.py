"""A throwaway PostgreSQL 15 server for the tests and benchmarks: Debian's packages, ``initdb`` in a
temporary directory, a free local port, ``wal_level=logical``, stopped by PID.

    with PostgresServer() as pg:       # or the session fixture ``postgres`` in tests/connectors/test_postgres.py
        pg.uri                         # "postgresql://postgres@127.0.0.1:PORT/postgres"
        pg.execute("CREATE TABLE t (id int primary key)")

``initdb`` refuses to run as root, so as root the server runs as the ``postgres`` user the package
creates.  ``start()`` raises ``PostgresUnavailable`` (the tests skip with its reason) when the binaries
are missing or the server does not come up.
"""
from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
import tempfile
import time
from typing import Any, List, Optional, Sequence

from tests.support.net import free_port


class PostgresUnavailable(RuntimeError):
    pass


def bindir() -> Optional[str]:
    """The directory of ``initdb`` and ``pg_ctl`` (Debian keeps them out of PATH), or None."""
    for d in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if os.path.exists(os.path.join(d, "pg_ctl")):
            return d
    found = shutil.which("pg_ctl")
    return os.path.dirname(found) if found else None


class PostgresServer:
    def __init__(self, port: Optional[int] = None):
        self.port = port or free_port()
        self.dir: Optional[str] = None
        self.pid: Optional[int] = None
        self.bin = bindir()

    @property
    def uri(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _as_owner(self, argv: List[str]) -> List[str]:
        return (["runuser", "-u", "postgres", "--"] + argv) if os.geteuid() == 0 else argv

    def start(self, timeout: float = 30.0) -> "PostgresServer":
        if self.bin is None:
            raise PostgresUnavailable("PostgreSQL is not installed (apt-get install postgresql)")
        try:
            import psycopg  # noqa: F401
        except ImportError:
            raise PostgresUnavailable("psycopg is not installed (pip install 'sqlengine[postgres]')") from None
        self.dir = tempfile.mkdtemp(prefix=f"pg-{self.port}-")
        if os.geteuid() == 0:
            shutil.chown(self.dir, "postgres")
        data = os.path.join(self.dir, "data")
        r = subprocess.run(self._as_owner([os.path.join(self.bin, "initdb"), "-D", data, "-U", "postgres",
                                           "-A", "trust", "--no-sync"]), capture_output=True, text=True)
        if r.returncode:
            raise PostgresUnavailable(f"initdb failed: {r.stderr[-500:]}")
        self._pg_start(timeout)
        return self

    def _pg_start(self, timeout: float = 30.0) -> None:
        data, log = os.path.join(self.dir, "data"), os.path.join(self.dir, "log")
        opts = (f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c wal_level=logical "
                "-c max_replication_slots=20 -c max_wal_senders=20 -c fsync=off")
        r = subprocess.run(self._as_owner([os.path.join(self.bin, "pg_ctl"), "-D", data, "-l", log, "-w",
                                           "-t", str(int(timeout)), "-o", opts, "start"]),
                           capture_output=True, text=True)
        if r.returncode:
            tail = open(log).read()[-800:] if os.path.exists(log) else r.stderr
            raise PostgresUnavailable(f"PostgreSQL did not start: {tail}")
        with open(os.path.join(data, "postmaster.pid")) as f:
            self.pid = int(f.readline())

    def shutdown(self, mode: str = "fast") -> None:
        """Stop the server and keep its data (``start_again`` brings it back): an outage.  ``mode`` is
        pg_ctl's: ``fast`` (clients disconnected, a clean shutdown) or ``immediate`` (as after a crash)."""
        subprocess.run(self._as_owner([os.path.join(self.bin, "pg_ctl"), "-D", os.path.join(self.dir, "data"),
                                       "-m", mode, "-w", "stop"]), capture_output=True, text=True, check=True)
        self.pid = None

    def start_again(self, timeout: float = 30.0) -> None:
        self._pg_start(timeout)

    def stop(self) -> None:
        """Stop at once (SIGQUIT to the postmaster: an immediate shutdown) and remove the data."""
        if self.pid is not None:
            try:
                os.kill(self.pid, signal.SIGQUIT)
                for _ in range(100):
                    os.kill(self.pid, 0)
                    time.sleep(0.05)
            except ProcessLookupError:
                pass
            self.pid = None
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def __enter__(self) -> "PostgresServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # ------------------------------------------------------------ helpers for the tests
    def connect(self, dbname: str = "postgres", **kw):
        import psycopg
        return psycopg.connect(f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}", autocommit=True, **kw)

    def execute(self, sql: str, params: Sequence[Any] = (), dbname: str = "postgres") -> None:
        with self.connect(dbname) as c:
            c.execute(sql, params)

    def fetch(self, sql: str, params: Sequence[Any] = (), dbname: str = "postgres") -> list:
        with self.connect(dbname) as c:
            return c.execute(sql, params).fetchall()

    def create_database(self, name: str) -> str:
        self.execute(f'CREATE DATABASE "{name}"')
        return f"postgresql://postgres@127.0.0.1:{self.port}/{name}"
