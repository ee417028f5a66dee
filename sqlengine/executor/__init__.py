"""Running the circuit: one step turns the tables' input changes into every operator's changes.

The step executor (``runtime``) runs each step either on Spark, lowering
operators to lazy DataFrame plans (``lower``), or on the driver, lowering them
to DuckDB SQL over Arrow (``local_step``, ``local_lower``, with plain-Arrow fast
paths in ``arrow_ops``); ``op_schemas`` types every operator's change without
Spark, ``schema`` maps SQL types to Spark and Arrow, ``session`` owns the
embedded SparkSession, ``watermarks`` applies event time (late rows, closed
state, emit-final views), and ``row_errors`` keeps rows whose expressions fail
out of the views and records them in the ``sqlengine_errors`` relation.
"""
