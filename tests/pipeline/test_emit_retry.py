"""A record whose output records fail to build after its key's state changed in place: the retry
sends all the first attempt was to send (its escalation included) and applies the claim once; a
record that fails for good is dead-lettered, not applied, once its task has been reloaded."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.core.keys.journal import decode_state, encode_state
from streams.core.keys.state import KeyState, state_key
from streams.core.records.policy import Policy, load_policy
from streams.ops.metrics import Metrics
from streams.pipeline import Handled, Incoming, Processor, TaskCorrupted
from streams.pipeline.rekey import HEADER_DUE, HEADER_KIND, KIND_TICK, partition_of
from streams.settings import Settings
from streams.wire.registry import FolderRegistry, RegistryUnavailable, WireCodec
from tests.support.builders import REPO, claim

SETTINGS = Settings()
TOPICS = SETTINGS.topics
T0 = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)
KEY = state_key("invoice:42", "order.payment_status").encode()
PARTITION = partition_of(KEY, SETTINGS.partitions)


class FlakyRegistry:
    """The schema folder behind a registry that answers 503 (as `HttpRegistry` reports it) the
    first `failures` times a schema of `topic` is registered; `on_failure` runs at each."""

    def __init__(self, topic: str, failures: int, on_failure: Callable[[], None]) -> None:
        self.folder = FolderRegistry()
        self.subject = f"{topic}-value"
        self.failures = failures
        self.failed = 0
        self.on_failure = on_failure

    def register(self, subject: str, schema: dict[str, Any]) -> int:
        if subject == self.subject and self.failed < self.failures:
            self.failed += 1
            self.on_failure()
            raise RegistryUnavailable(f"POST /subjects/{subject} failed with HTTP 503", 503)
        return self.folder.register(subject, schema)

    def schema_for_id(self, schema_id: int) -> dict[str, Any]:
        return self.folder.schema_for_id(schema_id)


@pytest.fixture(scope="module")
def policy(tmp_path_factory: pytest.TempPathFactory) -> Policy:
    """The example policy, its payment status fresh for an hour: a conflict stays open past
    `escalate_after` (5m)."""
    data = yaml.safe_load((REPO / "examples" / "policy.yaml").read_text())
    data["fields"]["order.payment_status"]["freshness"] = "1h"
    path = tmp_path_factory.mktemp("policy") / "policy.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_policy(path)


class Worker:
    """A processor with its key states, storing each decided state as the arbiter does."""

    def __init__(self, policy: Policy, registry: Any = None) -> None:
        self.clock = [T0.timestamp()]
        self.metrics = Metrics(policy)
        codec = WireCodec(registry or FolderRegistry())
        self.processor = Processor(
            SETTINGS, policy, codec, self.metrics, wall_clock=lambda: self.clock[0]
        )
        self.states: dict[bytes, KeyState] = {}

    def process(self, record: Incoming) -> Handled:
        self.clock[0] = record.timestamp or self.clock[0]
        handled = self.processor.process(record, self.states.get)
        if handled.key is not None and handled.state is not None:
            self.states[handled.key] = handled.state
        return handled

    def claim_ids(self) -> list[str]:
        return [s.claim.claim_id for s in self.states[KEY].claims]

    def sample(self, name: str, labels: dict[str, str] | None = None) -> float:
        self.metrics.flush(self.processor.stages)
        return self.metrics.registry.get_sample_value(name, labels or {}) or 0.0


def arriving(offset: int, at: datetime, **fields: Any) -> Incoming:
    value = WireCodec(FolderRegistry()).encode(
        TOPICS.claims, claim(offset, observed_at=at - timedelta(seconds=1), **fields)
    )
    return Incoming(TOPICS.claims, PARTITION, offset, KEY, value, (), at.timestamp())


# Paid and overdue from two systems of record: a value conflict, open from T0. The third claim
# arrives with the conflict open for 6 minutes, past `escalate_after`: its timer fires first, at
# 5 minutes, on a copy of the key's state (the escalation is time's), then the claim applies.
CONFLICT = [arriving(1, T0), arriving(2, T0, value="overdue", source="billing-export")]
ESCALATING = arriving(3, T0 + timedelta(minutes=6))
# Paid in epoch 1, then overdue in epoch 2 from the same source: the claim changes the key's
# state in place and sends an epoch change (and a re-observation request) with its decision.
FIRST_EPOCH = arriving(1, T0, epoch=1)
NEXT_EPOCH = arriving(2, T0 + timedelta(minutes=1), value="overdue", epoch=2)


def sent(handled: Handled) -> list[tuple[str, bytes | None, bytes | None, Any]]:
    return [(o.topic, o.key, o.value, o.headers) for o in handled.outputs]


def test_a_claim_whose_escalation_fails_once_sends_it_on_the_retry_and_is_applied_once(
    policy: Policy,
) -> None:
    reference = Worker(policy)
    at_failure: list[list[str]] = []
    registry = FlakyRegistry(TOPICS.escalations, 1, lambda: at_failure.append(flaky.claim_ids()))
    flaky = Worker(policy, registry)
    for record in [*CONFLICT, ESCALATING]:
        assert sent(flaky.process(record)) == sent(reference.process(record))
    assert registry.failed == 1
    # The escalation is the timer's, fired on a copy: the stored state had not changed.
    assert at_failure == [["c1", "c2"]]
    escalations = [o for o in flaky.process(ESCALATING).outputs if o.topic == TOPICS.escalations]
    assert escalations == []  # a redelivery sends no second escalation
    assert flaky.claim_ids() == ["c1", "c2", "c3"]
    assert encode_state(flaky.states[KEY]) == encode_state(reference.states[KEY])
    assert flaky.sample("claimstream_processing_retries_total") == 1.0
    field = {"field": "order.payment_status"}
    assert flaky.sample("claimstream_escalations_total", field) == 1.0
    accepted = {**field, "source": "billing-api"}
    assert flaky.sample("claimstream_claims_accepted_total", accepted) == 3.0


def test_a_claim_whose_epoch_change_fails_once_after_changing_its_state_is_applied_once(
    policy: Policy,
) -> None:
    reference = Worker(policy)
    at_failure: list[list[str]] = []
    registry = FlakyRegistry(TOPICS.epoch_changes, 1, lambda: at_failure.append(flaky.claim_ids()))
    flaky = Worker(policy, registry)
    for record in [FIRST_EPOCH, NEXT_EPOCH]:
        assert sent(flaky.process(record)) == sent(reference.process(record))
    assert registry.failed == 1
    # It failed after the key's state had changed in place: c2 was in it already.
    assert at_failure == [["c1", "c2"]]
    # A redelivery is decided as the worker that never failed decides it.
    assert sent(flaky.process(NEXT_EPOCH)) == sent(reference.process(NEXT_EPOCH))
    assert flaky.claim_ids() == ["c1", "c2"]
    assert encode_state(flaky.states[KEY]) == encode_state(reference.states[KEY])
    assert flaky.sample("claimstream_processing_retries_total") == 1.0
    field = {"field": "order.payment_status"}
    accepted = {**field, "source": "billing-api"}
    for name, labels in [
        ("claimstream_epoch_changes_total", field),
        ("claimstream_claims_accepted_total", accepted),
    ]:
        assert flaky.sample(name, labels) == reference.sample(name, labels) > 0, name


def test_the_escalating_claim_sends_the_escalation_in_the_first_place(policy: Policy) -> None:
    """What the test above compares against does escalate on the third claim."""
    worker = Worker(policy)
    for record in CONFLICT:
        worker.process(record)
    topics = [o.topic for o in worker.process(ESCALATING).outputs]
    assert topics.count(TOPICS.escalations) == 1
    assert topics.count(TOPICS.decisions) == 0  # the belief (the conflict) stands


def test_a_claim_whose_records_fail_for_good_after_its_state_changed_is_dead_lettered_unapplied(
    policy: Policy,
) -> None:
    attempts = SETTINGS.retry_attempts
    registry = FlakyRegistry(TOPICS.epoch_changes, attempts, lambda: None)
    worker = Worker(policy, registry)
    worker.process(FIRST_EPOCH)
    journaled = encode_state(worker.states[KEY])  # what the task's changelog holds
    with pytest.raises(TaskCorrupted, match=r"@2: building its records failed"):
        worker.process(NEXT_EPOCH)
    assert registry.failed == attempts
    # The arbiter reloads the task from its changelog and reads the record again.
    worker.states[KEY] = decode_state(journaled)
    handled = worker.process(NEXT_EPOCH)
    assert handled.state is None
    (letter,) = handled.outputs
    headers = {name: value.decode() for name, value in letter.headers}
    assert (letter.topic, letter.key, letter.value) == (TOPICS.dead_letters, KEY, NEXT_EPOCH.value)
    assert headers["claimstream.error.reason"] == "processing_failed"
    assert headers["claimstream.error.exception"] == "RegistryUnavailable"
    assert headers["claimstream.error.attempts"] == str(attempts)
    assert encode_state(worker.states[KEY]) == journaled
    # Read a third time (the record is not remembered any longer), or a later claim: decided.
    later = arriving(4, T0 + timedelta(minutes=2), value="overdue", epoch=2)
    topics = [o.topic for o in worker.process(later).outputs]
    assert topics.count(TOPICS.epoch_changes) == 1
    assert worker.claim_ids() == ["c1", "c4"]


def test_a_first_claim_of_a_key_that_fails_for_good_is_dead_lettered_without_a_reload(
    policy: Policy,
) -> None:
    """Nothing was stored for the key: its new state is dropped with the record."""
    attempts = SETTINGS.retry_attempts
    worker = Worker(policy, FlakyRegistry(TOPICS.decisions, attempts, lambda: None))
    handled = worker.process(CONFLICT[0])
    assert handled.state is None
    assert [o.topic for o in handled.outputs] == [TOPICS.dead_letters]
    assert worker.states == {}


def test_a_tick_that_fails_for_good_is_dead_lettered_its_key_untouched(policy: Policy) -> None:
    """A tick re-decides on a copy of the key's state: nothing changed in place."""
    attempts = SETTINGS.retry_attempts
    worker = Worker(policy, FlakyRegistry(TOPICS.escalations, attempts, lambda: None))
    for record in CONFLICT:
        worker.process(record)
    before = encode_state(worker.states[KEY])
    due = T0 + timedelta(minutes=6)
    headers = ((HEADER_KIND, KIND_TICK), (HEADER_DUE, due.isoformat().encode()))
    tick = Incoming(TOPICS.rekeyed, PARTITION, 9, KEY, None, headers, due.timestamp())
    handled = worker.process(tick)
    assert [o.topic for o in handled.outputs] == [TOPICS.dead_letters]
    assert encode_state(worker.states[KEY]) == before


