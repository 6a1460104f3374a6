"""Keying: which key a record belongs to and whether it must hop to that key's partition first.

A claim or resolution is keyed by its canonical subject (`canonical`: an alias resolved) and
field. A record keyed otherwise by its producer, or partitioned by another hash than Kafka's
default, is forwarded once through the rekeyed topic to the partition that owns its key
(`Rekeying.forward`), carrying its kind and source class in headers (`HEADER_*`), so the task
that owns the key's state is the only one that decides it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar

from streams.core.keys.state import split_key, state_key
from streams.core.records.contracts import LeanClaim, Resolution, SourceClass
from streams.ops.metrics import Metrics
from streams.pipeline.records import Handled, Incoming, Outgoing
from streams.settings import Settings
from streams.wire.partitioner import murmur2

HEADER_KIND = "claimstream.kind"
HEADER_SOURCE_CLASS = "claimstream.source_class"
HEADER_DUE = "claimstream.due"
KIND_CLAIM, KIND_RESOLUTION, KIND_TICK = b"claim", b"resolution", b"tick"

Subjected = TypeVar("Subjected", LeanClaim, Resolution)


@functools.lru_cache(maxsize=1 << 16)
def partition_of(key: bytes, partitions: int) -> int:
    """The partition Kafka's default partitioner puts `key` on: the Java client's murmur2, which
    is what owns a key here. Other partitioners (librdkafka's CRC32) only cost a re-key hop.
    Cached: every record in and out asks, and interpreted, murmur2 costs microseconds."""
    hashed: int = murmur2(key)
    return (hashed & 0x7FFFFFFF) % partitions


def canonical(item: Subjected, alias_of: Callable[[str], str | None]) -> Subjected:
    """`item` about its subject's canonical name, when the subject is a known alias."""
    named = alias_of(item.subject)
    if named and named != item.subject:
        return item.with_subject(named)
    return item


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

    def forward(self, record: Incoming, key: bytes, kind: bytes) -> Handled:
        """Re-key to subject|field, sent to the key's partition explicitly, so the record reaches
        the task that owns the key's state whatever partitioner the producer used."""
        headers = tuple(h for h in record.headers if h[0] not in (HEADER_KIND, HEADER_SOURCE_CLASS))
        headers += ((HEADER_KIND, kind),)
        source_class = self.source_class(record)
        if source_class is not None:
            headers += ((HEADER_SOURCE_CLASS, source_class.value.encode()),)
        partition = partition_of(key, self.partitions)
        return Handled(outputs=[Outgoing(self.rekeyed, key, record.value, headers, partition)])

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
