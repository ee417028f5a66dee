"""Sources and sinks.  Each connector is a small class registered by name in ``SINKS``."""
from .parquet_sink import ParquetSink

SINKS = {"parquet": ParquetSink}

__all__ = ["ParquetSink", "SINKS"]
