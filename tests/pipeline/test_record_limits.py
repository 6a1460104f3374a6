"""Records past the contract's bounds, through a `Processor`: a claim whose replica, scope,
lineage or attribute is too large is dead-lettered `too_large` with its record; a record too
large to carry with the error headers is dead-lettered without it, saying where it stays; an
overflowing unit conversion is `invalid_value`."""

from __future__ import annotations

from typing import Any

import pytest

from streams.core.keys.state import state_key
from streams.core.records.contracts import Claim
from streams.core.records.policy import load_policy
from streams.ops.metrics import Metrics
from streams.pipeline import Incoming, Processor
from streams.settings import Settings
from tests.support.builders import REPO
from tests.support.pipeline import CODEC, NOW, owner, reason, run

POLICY = load_policy(REPO / "examples" / "policy.yaml")
SETTINGS = Settings()
PROCESSOR = Processor(SETTINGS, POLICY, CODEC, Metrics(POLICY), wall_clock=NOW.timestamp)
LARGE = "x" * 180_000  # a replica of 150-200 KB, as an upstream bug sent them


def _incoming(claim: Claim, topic: str = "claims.tools") -> Incoming:
    key = state_key(claim.subject, claim.field).encode()
    value = CODEC.encode(topic, claim)
    return Incoming(topic, owner(key), 3, key, value, (), NOW.timestamp())


def _claim(**fields: Any) -> Claim:
    data: dict[str, Any] = {
        "claim_id": "c-large",
        "subject": "inv:large",
        "field": "order.payment_status",
        "status": "present",
        "value": "paid",
        "source": "billing-api",
        "observed_at": NOW,
    }
    return Claim.model_validate({**data, **fields})


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"replica": LARGE}, "replica is 180,000 characters"),
        ({"scope": LARGE}, "scope is 180,000 characters"),
        ({"lineage": LARGE}, "lineage is 180,000 characters"),
        ({"attributes": {"note": LARGE}}, "attribute 'note' is 180,000 characters"),
        ({"trace_id": LARGE}, "trace_id is 180,000 characters"),
        ({"field": "customer.shipping_address", "value": LARGE}, "the value is 180,000"),
    ],
)
def test_a_claim_past_a_bound_is_dead_lettered_too_large_with_its_record(
    fields: dict[str, Any], named: str
) -> None:
    incoming = _incoming(_claim(**fields))
    handled = run(PROCESSOR, incoming)
    (letter,) = handled.outputs
    assert letter.topic == SETTINGS.topics.dead_letters
    assert (letter.key, letter.value) == (incoming.key, incoming.value)
    why = reason(handled)
    assert why is not None
    assert why.startswith("too_large: "), why
    assert named in why, why
    assert handled.state is None  # nothing of it is kept


def test_an_overflowing_conversion_is_dead_lettered_invalid_value() -> None:
    claim = _claim(field="service.retry_timeout", value=1e308, unit="h", source="config-service")
    why = reason(run(PROCESSOR, _incoming(claim)))
    assert why is not None
    assert why.startswith("invalid_value: service.retry_timeout: 1e+308 h is beyond"), why


def test_a_record_too_large_to_dead_letter_whole_leaves_its_key_and_value_where_they_are() -> None:
    value = b"\x00" * (SETTINGS.max_record_bytes - 1000)  # not Avro; the headers pass the limit
    incoming = Incoming("claims.tools", 2, 41, b"k", value, (("trace", b"t" * 900),), None)
    (letter,) = run(PROCESSOR, incoming).outputs
    assert (letter.key, letter.value) == (None, None)
    headers = dict(letter.headers)
    assert headers["claimstream.error.reason"] == b"unknown_schema"  # no Confluent framing
    assert b"are at claims.tools[2]@41" in headers["claimstream.error.dropped"]
    assert "trace" not in headers  # the record's own headers stay with it
    small = Incoming("claims.tools", 2, 42, b"k", b"\x00" * 100, (), None)
    (kept,) = run(PROCESSOR, small).outputs
    assert (kept.key, kept.value) == (b"k", small.value)
