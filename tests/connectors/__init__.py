"""Sources and sinks (Kafka, PostgreSQL, Delta, Iceberg, files, datagen), connector errors and crashes, dead
letters, ingestion, input strictness, evolving producers."""
