"""Scratch files: a Spark step's driver-side changes, handed to Spark as parquet.

A change the driver holds as Arrow (an input batch, a cut collected from an
earlier job, an aggregate's partial sums) reaches Spark either through
``createDataFrame`` or as a file.  ``createDataFrame`` ships the Arrow batches
to the JVM, which converts them to rows each time a job reads them: about a
second per million rows on two cores, every time.  A parquet file is written in
a tenth of that and read by Spark's vectorized reader, so big changes go as
files (see ``SparkState.arrow_df``).

Scratch files are not state: nothing lists them in a manifest, they are not
fsynced, and a step's are removed when the next step starts (or the engine
does).  They live under the storage directory, so that every executor of a
cluster can read them, as it reads the state runs.
"""
from __future__ import annotations

import itertools
import os
import shutil

import pyarrow as pa
import pyarrow.parquet as pq


class Scratch:
    """A directory of one step's scratch files (``root``/<n>.parquet)."""

    def __init__(self, root: str):
        self.root = root
        self._names = itertools.count()
        self.clear()

    def write(self, table: pa.Table) -> str:
        """``table`` as a new parquet file; its path."""
        os.makedirs(self.root, exist_ok=True)
        path = os.path.join(self.root, f"{next(self._names)}.parquet")
        pq.write_table(table, path, compression="zstd")
        return path

    def clear(self) -> None:
        """Remove every scratch file (the DataFrames that read them must not run again)."""
        shutil.rmtree(self.root, ignore_errors=True)
