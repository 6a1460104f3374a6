"""A record applies after its key's timers that came due before it: the decisions a worker emits
do not depend on whether its ticks went out on time. A late tick changes nothing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from streams.core.keys.state import KeyState, state_key
from streams.core.records.contracts import Claim, Decision, Outcome
from streams.core.records.policy import load_policy
from streams.ops.metrics import Metrics
from streams.packaged import example_path
from streams.pipeline import Handled, Incoming, Processor
from streams.pipeline.rekey import partition_of
from streams.settings import Settings
from streams.wire.registry import FolderRegistry, WireCodec

POLICY = load_policy(example_path("policy.yaml"))  # order.payment_status: freshness 60s
SETTINGS = Settings()
CODEC = WireCodec(FolderRegistry())
T0 = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
KEY = state_key("invoice:42", "order.payment_status").encode()
PARTITION = partition_of(KEY, SETTINGS.partitions)


def _claim(n: int, at: datetime) -> Incoming:
    claim = Claim(
        claim_id=f"c{n}",
        subject="invoice:42",
        field="order.payment_status",
        status="present",
        value="paid",
        source="billing-api",
        observed_at=at,
    )
    value = CODEC.encode(SETTINGS.topics.claims, claim)
    return Incoming(SETTINGS.topics.claims, PARTITION, n, KEY, value, (), at.timestamp())


def _process(states: dict[bytes, KeyState], record: Incoming, at: datetime) -> Handled:
    processor = Processor(SETTINGS, POLICY, CODEC, Metrics(POLICY), wall_clock=at.timestamp)
    handled = processor.process(record, states.get)
    if handled.key is not None and handled.state is not None:
        states[handled.key] = handled.state
    return handled


def _decisions(handled: Handled) -> list[tuple[Outcome, datetime]]:
    topic = SETTINGS.topics.decisions
    decided = [CODEC.decode(Decision, o.value) for o in handled.outputs if o.topic == topic]
    return [(d.outcome, d.decided_at) for d in decided]


def test_a_claim_after_the_keys_expiry_sends_the_expiry_first_at_its_instant() -> None:
    states: dict[bytes, KeyState] = {}
    _process(states, _claim(1, T0), T0)
    later = T0 + timedelta(seconds=90)  # no tick went out at 60 s
    handled = _process(states, _claim(2, later), later)
    expiry = T0 + timedelta(seconds=60, microseconds=1)
    assert _decisions(handled) == [(Outcome.INSUFFICIENT, expiry), (Outcome.RESOLVED, later)]
    assert [a.outcome for a in handled.emitted] == [Outcome.INSUFFICIENT, Outcome.RESOLVED]


def test_a_tick_for_a_timer_a_record_already_fired_sends_nothing() -> None:
    states: dict[bytes, KeyState] = {}
    _process(states, _claim(1, T0), T0)
    later = T0 + timedelta(seconds=90)
    _process(states, _claim(2, later), later)
    before = states[KEY]
    expiry = T0 + timedelta(seconds=60, microseconds=1)
    processor = Processor(SETTINGS, POLICY, CODEC, Metrics(POLICY), wall_clock=later.timestamp)
    tick = processor.tick(KEY, expiry)  # handed out at 60 s, read after the claim
    late = Incoming(tick.topic, PARTITION, 3, tick.key, tick.value, tick.headers)
    handled = _process(states, late, later)
    assert handled.outputs == []
    assert handled.state is None
    assert states[KEY] is before
