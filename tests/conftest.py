import os
import sys

import pytest
from hypothesis import HealthCheck, Phase, settings

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

# Deterministic by default (CI); HYPOTHESIS_PROFILE=thorough explores more, with fresh randomness.
settings.register_profile("ci", max_examples=4, deadline=None, derandomize=True, print_blob=True,
                          phases=[Phase.explicit, Phase.reuse, Phase.generate],
                          suppress_health_check=list(HealthCheck))
settings.register_profile("thorough", max_examples=40, deadline=None, print_blob=True,
                          suppress_health_check=list(HealthCheck))
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(scope="session")
def spark():
    """The tests' SparkSession: local, or with ``$SQLENGINE_SPARK_MASTER`` on that cluster (the cluster tests run
    the Spark path's differential tests so, in a child process: ``tests/stress/test_spark_cluster.py``)."""
    from sqlengine.executor.session import MASTER_ENV, get_spark
    conf = {"spark.sql.shuffle.partitions": "1", "spark.driver.memory": "2g"}
    if os.environ.get(MASTER_ENV):
        conf.update({"spark.master": os.environ[MASTER_ENV], "spark.executor.memory": "1g",
                     "spark.sql.shuffle.partitions": "2", "spark.task.maxFailures": "8"})
    s = get_spark(conf)
    assert s.sparkContext.master == conf.get("spark.master", s.sparkContext.master), "a session on another master"
    yield s


@pytest.fixture
def placement():
    """Where the pipelines of ``make_pipeline`` run their steps and operators: settings of
    :class:`sqlengine.executor.placement.Placement` (``RuntimeConfig.placement``), set by a test before it makes
    them, e.g. ``placement["local_step_rows"] = 0`` for every step on Spark."""
    return {}


@pytest.fixture(params=["driver", "spark"])
def executor(request, placement):
    """Each test that takes it runs twice: its steps on the driver, and with every step and every operator on
    Spark (the pipelines of ``make_pipeline`` made after it)."""
    if request.param == "spark":
        placement["local_step_rows"] = 0
        placement["driver_rows"] = 0   # every op on Spark, not only the step
    return request.param


@pytest.fixture
def make_pipeline(spark, tmp_path, placement):
    """Factory: make_pipeline(sql, **kw) -> started Pipeline on the shared session; stopped at teardown."""
    import dataclasses
    from sqlengine import Pipeline, RuntimeConfig
    made = []

    def make(sql, start=True, **kw):
        kw.setdefault("storage_dir", str(tmp_path / f"p{len(made)}"))
        if placement:
            rc = RuntimeConfig.coerce(kw.pop("runtime_config", None))
            kw["runtime_config"] = dataclasses.replace(rc, placement={**placement, **rc.placement})
        p = Pipeline.from_sql(sql, name=f"t{len(made)}", spark=spark, **kw)
        made.append(p)
        if start:
            p.start()
        return p

    yield make
    for p in made:
        try:
            p.stop(force=True)
        except Exception:
            pass


@pytest.fixture(scope="session")
def postgres():
    """A PostgreSQL 15 server for the session (tests/support/postgres_server.py); each test uses its own database.
    Skips with the reason when PostgreSQL is not installed."""
    from tests.support.postgres_server import PostgresServer, PostgresUnavailable
    try:
        pg = PostgresServer().start()
    except PostgresUnavailable as e:
        pytest.skip(str(e))
    yield pg
    pg.stop()


@pytest.fixture(scope="session")
def broker():
    """A Kafka-protocol broker (Tansu, tests/support/kafka_broker.py) for the session; tests use topics of their own.
    Skips with the reason when none can start here."""
    from tests.support.kafka_broker import Broker, BrokerUnavailable
    b = Broker()
    try:
        b.start()
    except BrokerUnavailable as e:
        pytest.skip(f"no Kafka broker for the tests: {e}")
    yield b
    b.stop()
