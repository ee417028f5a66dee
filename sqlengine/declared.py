"""The connectors a program declares: the one place where sqlengine reaches the ``connectors`` package.

Dependencies go one way: connectors build on sqlengine's public ingest and types API (``sqlengine.ingest``,
``sqlengine.types``), and the engine reaches connectors only here, through the registry of
``connectors.declare`` (``WITH ('connectors' = ...)`` on tables and views, checked against the registered
transports and formats).  Importing this module loads every connector, so callers import it when a
pipeline opens or a program is checked, not when ``sqlengine`` is imported.  ``tests/planner/test_imports.py``
holds the rule.
"""
from connectors.declare import Declared, declare, declare_program

__all__ = ["Declared", "declare", "declare_program"]