def _once_failing(emit: Callable[..., Handled], failing_call: int) -> Callable[..., Handled]:
    calls = [0]

    def failing_once(*args: Any) -> Handled:
        calls[0] += 1
        if calls[0] == failing_call:
            raise RuntimeError("injected: building the records failed")
        return emit(*args)

    return failing_once


ARRIVALS = st.lists(
    st.tuples(
        st.sampled_from(["claim", "claim", "claim", "tick"]),
        st.integers(min_value=0, max_value=3),  # claim_id: repeats are redeliveries or disputes
        st.sampled_from(["paid", "overdue", "unpaid"]),
        st.sampled_from(["billing-api", "billing-export", "crm", "reporting-replica"]),
        st.sampled_from([0, 30, 360]),  # seconds after the previous record
    ),
    min_size=1,
    max_size=10,
)


@settings(max_examples=150, deadline=None)
@given(arrivals=ARRIVALS, failing_call=st.integers(min_value=1, max_value=10))
def test_a_failure_building_any_records_changes_nothing_of_what_is_sent_or_kept(
    policy: Policy, arrivals: list[tuple[str, int, str, str, int]], failing_call: int
) -> None:
    """Whichever record's records fail to build once, whatever the key's history (conflicts,
    escalations, redeliveries, disputed ids, ticks), the run sends and keeps exactly what a run
    without the failure does: the same records per input record, the same state as it stood
    before each (what a settlement judges) and after."""
    reference, flaky = Worker(policy), Worker(policy)
    outputs = flaky.processor.outputs
    outputs.emit = _once_failing(outputs.emit, failing_call)  # type: ignore[method-assign]
    at = T0
    for offset, (kind, n, value, source, later_s) in enumerate(arrivals):
        at += timedelta(seconds=later_s)
        if kind == "tick":
            headers = ((HEADER_KIND, KIND_TICK), (HEADER_DUE, at.isoformat().encode()))
            record = Incoming(TOPICS.rekeyed, PARTITION, offset, KEY, None, headers, at.timestamp())
        else:
            record = arriving(offset, at, claim_id=f"c{n}", value=value, source=source)
        expected, handled = reference.process(record), flaky.process(record)
        assert sent(handled) == sent(expected)
        assert [a.decision_id for a in handled.emitted] == [a.decision_id for a in expected.emitted]
        assert _encoded(handled.opened) == _encoded(expected.opened)
        assert _encoded(flaky.states.get(KEY)) == _encoded(reference.states.get(KEY))


def _encoded(state: KeyState | None) -> bytes | None:
    return encode_state(state) if state is not None else None
