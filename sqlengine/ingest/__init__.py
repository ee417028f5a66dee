"""Getting rows into a pipeline: from an input call or a connector into the durable input log, and out to sinks.

``inputs`` validates and converts input (pandas, JSON, CSV, Python values) to
Arrow chunks under an error policy; ``batches`` writes one input call's chunks
into the log as one atomic batch, with dead-letter files for bad rows;
``sources`` runs the source connectors (one thread each, positions committed
with steps) and ``sinks`` the sink connectors (the outbox of committed view
changes waiting to be delivered).
"""
