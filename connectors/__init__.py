"""Sources and sinks, registered by transport name (see ``connectors.base``)."""
from . import file_output, formats  # noqa: F401 - registers them
from .base import FORMATS, SINKS, SOURCES, Format, Sink, Source, SourceBatch, opt, register_format, \
    register_sink, register_source

__all__ = ["Source", "Sink", "Format", "SourceBatch", "opt", "register_source", "register_sink",
           "register_format", "SOURCES", "SINKS", "FORMATS"]
