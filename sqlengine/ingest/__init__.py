"""Getting rows into a pipeline: from an input call or a connector into the durable input log, and out to sinks.

``inputs`` validates and converts input (pandas, JSON, CSV, Python values) to
Arrow chunks under an error policy; ``batches`` writes one input call's chunks
into the log as one atomic batch, with dead-letter files for bad rows;
``sources`` runs the source connectors (one thread each, positions committed
with steps) and ``sinks`` the sink connectors (the outbox of committed view
changes waiting to be delivered).

The converters of ``inputs``, re-exported here, are this package's public API for connectors: a format
turns its records into chunks with them, so bad records get the same checks (types, NOT NULL, primary
keys) and dead letters as pushed input.
"""
from .inputs import (Chunk, Errors, arrow_chunks, convert_strings, convert_values, csv_chunks, csv_header,
                     csv_tables, finish, json_chunks, match_columns, pandas_chunks, parse_json)

__all__ = ["Chunk", "Errors", "arrow_chunks", "convert_strings", "convert_values", "csv_chunks", "csv_header",
           "csv_tables", "finish", "json_chunks", "match_columns", "pandas_chunks", "parse_json"]
