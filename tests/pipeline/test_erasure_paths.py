"""An erasure through the processor, no broker: a record about the erased subject stamped
before the erasure never counts and is never dead-lettered again, even one that would be
refused; the key held at the instant is dropped by its tick, sending one `erased` decision and
a tombstone; a claim after it is decided as new on a fresh key."""

from __future__ import annotations

from datetime import timedelta

from streams.core.keys.state import KeyState, state_key
from streams.core.records.contracts import Claim, Decision, Outcome
from streams.core.records.policy import load_policy
from streams.core.timeline.erasures import Erasure
from streams.ops.metrics import Metrics
from streams.pipeline import Handled, Incoming, Processor
from streams.pipeline.rekey import HEADER_DUE, HEADER_KIND, KIND_TICK
from streams.settings import Settings
from tests.support.builders import REPO
from tests.support.pipeline import CODEC, NOW, owner

POLICY = load_policy(REPO / "examples" / "policy.yaml")
FIELD = "order.payment_status"
ERASED_AT = NOW - timedelta(seconds=10)


def _processor() -> Processor:
    processor = Processor(Settings(), POLICY, CODEC, Metrics(POLICY), wall_clock=NOW.timestamp)
    erasure = Erasure("e1", "user:8812", ERASED_AT, ERASED_AT, "dpo", "Art. 17")
    processor.clock.adopt_erasures([erasure])
    return processor


def _claim(n: int, at_s: float, source: str = "billing-api") -> Incoming:
    claim = Claim(
        claim_id=f"c{n}", subject="user:8812", field=FIELD, status="present", value="paid",
        source=source, observed_at=NOW + timedelta(seconds=at_s),
    )  # fmt: skip
    key = state_key(claim.subject, claim.field).encode()
    value = CODEC.encode("claims.tools", claim)
    stamped = (NOW + timedelta(seconds=at_s)).timestamp()
    return Incoming("claims.tools", owner(key), n, key, value, (), stamped)


def test_a_record_from_before_the_erasure_never_counts_nor_is_dead_lettered_again() -> None:
    processor, states = _processor(), dict[bytes, KeyState]()
    for record in (_claim(1, -20), _claim(2, -20, source="nobody-knows")):  # the second: refused
        handled = processor.process(record, states.get)
        assert (handled.outputs, handled.emitted, handled.state) == ([], [], None)
    passed_over = processor.metrics.registry.get_sample_value("claimstream_erased_records_total")
    assert passed_over == 2


def test_the_key_held_at_the_instant_is_dropped_once_and_a_later_claim_is_new() -> None:
    processor, states = _processor(), dict[bytes, KeyState]()
    processor.clock.adopt_erasures([])  # the key is decided before the erasure is known
    first = processor.process(_claim(1, -20), states.get)
    assert first.key is not None
    assert first.state is not None
    states[first.key] = first.state
    processor = _processor()
    tick = Incoming(
        "claimstream-rekeyed", owner(first.key), 9, first.key, None,
        ((HEADER_KIND, KIND_TICK), (HEADER_DUE, NOW.isoformat().encode())), NOW.timestamp(),
    )  # fmt: skip
    dropped = processor.process(tick, states.get)
    assert (dropped.dropped, dropped.state) == (True, None)
    (sent,) = dropped.outputs
    decision = CODEC.decode(Decision, sent.value)
    assert (decision.outcome, decision.value, decision.evidence) == (Outcome.ERASED, None, ())
    assert (decision.resolution_id, decision.decided_at) == ("e1", ERASED_AT)
    # A claim sent after it, before the tick reached the key: dropped first, then new data.
    again = processor.process(_claim(3, 0), states.get)
    outcomes = [
        CODEC.decode(Decision, o.value).outcome for o in again.outputs if o.topic == sent.topic
    ]
    assert outcomes == [Outcome.ERASED, Outcome.RESOLVED]
    assert isinstance(again, Handled)
    assert again.state is not None
    assert [c.claim.claim_id for c in again.state.claims] == ["c3"]
