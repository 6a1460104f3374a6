"""Keying: which key a record belongs to and whether it must hop to that key's partition first.

A claim or resolution is keyed by its subject's canonical spelling at its instant (an alias
resolved, `Processor`) and field. A record keyed otherwise by its producer, or partitioned by
another hash than Kafka's default, is forwarded once through the rekeyed topic to the partition
that owns its key (`Rekeying.forward`), carrying its kind and source class in headers
(`HEADER_*`), so the task that owns the key's state is the only one that decides it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import datetime

from streams.core.keys.state import split_key, state_key
from streams.core.records.contracts import SourceClass
from streams.ops.metrics import Metrics
from streams.pipeline.records import Handled, Incoming, Outgoing
from streams.settings import Settings
from streams.wire.partitioner import murmur2

HEADER_KIND = "claimstream.kind"
HEADER_SOURCE_CLASS = "claimstream.source_class"
HEADER_DUE = "claimstream.due"
HEADER_ROUTED_AT = "claimstream.routed_at"
"""On a claim or resolution sent on to the key its subject names under the aliases of a later
instant than its own: that instant. A key whose evidence an alias change regrouped after a
record's instant holds what the aliases say from then on, so a record that reaches it late goes
where they send it, as it would have moved had it arrived in time."""
KIND_CLAIM, KIND_RESOLUTION, KIND_TICK = b"claim", b"resolution", b"tick"
KIND_MOVED = b"moved"
"""A key's evidence an alias change moved to the key of another spelling, due at the change's
instant (`HEADER_DUE`): the claims and resolutions, as a key state's changelog record holds
them."""


@functools.lru_cache(maxsize=1 << 16)
def partition_of(key: bytes, partitions: int) -> int:
    """The partition Kafka's default partitioner puts `key` on: the Java client's murmur2, which
    is what owns a key here. Other partitioners (librdkafka's CRC32) only cost a re-key hop.
    Cached: every record in and out asks, and interpreted, murmur2 costs microseconds."""
    hashed: int = murmur2(key)
    return (hashed & 0x7FFFFFFF) % partitions


def canonical_key(key: str, alias_of: Callable[[str], str | None]) -> str:
    """`subject|field` about the subject's canonical name: the key a read finds the state under
    when it names the subject by an alias (`Acme Corp|contract.seats` -> `acme|contract.seats`)."""
    subject, field = split_key(key)
    named = alias_of(subject)
    return state_key(named, field) if named and named != subject else key


class Rekeying:
    def __init__(self, settings: Settings, metrics: Metrics) -> None:
        self.partitions = settings.partitions
        self.rekeyed = settings.topics.rekeyed
        self.user_claims = settings.topics.user_claims
        self.hops = metrics.rekey_hops

    def misrouted(self, record: Incoming, key: bytes) -> bool:
        """Whether the record must hop to its key's partition before it can be decided: keyed
        otherwise by its producer, or keyed right but partitioned by another hash (librdkafka's
        CRC32). Deciding it where it landed would split the key's state across two tasks."""
        if record.key != key and record.topic != self.rekeyed:
            self.hops.labels("key").inc()
            return True
        if record.partition != partition_of(key, self.partitions):
            self.hops.labels("partition").inc()
            return True
        return False

    def forward(
        self, record: Incoming, key: bytes, kind: bytes, routed_at: datetime | None = None
    ) -> Handled:
        """Re-key to subject|field, sent to the key's partition explicitly, so the record reaches
        the task that owns the key's state whatever partitioner the producer used. `routed_at`:
        the instant of the aliases that sent it to `key`, when later than its own."""
        replaced = (HEADER_KIND, HEADER_SOURCE_CLASS, HEADER_ROUTED_AT if routed_at else "")
        headers = tuple(h for h in record.headers if h[0] not in replaced)
        headers += ((HEADER_KIND, kind),)
        if routed_at is not None:
            headers += ((HEADER_ROUTED_AT, routed_at.isoformat().encode()),)
        source_class = self.source_class(record)
        if source_class is not None:
            headers += ((HEADER_SOURCE_CLASS, source_class.value.encode()),)
        partition = partition_of(key, self.partitions)
        stamped = record.timestamp
        timestamp_ms = round(stamped * 1000) if stamped else None
        forwarded = Outgoing(self.rekeyed, key, record.value, headers, partition, timestamp_ms)
        return Handled(outputs=[forwarded])

    def routed_at(self, record: Incoming, now: datetime) -> datetime:
        """The instant of the aliases a record is keyed by: its own (`now`), or a later one a
        worker sent it on under (`HEADER_ROUTED_AT`)."""
        if record.topic != self.rekeyed:
            return now
        stated = record.header(HEADER_ROUTED_AT)
        return max(now, datetime.fromisoformat(stated.decode())) if stated else now

    def source_class(self, record: Incoming) -> SourceClass | None:
        """A user assertion's class comes from the topic it arrived on, never from its payload."""
        topic = record.topic
        if topic == self.user_claims:
            return SourceClass.USER
        if topic == self.rekeyed:
            carried = record.header(HEADER_SOURCE_CLASS)
            if carried is not None:
                return SourceClass(carried.decode())
        return None
