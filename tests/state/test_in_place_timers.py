"""A key's timer reaches its store's due index when the processor changes the key's state in place.

The processor hands `apply_claim` the state `TaskStore.get` returned, and `apply_claim` changes
that very object; the store must still carry the timer the key had before (what its index holds),
or a disk store that trusts the carried timer sees no change and never moves the key's entry
(a conflict that never escalates, a fresh claim whose expiry never fires). Driven through the
worker's own path: a batch's read ahead, `Processor.process`, `put`, `journal`, `journaled`.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from streams.core.keys.state import state_key
from streams.core.records.contracts import Claim
from streams.core.records.instants import micros
from streams.core.records.policy import load_policy
from streams.ops.metrics import Metrics
from streams.packaged import example_path
from streams.pipeline import Incoming, Processor
from streams.pipeline.rekey import partition_of
from streams.settings import Settings
from streams.state.cache import StateCache
from streams.state.keystore import KeyStore, MemoryKeyStore
from streams.state.rocks import Budget, RocksKeyStore
from streams.state.task import TaskStore, timer_of
from streams.wire.registry import FolderRegistry, WireCodec

POLICY = load_policy(example_path("policy.yaml"))  # escalate_after 15m; freshness 60s for payments
SETTINGS = Settings()
CODEC = WireCodec(FolderRegistry())
NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
SEATS = ("initech", "contract.seats")
PAYMENT = ("invoice:42", "order.payment_status")
FAR = micros(NOW + timedelta(days=3))


@pytest.fixture(params=["memory", "rocksdb"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[TaskStore]:
    keys: KeyStore = (
        MemoryKeyStore()
        if request.param == "memory"
        else RocksKeyStore(tmp_path / "rocksdb", Budget(1 << 20))
    )
    yield TaskStore(StateCache(100), keys)
    keys.close()


def _record(
    offset: int, key: tuple[str, str], source: str, value: object, at: datetime
) -> Incoming:
    subject, field = key
    claim = Claim(
        claim_id=f"c{offset}",
        subject=subject,
        field=field,
        status="present",
        value=value,
        source=source,
        observed_at=at,
    )
    topic = SETTINGS.topics.claims
    encoded_key = state_key(subject, field).encode()
    partition = partition_of(encoded_key, SETTINGS.partitions)  # no hop through the rekeyed topic
    value = CODEC.encode(topic, claim)
    return Incoming(topic, partition, offset, encoded_key, value, (), at.timestamp())


def _batch(store: TaskStore, processor: Processor, records: list[Incoming]) -> None:
    """One batch as the arbiter runs it, its changelog acknowledged at once."""
    store.read_ahead(r.key for r in records if r.key is not None)
    for record in records:
        handled = processor.process(record, store.get)
        if handled.key is not None and handled.state is not None:
            store.put(handled.key, handled.state)
    store.journal()
    store.journaled()


def _processor(at: datetime) -> Processor:
    return Processor(SETTINGS, POLICY, CODEC, Metrics(POLICY), wall_clock=at.timestamp)


def _indexed(store: TaskStore, key: tuple[str, str]) -> list[int]:
    """The instants the store's due index holds for `key`."""
    encoded = state_key(*key).encode()
    return [due for due, k in store.due(FAR, 100) if k == encoded]


def _own_due(store: TaskStore, key: tuple[str, str]) -> int | None:
    """When the key's state itself says it is next due."""
    state = store.get(state_key(*key).encode())
    assert state is not None
    timer = timer_of(state)
    return timer.due if timer is not None else None


def test_a_conflict_opened_in_place_is_indexed_for_its_escalation(store: TaskStore) -> None:
    """crm says 12, then order-form says 15 (both systems of record): the conflict is due for
    its escalation (15 minutes), on every store."""
    _batch(store, _processor(NOW), [_record(0, SEATS, "crm", 12, NOW)])
    assert _own_due(store, SEATS) is None  # resolved, freshness none: nothing due
    assert _indexed(store, SEATS) == []
    later = NOW + timedelta(seconds=2)
    _batch(store, _processor(later), [_record(1, SEATS, "order-form", 15, later)])
    escalation = _own_due(store, SEATS)
    assert escalation is not None
    assert escalation - micros(later) == 15 * 60 * 1_000_000
    assert _indexed(store, SEATS) == [escalation]


def test_a_fresh_claim_after_expiry_is_indexed_again(store: TaskStore) -> None:
    """A claim, its freshness (60 s) run out, then a fresh claim: the key's timer goes from due
    to none and back, and the index follows it."""
    _batch(store, _processor(NOW), [_record(0, PAYMENT, "billing-api", "paid", NOW)])
    expiry = _own_due(store, PAYMENT)
    assert expiry is not None
    assert _indexed(store, PAYMENT) == [expiry]
    expired = NOW + timedelta(seconds=61)
    key = state_key(*PAYMENT).encode()
    tick = _processor(expired).tick(key, expired)  # the record the arbiter sends itself
    partition = partition_of(key, SETTINGS.partitions)
    received = Incoming(tick.topic, partition, 1, tick.key, tick.value, tick.headers)
    _batch(store, _processor(expired), [received])
    assert _own_due(store, PAYMENT) is None  # insufficient: nothing left to expire
    assert _indexed(store, PAYMENT) == []
    fresh = NOW + timedelta(seconds=90)
    _batch(store, _processor(fresh), [_record(2, PAYMENT, "billing-api", "paid", fresh)])
    expiry = _own_due(store, PAYMENT)
    assert expiry is not None
    assert _indexed(store, PAYMENT) == [expiry]


def test_a_tick_for_a_field_the_policy_dropped_clears_the_timer(
    store: TaskStore, tmp_path: Path
) -> None:
    """Nothing re-decides a key whose field left the policy: its tick takes it off the timers
    instead of leaving it due and handed out, read past at every tick after."""
    _batch(store, _processor(NOW), [_record(0, PAYMENT, "billing-api", "paid", NOW)])
    expiry = _own_due(store, PAYMENT)
    assert expiry is not None
    text = example_path("policy.yaml").read_text(encoding="utf-8")
    dropped = tmp_path / "policy.yaml"
    dropped.write_text(text.replace("  order.payment_status:\n", "  order.payment_state:\n"))
    policy = load_policy(dropped)
    assert policy.rules_for(PAYMENT[1]) is None
    expired = NOW + timedelta(seconds=61)
    key = state_key(*PAYMENT).encode()
    processor = Processor(SETTINGS, policy, CODEC, Metrics(policy), wall_clock=expired.timestamp)
    tick = processor.tick(key, expired)
    store.hand_out([(expiry, key)])  # as the schedule does when it sends the tick
    partition = partition_of(key, SETTINGS.partitions)
    received = Incoming(tick.topic, partition, 1, tick.key, tick.value, tick.headers)
    _batch(store, processor, [received])
    assert _own_due(store, PAYMENT) is None
    assert [k for _, k in store.store.due(FAR, 100)] == []
