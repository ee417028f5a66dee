"""The chaos run of ``tests/support/chaos.py`` in a small form (about a minute; ``benchmarks/chaos.py`` runs it for
longer): ``sqlengine run`` killed and restarted under a supervisor, sometimes overlapping, while the broker
and PostgreSQL go down and come back, the producer adds a field and malformed messages are mixed in.  The
outputs must equal DuckDB's recomputation of the valid inputs, every bad message must be in the dead
letter once, and the logs must name every outage."""
import os

import pytest

from tests.support import chaos
from tests.support.kafka_broker import Broker, BrokerUnavailable
from tests.support.postgres_server import PostgresServer, PostgresUnavailable

pytestmark = pytest.mark.slow   # a long real-system or Spark test: ./run.sh test -m "not slow" skips it

SECONDS = float(os.environ.get("CHAOS_SECONDS", "60"))


def test_chaos(tmp_path):
    for system in (Broker(), PostgresServer()):
        try:
            system.start()
        except (BrokerUnavailable, PostgresUnavailable) as e:
            pytest.skip(str(e))
        finally:
            system.stop()
    r = chaos.run(str(tmp_path), SECONDS, seed=3)
    print(f"lives {r.lives} (killed {r.kills}), outages {r.outages}, messages {r.messages} "
          f"({r.malformed} malformed), transactions {r.transactions}, steps {r.steps}, "
          f"outages lived through by a process {r.figures['outages_watched']}")
    assert not r.problems, "\n".join(r.problems)
    assert r.lives >= 4 and r.kills >= 2, "too little chaos: the supervisor restarted too rarely"
    assert r.outages.get("kafka", 0) >= 2 and r.outages.get("postgres", 0) >= 2, r.outages
    assert r.malformed > 0 and r.messages > 1000
    assert r.figures["outages_watched"] >= 1, "no outage was lived through by a process: the log check checked nothing"
