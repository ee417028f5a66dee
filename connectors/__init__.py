"""Sources and sinks, registered by transport name (see ``connectors.base``)."""
from . import (datagen, delta_input, delta_output, file_input, file_output, formats, iceberg_output,  # noqa: F401
               kafka_input, kafka_output, messages, nexmark, postgres_input, postgres_output)  # (registers them)
from .base import FORMATS, SINKS, SOURCES, Format, Sink, Source, SourceBatch, opt, register_format, \
    register_sink, register_source

__all__ = ["Source", "Sink", "Format", "SourceBatch", "opt", "register_source", "register_sink",
           "register_format", "SOURCES", "SINKS", "FORMATS"]
