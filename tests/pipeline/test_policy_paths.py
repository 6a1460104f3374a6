"""Every path that moves a key to a newer policy moves it alike: a claim after the switch, a tick
(the rollout sweep's), a late claim stamped before it; each equal to replay with the policy
history, and no path takes a key back to the older policy."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import yaml

from streams.core.keys.state import KeyState, state_key
from streams.core.reading.replay import replay_with_clock
from streams.core.records.contracts import Claim, Decision
from streams.core.records.policy import Policy, policy_from_text
from streams.core.timeline.rollout import InForce, PolicyHistory
from streams.ops.metrics import Metrics
from streams.packaged import example_path
from streams.pipeline import Handled, Incoming, Processor
from streams.pipeline.rekey import partition_of
from streams.settings import Settings
from streams.wire.registry import FolderRegistry, WireCodec

SETTINGS = Settings()
CODEC = WireCodec(FolderRegistry())
T0 = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
SWITCH = T0 + timedelta(seconds=10)
SEATS = "contract.seats"
KEY = state_key("contract:7", SEATS).encode()
PARTITION = partition_of(KEY, SETTINGS.partitions)


def _policy(version: str, crm: str, order_form: str) -> Policy:
    data = yaml.safe_load(example_path("policy.yaml").read_text())
    data["version"] = version
    data["fields"][SEATS]["authorities"] = {"crm": crm, "order-form": order_form}
    return policy_from_text(yaml.safe_dump(data), version)


HISTORY = PolicyHistory(
    [
        InForce(T0, _policy("A", "system_of_record", "cached")),
        InForce(SWITCH, _policy("B", "cached", "system_of_record")),
    ]
)


def _claim(n: int, source: str, value: int, at: datetime) -> tuple[Claim, Incoming]:
    claim = Claim(
        claim_id=f"c{n}",
        subject="contract:7",
        field=SEATS,
        status="present",
        value=value,
        source=source,
        observed_at=at,
    )
    encoded = CODEC.encode(SETTINGS.topics.claims, claim)
    return claim, Incoming(SETTINGS.topics.claims, PARTITION, n, KEY, encoded, (), at.timestamp())


def _process(states: dict[bytes, KeyState], record: Incoming, wall: datetime) -> list[Decision]:
    processor = Processor(
        SETTINGS, HISTORY, CODEC, Metrics(HISTORY.latest.policy), wall_clock=wall.timestamp
    )
    handled: Handled = processor.process(record, states.get, lambda subject: None)
    if handled.key is not None and handled.state is not None:
        states[handled.key] = handled.state
    topic = SETTINGS.topics.decisions
    return [CODEC.decode(Decision, o.value) for o in handled.outputs if o.topic == topic]


def _tick(due: datetime) -> Incoming:
    processor = Processor(SETTINGS, HISTORY, CODEC, Metrics(HISTORY.latest.policy))
    tick = processor.tick(KEY, due)
    return Incoming(tick.topic, PARTITION, 99, tick.key, tick.value, tick.headers)


def test_a_tick_after_the_switch_moves_a_quiet_key_as_replay_does() -> None:
    states: dict[bytes, KeyState] = {}
    crm, first = _claim(1, "crm", 12, T0)
    form, second = _claim(2, "order-form", 15, T0 + timedelta(seconds=1))
    sent = _process(states, first, T0) + _process(states, second, T0 + timedelta(seconds=1))
    later = SWITCH + timedelta(seconds=5)
    sent += _process(states, _tick(later), later)
    replayed = replay_with_clock([crm.model_dump_json(), form.model_dump_json()], HISTORY, later)
    assert [(d.decision_id, d.decided_at) for d in sent] == [
        (e.decision.decision_id, e.decision.decided_at) for e in replayed.emitted
    ]
    assert (sent[-1].policy_version, sent[-1].value, sent[-1].decided_at) == ("B", 15, SWITCH)
    assert states[KEY].policy_version == "B"


def test_a_claim_after_the_switch_moves_the_key_first_at_the_switch() -> None:
    states: dict[bytes, KeyState] = {}
    _, first = _claim(1, "crm", 12, T0)
    _process(states, first, T0)
    at = SWITCH + timedelta(seconds=3)
    _, after = _claim(2, "order-form", 15, at)
    sent = _process(states, after, at)
    assert [(d.policy_version, d.decided_at) for d in sent] == [("B", SWITCH), ("B", at)]


def test_a_late_claim_stamped_before_the_switch_does_not_take_the_key_back() -> None:
    states: dict[bytes, KeyState] = {}
    _, first = _claim(1, "crm", 12, T0)
    _process(states, first, T0)
    moved = SWITCH + timedelta(seconds=3)
    _process(states, _tick(moved), moved)
    assert states[KEY].policy_version == "B"
    _, late = _claim(2, "order-form", 15, SWITCH - timedelta(seconds=2))
    sent = _process(states, late, moved)
    assert states[KEY].policy_version == "B"
    assert [(d.policy_version, d.value) for d in sent] == [("B", 15)]
    assert all(
        a.authority.value == "system_of_record"
        for a in states[KEY].claims
        if a.claim.source == "order-form"
    )
