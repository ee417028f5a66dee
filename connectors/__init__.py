"""Sources and sinks, registered by transport name (see ``connectors.base``)."""
from . import datagen, file_input, file_output, formats, kafka_input, kafka_output, messages, nexmark  # noqa: F401 - registers them
from .base import FORMATS, SINKS, SOURCES, Format, Sink, Source, SourceBatch, opt, register_format, \
    register_sink, register_source

__all__ = ["Source", "Sink", "Format", "SourceBatch", "opt", "register_source", "register_sink",
           "register_format", "SOURCES", "SINKS", "FORMATS"]
