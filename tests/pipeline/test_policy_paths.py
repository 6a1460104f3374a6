"""Every path that moves a key to a newer policy moves it alike: a claim after the switch, a tick
(the rollout sweep's), a late claim stamped before it; each equal to replay with the policy
history, and no path takes a key back to the older policy. A timer due while no policy decides
the key's field waits for one that does, and then fires as replay fires it."""

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
from streams.state.task import timer_of
from streams.wire.registry import FolderRegistry, WireCodec

SETTINGS = Settings()
CODEC = WireCodec(FolderRegistry())
T0 = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
SWITCH = T0 + timedelta(seconds=10)
SEATS = "contract.seats"
KEY = state_key("contract:7", SEATS).encode()


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


def _claim(
    n: int,
    source: str,
    value: object,
    at: datetime,
    subject: str = "contract:7",
    field: str = SEATS,
) -> tuple[Claim, Incoming]:
    claim = Claim(
        claim_id=f"c{n}",
        subject=subject,
        field=field,
        status="present",
        value=value,
        source=source,
        observed_at=at,
    )
    key = state_key(subject, field).encode()
    encoded = CODEC.encode(SETTINGS.topics.claims, claim)
    partition = partition_of(key, SETTINGS.partitions)
    return claim, Incoming(SETTINGS.topics.claims, partition, n, key, encoded, (), at.timestamp())


def _process(
    states: dict[bytes, KeyState],
    record: Incoming,
    wall: datetime,
    history: PolicyHistory = HISTORY,
) -> list[Decision]:
    processor = Processor(
        SETTINGS, history, CODEC, Metrics(history.latest.policy), wall_clock=wall.timestamp
    )
    handled: Handled = processor.process(record, states.get)
    if handled.key is not None and handled.state is not None:
        states[handled.key] = handled.state
    topic = SETTINGS.topics.decisions
    return [CODEC.decode(Decision, o.value) for o in handled.outputs if o.topic == topic]


def _tick(due: datetime, key: bytes = KEY, history: PolicyHistory = HISTORY) -> Incoming:
    processor = Processor(SETTINGS, history, CODEC, Metrics(history.latest.policy))
    tick = processor.tick(key, due)
    partition = partition_of(key, SETTINGS.partitions)
    return Incoming(tick.topic, partition, 99, tick.key, tick.value, tick.headers)


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


STATUS = "order.payment_status"
INVOICE = state_key("invoice:7", STATUS).encode()


def _status_policy(version: str, decided: bool) -> Policy:
    data = yaml.safe_load(example_path("policy.yaml").read_text())
    data["version"] = version
    if not decided:
        del data["fields"][STATUS]
    return policy_from_text(yaml.safe_dump(data), version)


def test_a_timer_due_while_its_field_is_not_decided_fires_once_it_is_as_replay_fires_it() -> None:
    """The payment status (fresh for 60 s) is paid at T0; from T0+30 s a policy without the field
    is in force, from T0+120 s one with it again. The timer due at T0+60 s waits off the index
    (nothing is sent then); the sweep's tick after the field is back fires it at its instant,
    then moves the key, as replay does."""
    history = PolicyHistory(
        [
            InForce(T0, _status_policy("A", True)),
            InForce(T0 + timedelta(seconds=30), _status_policy("without-status", False)),
            InForce(T0 + timedelta(seconds=120), _status_policy("C", True)),
        ]
    )
    paid, record = _claim(1, "billing-api", "paid", T0, "invoice:7", STATUS)
    states: dict[bytes, KeyState] = {}
    sent = _process(states, record, T0, history)
    due = states[INVOICE].next_check_at
    assert due is not None
    assert _process(states, _tick(due, INVOICE, history), due, history) == []
    assert (states[INVOICE].next_check_at, states[INVOICE].timer_waits) == (due, True)
    assert timer_of(states[INVOICE]) is None  # off the index: no tick finds it due again
    later = T0 + timedelta(seconds=125)
    sent += _process(states, _tick(T0 + timedelta(seconds=120), INVOICE, history), later, history)
    replayed = replay_with_clock([paid.model_dump_json()], history, later)
    assert [(d.decision_id, d.decided_at) for d in sent] == [
        (e.decision.decision_id, e.decision.decided_at) for e in replayed.emitted
    ]
    assert [(d.decided_at - T0, d.policy_version) for d in sent] == [
        (timedelta(0), "A"),
        (due - T0, "A"),
        (timedelta(seconds=120), "C"),
    ]
    assert not states[INVOICE].timer_waits
