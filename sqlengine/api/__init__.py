"""The public face of the engine: what a program that embeds sqlengine calls.

The embedded ``Pipeline`` (``pipeline``: compile a SQL program, feed its tables,
advance steps, read views, checkpoint and restart), its Feldera-style
configuration (``runtime_config``: ``RuntimeConfig``, ``PipelineBuilder``,
``PipelineStatus``), delivery of view changes to Python callbacks (``output``),
ad-hoc read-only queries over the last committed step (``query``), and the
Python client of the pipeline server with the same methods (``client``; the
methods both share: ``protocol``).  The step loop itself is
:mod:`sqlengine.controller`.  The names most programs need are re-exported by
:mod:`sqlengine` itself.
"""
