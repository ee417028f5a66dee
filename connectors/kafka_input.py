"""``kafka_input``: a table's input from Kafka topics.

    CREATE TABLE t (...) WITH ('connectors' = '[{"name": "kin", "transport": {"name": "kafka_input",
        "config": {"bootstrap.servers": "localhost:9092", "topics": ["orders"], "start_from": "earliest"}},
        "format": {"name": "json", "config": {"update_format": "insert_delete"}}}]')

Options: ``bootstrap.servers`` and ``topics`` (required); ``start_from``: ``"earliest"`` (default),
``"latest"`` or ``{"<topic>": {"<partition>": offset}}`` (partitions not named start at the earliest);
``poll_timeout_ms`` (how long one poll waits for the first message, default 100); ``max_batch_messages``
(the most messages in one input batch, default 100000); ``timeout_ms`` (broker requests made while opening,
default 10000).  Any other key containing a ``.`` is a librdkafka option, passed through to the consumer
(e.g. ``"security.protocol"``, ``"fetch.max.bytes"``).  Formats: ``json`` (default), ``csv``, ``avro`` (see
``connectors.messages``).

**Positions.**  The connector uses no consumer group and commits nothing: it assigns every partition of
its topics explicitly at the offsets the engine gives back on ``open`` (the position of the last batch
that reached the input log, ``{"<topic>/<partition>": next offset}``), so after a crash it reads on right
after the last logged message: exactly once.  On the first start the offsets come from ``start_from``,
resolved to numbers right away (``earliest``/``latest`` = the partition's low/high watermark then), so the
position always names every partition.  Partitions added to a topic later are found (the topic metadata is
read again every 10 s) and read from their beginning.

**Failures.**  A broker that cannot be reached when opening (metadata requests time out after
``timeout_ms``), all brokers going down while reading, or a message error other than the end of a
partition raise ``ConnectorError``; the engine reports it in ``status()`` and reopens the connector with
backoff from the last logged position.  Errors that retrying cannot fix raise ``PermanentConnectorError``
and the connector stops in state ``failed``: a topic that does not exist (``UNKNOWN_TOPIC_OR_PART``; topics
are never created automatically), a librdkafka option it rejects, failed SASL authentication or missing
authorization, and librdkafka's fatal errors (``is_permanent``).
"""
from __future__ import annotations

import logging
import time
from typing import Any, Dict, List, Optional, Tuple

from planner.errors import ConnectorError, PermanentConnectorError

from .base import Source, SourceBatch, opt, register_source
from .kafka_logs import LIBRDKAFKA_LOG, routed
from .messages import Batch, decoder

log = logging.getLogger("sqlengine.kafka")
REDISCOVER_S = 10.0


def kafka_error_text(e: BaseException) -> str:
    err = e.args[0] if getattr(e, "args", None) else None
    if hasattr(err, "str") and callable(err.str):
        return err.str()
    return str(e)


def is_permanent(err) -> bool:
    """Whether a ``confluent_kafka.KafkaError`` is one that retrying cannot fix: librdkafka's fatal errors, a
    rejected configuration, failed authentication or authorization, a topic that does not exist."""
    from confluent_kafka import KafkaError
    codes = {getattr(KafkaError, n, None) for n in (
        "_AUTHENTICATION", "SASL_AUTHENTICATION_FAILED", "UNSUPPORTED_SASL_MECHANISM", "ILLEGAL_SASL_STATE",
        "TOPIC_AUTHORIZATION_FAILED", "GROUP_AUTHORIZATION_FAILED", "CLUSTER_AUTHORIZATION_FAILED",
        "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", "UNKNOWN_TOPIC_OR_PART", "_UNKNOWN_TOPIC", "TOPIC_EXCEPTION",
        "_INVALID_ARG", "MSG_SIZE_TOO_LARGE")} - {None}
    try:
        return bool(err.fatal()) or err.code() in codes
    except AttributeError:
        return False


def kafka_error(message: str, e: BaseException) -> ConnectorError:
    """``message`` as a ``PermanentConnectorError`` if the ``KafkaException`` ``e`` is permanent (``is_permanent``)."""
    err = e.args[0] if getattr(e, "args", None) else None
    return (PermanentConnectorError if err is not None and is_permanent(err) else ConnectorError)(message)


