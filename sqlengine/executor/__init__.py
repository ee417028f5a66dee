"""Running the circuit: one step turns the tables' input changes into every operator's changes.

``step`` is the step loop, written once; ``runtime`` (the ``Engine``) runs each step with ``local_step`` (a
small step wholly on the driver) or ``spark_step`` (on Spark, placing each operator on the driver where its
changes are and its state can be read by key); ``placement`` holds every threshold of those choices.  The
parts share a ``context`` (the circuit, its state keys and schemas, the store, the counters) and nothing
private: ``spark_state`` reads state on Spark, ``input_changes`` clamps deletes and applies upserts,
``merges`` merges state runs and drops closed rows, ``sum_bounds`` bounds integer SUMs.  Everything about an
operator kind is in its module under ``ops`` (its delta rule's terms, the state it reads and by which key,
its Arrow fast path, its schema; ``ops.accumulators`` is the accumulating aggregate's state layout), over two
backends (``backends.duckdb``, ``backends.spark``); the rules themselves are SQL written once
(``delta_rules``).  ``op_schemas`` types every operator's change without Spark, ``schema`` maps SQL types to
Spark (``sqlengine.types`` maps them to Arrow), ``session`` owns the embedded SparkSession, ``watermarks``
applies event time (late rows, closed state, emit-final views), and ``row_errors`` keeps rows whose
expressions fail out of the views and records them in the ``sqlengine_errors`` relation.
"""
