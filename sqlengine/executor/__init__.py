"""Running the circuit: one step turns the tables' input changes into every operator's changes.

``step`` is the step loop, written once; ``runtime`` (the ``Engine``) runs a step on Spark, placing each
operator on the driver where its changes are and its state can be read by key, and ``local_step`` runs a
small step wholly on the driver (``placement`` holds every threshold of those choices).  Everything about an
operator kind is in its module under ``ops`` (its delta rule's terms, the state it reads and by which key,
its Arrow fast path, its schema; ``ops.accumulators`` is the accumulating aggregate's state layout), over two
backends (``backends.duckdb``, ``backends.spark``); the rules themselves are SQL written once
(``delta_rules``).  ``op_schemas`` types every operator's change without Spark, ``schema`` maps SQL types to
Spark (``sqlengine.types`` maps them to Arrow), ``session`` owns the embedded SparkSession, ``watermarks``
applies event time (late rows, closed state, emit-final views), and ``row_errors`` keeps rows whose
expressions fail out of the views and records them in the ``sqlengine_errors`` relation.
"""