_BLANK = (b" ", b"\t", b"\n", b"\r")   # a message starting with one may be blank (checked in full)


@register_source
class KafkaInput(Source):
    transport = "kafka_input"
    OPTIONS = {
        "bootstrap.servers": opt(str, required=True, doc="host:port[,host:port...] of the Kafka brokers"),
        "topics": opt(list, required=True, doc="the topics to read, a list of names"),
        "start_from": opt(str, dict, default="earliest",
                          doc='"earliest", "latest" or {"<topic>": {"<partition>": offset}}'),
        "poll_timeout_ms": opt(int, default=100, doc="how long one poll waits for messages"),
        "max_batch_messages": opt(int, default=100_000, doc="the most messages in one input batch"),
        "timeout_ms": opt(int, default=10_000, doc="timeout of the broker requests made when opening"),
    }
    FORMATS = ("json", "csv", "avro")
    EXTRA = "kafka"
    MODULES = ("confluent_kafka",)
    PASSTHROUGH_DOTTED = True

    def validate(self) -> None:
        c, where = self.config, self.ctx.where
        topics = c["topics"]
        if not topics or not all(isinstance(x, str) and x for x in topics):
            raise where.error("transport kafka_input: \"topics\" must be a non-empty list of topic names", "topics")
        if len(set(topics)) != len(topics):
            raise where.error("transport kafka_input: \"topics\" names a topic twice", "topics")
        sf = c["start_from"]
        if isinstance(sf, str):
            if sf not in ("earliest", "latest"):
                raise where.error(f"transport kafka_input: \"start_from\" must be \"earliest\", \"latest\" or "
                                  f"{{\"<topic>\": {{\"<partition>\": offset}}}}, not {sf!r}", "start_from")
        else:
            for topic, parts in sf.items():
                if topic not in topics:
                    raise where.error(f"transport kafka_input: \"start_from\" names topic {topic!r}, which is not "
                                      f"in \"topics\"", "start_from")
                if not isinstance(parts, dict):
                    raise where.error(f"transport kafka_input: \"start_from\" of topic {topic!r} must be "
                                      f"{{\"<partition>\": offset}}, not {parts!r}", "start_from")
                for p, off in parts.items():
                    if not str(p).isdigit() or not isinstance(off, int) or isinstance(off, bool) or off < 0:
                        raise where.error(f"transport kafka_input: \"start_from\" of topic {topic!r}: partition "
                                          f"{p!r} -> {off!r}; partitions are numbers and offsets integers >= 0",
                                          "start_from")
        for k in ("poll_timeout_ms", "max_batch_messages", "timeout_ms"):
            if c[k] <= 0:
                raise where.error(f"transport kafka_input: \"{k}\" must be positive", k)
        self.decode = decoder(self.format, self.ctx.table)

    def __init__(self, config, fmt, ctx):
        super().__init__(config, fmt, ctx)
        self.consumer = None
        self.next: Dict[Tuple[str, int], int] = {}   # (topic, partition) -> next offset to read
        self.broker_error: Optional[str] = None
        self.permanent_error: Optional[str] = None   # an authentication error from the error callback
        self._lag: Optional[int] = None
        self._lag_at = 0.0
        self._discovered_at = 0.0
        self.decode = None

    # ------------------------------------------------------------ connecting
    def _consumer_config(self) -> Dict[str, Any]:
        c = self.config
        conf = {"group.id": f"sqlengine.{self.ctx.pipeline}.{self.ctx.relation}.{self.ctx.connector}",
                "enable.auto.commit": False, "enable.auto.offset.store": False, "enable.partition.eof": False,
                "auto.offset.reset": "earliest", "allow.auto.create.topics": False,
                "socket.connection.setup.timeout.ms": max(1000, min(c["timeout_ms"], 30_000)),
                "topic.metadata.refresh.interval.ms": 10_000, "fetch.wait.max.ms": 100,
                "max.partition.fetch.bytes": 8 << 20,
                "logger": LIBRDKAFKA_LOG, "error_cb": routed(self._on_error)}
        conf.update({k: v for k, v in c.items() if "." in k})
        return conf

    def _on_error(self, err) -> None:
        from confluent_kafka import KafkaError
        if err.fatal() or err.code() in (KafkaError._ALL_BROKERS_DOWN, KafkaError._AUTHENTICATION,
                                         KafkaError._SSL):
            self.broker_error = err.str()
        if is_permanent(err):
            self.permanent_error = err.str()

    def _unreachable(self, e: BaseException) -> ConnectorError:
        """A request that failed: permanent if the error callback saw an authentication failure meanwhile."""
        if self.consumer is not None and not self.consumer.assignment():
            self.consumer.poll(0)   # (serves the error callback; nothing is assigned, so no message is taken)
        if self.permanent_error is not None:
            return PermanentConnectorError(f"the Kafka broker at {self.config['bootstrap.servers']} refused the "
                                           f"connection: {self.permanent_error}")
        return kafka_error(f"cannot reach the Kafka broker at {self.config['bootstrap.servers']} "
                           f"(bootstrap.servers): {kafka_error_text(e)}", e)

    def _partitions(self, timeout: float) -> Dict[str, List[int]]:
        """The partitions of every topic (raises ConnectorError if the cluster or a topic is missing)."""
        from confluent_kafka import KafkaException
        out = {}
        for topic in self.config["topics"]:
            try:
                md = self.consumer.list_topics(topic, timeout=timeout)
            except KafkaException as e:
                raise self._unreachable(e) from None
            tm = md.topics.get(topic)
            if tm is None or tm.error is not None or not tm.partitions:
                why = tm.error.str() if tm is not None and tm.error is not None else "no partitions"
                permanent = tm is not None and tm.error is not None and is_permanent(tm.error)
                raise (PermanentConnectorError if permanent else ConnectorError)(
                    f"topic {topic!r} is not available at {self.config['bootstrap.servers']}: {why}")
            out[topic] = sorted(tm.partitions)
        return out

    def _watermarks(self, topic: str, partition: int, timeout: float) -> Tuple[int, int]:
        from confluent_kafka import KafkaException, TopicPartition
        try:
            return self.consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout)
        except KafkaException as e:
            raise self._unreachable(e) from None

    def _start_offset(self, topic: str, partition: int, timeout: float, new: bool = False) -> int:
        sf = self.config["start_from"]
        if isinstance(sf, dict):
            given = sf.get(topic, {})
            if str(partition) in given:
                return int(given[str(partition)])
            return self._watermarks(topic, partition, timeout)[0]
        low, high = self._watermarks(topic, partition, timeout)
        return high if sf == "latest" and not new else low

    def open(self, position: Any) -> None:
        from confluent_kafka import Consumer, KafkaException
        self.close()
        self.broker_error = self.permanent_error = None
        timeout = self.config["timeout_ms"] / 1000
        try:
            self.consumer = Consumer(self._consumer_config())
        except KafkaException as e:   # (permanent: an option librdkafka rejects)
            raise kafka_error(f"cannot create the Kafka consumer: {kafka_error_text(e)}", e) from None
        try:
            parts = self._partitions(timeout)
            pos = dict(position or {})
            self.next = {}
            for topic, ps in parts.items():
                for p in ps:
                    key = f"{topic}/{p}"
                    if key in pos:
                        self.next[(topic, p)] = int(pos[key])
                    elif position is not None:
                        self.next[(topic, p)] = self._start_offset(topic, p, timeout, new=True)
                    else:
                        self.next[(topic, p)] = self._start_offset(topic, p, timeout)
            self._assign()
        except BaseException:
            self.close()
            raise
        self._discovered_at = time.monotonic()

    def _assign(self) -> None:
        from confluent_kafka import KafkaException, TopicPartition
        try:
            self.consumer.assign([TopicPartition(t, p, off) for (t, p), off in sorted(self.next.items())])
        except KafkaException as e:
            raise ConnectorError(f"cannot assign the partitions: {kafka_error_text(e)}") from None

    def _discover(self) -> None:
        """Pick up partitions added to the topics since opening (read from their beginning)."""
        self._discovered_at = time.monotonic()
        try:
            parts = self._partitions(1.0)
        except ConnectorError:
            return   # reading goes on; a real outage shows as an error callback
        new = [(t, p) for t, ps in parts.items() for p in ps if (t, p) not in self.next]
        if new:
            for t, p in new:
                self.next[(t, p)] = self._start_offset(t, p, 1.0, new=True)
            self._assign()

    def position(self) -> Dict[str, int]:
        return {f"{t}/{p}": off for (t, p), off in sorted(self.next.items())}

    # ------------------------------------------------------------ reading
    def poll(self, max_rows: int) -> Optional[SourceBatch]:  # noqa: C901
        from confluent_kafka import KafkaError
        if self.consumer is None:
            raise ConnectorError("not open")
        if time.monotonic() - self._discovered_at > REDISCOVER_S:
            self._discover()
        limit = max(1, min(max_rows, self.config["max_batch_messages"]))
        wait = self.config["poll_timeout_ms"] / 1000
        deadline = time.monotonic() + max(wait, 0.15)
        msgs: List[Any] = []
        values: List[bytes] = []
        size = 0
        advanced = False
        nxt = self.next
        consume = self.consumer.consume
        first = True
        while len(msgs) < limit:
            left = deadline - time.monotonic()
            if left <= 0 and not first:
                break
            got = consume(num_messages=min(limit - len(msgs), 10_000),
                          timeout=wait if first else max(0.0, min(left, 0.02)))
            first = False
            if not got:
                if msgs or time.monotonic() >= deadline:
                    break
                continue
            # per message only what must be (this loop bounds the connector's rate): errors, values
            if any([m.error() is not None for m in got]):
                for m in got:
                    err = m.error()
                    if err is not None and err.code() != KafkaError._PARTITION_EOF:
                        raise ConnectorError(f"reading {m.topic()}/{m.partition()}: {err.str()}")
                got = [m for m in got if m.error() is None]
            if not got:
                continue
            advanced = True
            seen = set()
            for m in reversed(got):   # the next offset of each partition: after its last message
                tp = (m.topic(), m.partition())
                if tp not in seen:
                    seen.add(tp)
                    nxt[tp] = m.offset() + 1
                    if len(seen) == len(nxt):   # (every assigned partition's last message found)
                        break
            vals = [m.value() for m in got]
            size += sum(len(v) for v in vals if v is not None)
            if all(vals):
                keep = [v[:1] not in _BLANK for v in vals]
                if all(keep):
                    msgs += got
                    values += vals
                    continue
            else:
                keep = [bool(v) and v[:1] not in _BLANK for v in vals]
            for m, v, k in zip(got, vals, keep):
                if k or (v and v.strip()):
                    msgs.append(m)
                    values.append(v)
            if self.broker_error is not None:
                break
        if self.broker_error is not None and not msgs:   # (with messages: raised by the next poll)
            err, self.broker_error = self.broker_error, None
            raise (PermanentConnectorError if self.permanent_error is not None else ConnectorError)(
                f"cannot reach the Kafka broker at {self.config['bootstrap.servers']} (bootstrap.servers): {err}")
        self._update_lag()
        if not advanced:
            return None
        if self.decode is None:
            self.decode = decoder(self.format, self.ctx.table)

        def coords(i: int, msgs=msgs) -> Dict[str, Any]:
            m = msgs[i]
            return {"topic": m.topic(), "partition": m.partition(), "offset": m.offset()}
        return SourceBatch(self.decode(Batch(values, coords)), self.position(), size)

    def lag(self) -> Optional[int]:
        """Messages waiting in the assigned partitions (computed on the polling thread at most once a second,
        from the watermarks the consumer caches: the consumer is not called from other threads)."""
        return self._lag

    def _update_lag(self) -> None:
        now = time.monotonic()
        if now - self._lag_at < 1.0 or self.consumer is None:
            return
        self._lag_at = now
        from confluent_kafka import TopicPartition
        total = 0
        try:
            for (t, p), off in list(self.next.items()):
                low, high = self.consumer.get_watermark_offsets(TopicPartition(t, p), cached=True)
                if high < 0:
                    return
                total += max(0, high - max(off, low))
        except Exception:   # noqa: BLE001 - lag is best effort
            return
        self._lag = total

    def close(self) -> None:
        c, self.consumer = self.consumer, None
        if c is not None:
            try:
                c.close()
            except Exception:   # noqa: BLE001
                pass
