"""Formats: how rows become bytes and back.

A format writes a view's changes to a file (``write_file``) for the file sink.  Sources decode with
the same classes (see ``decode`` and ``read_file``), converting to the table's column types with the
engine's input converters, so that bad records get the same errors and dead letters as pushed input.
"""
from __future__ import annotations

import os
from typing import Any, Dict

import pyarrow as pa

from .base import Format, opt, register_format


def _write_atomically(path: str, write) -> None:
    """``write(tmp_path)``, fsync, rename to ``path``: readers never see a half-written file."""
    tmp = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.tmp")
    write(tmp)
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, path)


@register_format
class ParquetFormat(Format):
    name = "parquet"
    extension = "parquet"
    OPTIONS: Dict[str, Any] = {}

    def write_file(self, table: pa.Table, path: str) -> None:
        import pyarrow.parquet as pq
        _write_atomically(path, lambda tmp: pq.write_table(table, tmp))


@register_format
class CsvFormat(Format):
    name = "csv"
    extension = "csv"
    OPTIONS = {"delimiter": opt(str, default=",", doc="the field separator, one character"),
               "header": opt(bool, default=True, doc="the first line names the columns")}

    def write_file(self, table: pa.Table, path: str) -> None:
        import pyarrow.csv as pcsv
        opts = pcsv.WriteOptions(include_header=self.config["header"], delimiter=self.config["delimiter"])
        _write_atomically(path, lambda tmp: pcsv.write_csv(table, tmp, write_options=opts))


@register_format
class JsonFormat(Format):
    name = "json"
    extension = "jsonl"
    OPTIONS = {"update_format": opt(str, default="insert_delete", choices=("raw", "insert_delete", "debezium"),
                                    doc="raw rows (inserts), {\"insert\"|\"delete\": row}, or a Debezium envelope")}

    def write_file(self, table: pa.Table, path: str) -> None:
        import duckdb

        def write(tmp: str) -> None:
            con = duckdb.connect(":memory:")
            con.register("t", table)
            con.execute(f"COPY (SELECT * FROM t) TO '{tmp}' (FORMAT json)")
            con.close()
        _write_atomically(path, write)
