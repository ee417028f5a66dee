"""What the Flink peers share (run by the ``.peer-flink`` venv's Python; pyflink is imported inside): the
table environment as ``PEERS.md`` sets it up, and a blackhole sink for a query's rows."""


def make_env(streaming: bool, parallelism: int):
    from pyflink.table import EnvironmentSettings, TableEnvironment
    settings = EnvironmentSettings.in_streaming_mode() if streaming else EnvironmentSettings.in_batch_mode()
    env = TableEnvironment.create(settings)
    conf = env.get_config()
    conf.set("parallelism.default", str(parallelism))
    conf.set("pipeline.object-reuse", "true")
    return env


def blackhole(env, name: str, table) -> None:
    """(Re)declare the temporary table ``name`` as a blackhole sink with ``table``'s columns."""
    from pyflink.table import Schema, TableDescriptor
    schema = Schema.new_builder().from_row_data_type(table.get_resolved_schema().to_physical_row_data_type()).build()
    env.drop_temporary_table(name)
    env.create_temporary_table(name, TableDescriptor.for_connector("blackhole").schema(schema).build())
