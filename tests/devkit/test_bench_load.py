"""The latency phase's fresh claims are the claims the codec would encode, keyed by their key."""

from __future__ import annotations

from datetime import UTC, datetime

from streams.core.keys.state import state_key
from streams.core.records.contracts import Claim
from streams.devkit.bench.load import FRESH, FRESH_PREFIX, fresh_claims
from streams.devkit.bench.workload import CODEC, PAID, payment

TOPIC = "bench.claims"


def test_each_fresh_claim_is_the_codecs_bytes_of_its_keys_payment() -> None:
    observed_at = datetime(2026, 12, 1, 12, 0, 0, 123456, tzinfo=UTC)
    numbers = [0, 1, 42, 99_999, 999_999_999]
    for number, (key, value) in zip(
        numbers, fresh_claims(TOPIC, "a1b2c3", numbers, observed_at), strict=True
    ):
        subject = FRESH.format(tag="a1b2c3", number=number)
        expected = payment(subject, subject, observed_at)
        assert key == state_key(subject, PAID).encode()
        assert value == CODEC.encode(TOPIC, expected)
        assert CODEC.decode(Claim, value) == expected


def test_a_fresh_key_starts_with_its_runs_prefix_then_its_fixed_width_number() -> None:
    key, _ = next(iter(fresh_claims(TOPIC, "ffffff", [7], datetime.now(UTC))))
    prefix = FRESH_PREFIX.format(tag="ffffff").encode()
    assert key.startswith(prefix)
    assert key[len(prefix) :].split(b"|")[0] == b"000000007"
