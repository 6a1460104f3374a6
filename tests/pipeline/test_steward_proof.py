"""Records that change beliefs are proven as claims are: a resolution or an alias record is
accepted only when signed by a key the policy's `stewards` section binds to the steward it names
(where the section asks for it); else it is dead-lettered `unauthenticated`."""

from __future__ import annotations

from argparse import Namespace
from pathlib import Path

import pytest
import yaml

from streams.cli.signing import steward_signer
from streams.core.admission.authenticity import sign
from streams.core.keys.state import state_key
from streams.core.records.contracts import Resolution
from streams.core.records.errors import ClaimstreamError, ContractError
from streams.core.records.policy import Policy, load_policy
from streams.ops.metrics import Metrics
from streams.pipeline import Incoming, Processor
from streams.pipeline.authentication import STEWARD_HEADER, alias_payload
from streams.settings import Settings
from tests.support.builders import REPO
from tests.support.pipeline import CODEC, NOW, SECRET, owner, reason, run

TOPIC = "claims.resolutions"


def stewarded_policy(tmp_path: Path) -> Policy:
    data = yaml.safe_load((REPO / "examples" / "policy.yaml").read_text())
    data["stewards"] = {
        "required": True,
        "keys": [
            {
                "key_id": "ann-1",
                "algorithm": "hmac-sha256",
                "secret_env": "ANN_KEY",
                "sources": ["ann"],
            }
        ],
    }
    path = tmp_path / "stewarded.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_policy(path)


@pytest.fixture
def processor(tmp_path: Path) -> Processor:
    policy = stewarded_policy(tmp_path)
    env = {"ANN_KEY": SECRET}
    return Processor(Settings(), policy, CODEC, Metrics(policy), env=env, wall_clock=NOW.timestamp)


def resolution(decided_by: str = "ann") -> Resolution:
    return Resolution(
        resolution_id=f"r-{decided_by}",
        subject="inv:9",
        field="order.payment_status",
        value="paid",
        decided_by=decided_by,
        decided_at=NOW,
    )


def resolution_record(made: Resolution, signed_with: str | None) -> Incoming:
    value = CODEC.encode(TOPIC, made)
    headers = sign(value, "ann-1", "hmac-sha256", signed_with.encode(), NOW) if signed_with else []
    key = state_key(made.subject, made.field).encode()
    return Incoming(TOPIC, owner(key), 3, key, value, tuple(headers), NOW.timestamp())


def test_a_resolution_signed_by_its_stewards_key_is_applied(processor: Processor) -> None:
    handled = run(processor, resolution_record(resolution(), SECRET))
    assert reason(handled) is None
    assert handled.state is not None
    assert [r.decided_by for r in handled.state.resolutions] == ["ann"]


@pytest.mark.parametrize(
    ("made", "signed_with"),
    [
        pytest.param(resolution(), None, id="unsigned"),
        pytest.param(resolution("mallory"), SECRET, id="a-key-not-bound-to-the-steward-named"),
        pytest.param(resolution(), SECRET[::-1], id="a-wrong-secret"),
    ],
)
def test_an_unproven_resolution_is_dead_lettered_unauthenticated(
    processor: Processor, made: Resolution, signed_with: str | None
) -> None:
    handled = run(processor, resolution_record(made, signed_with))
    assert (reason(handled) or "").startswith("unauthenticated: ")
    assert handled.state is None


def test_without_a_stewards_section_the_steward_only_topic_proves_it(tmp_path: Path) -> None:
    policy = load_policy(REPO / "examples" / "policy.yaml")
    plain = Processor(Settings(), policy, CODEC, Metrics(policy), wall_clock=NOW.timestamp)
    assert reason(run(plain, resolution_record(resolution("anyone"), None))) is None


def alias_record(alias: str, subject: str, steward: str, signed_for: str | None) -> Incoming:
    signed = alias_payload(alias.encode(), (signed_for or subject).encode())
    headers = [*sign(signed, "ann-1", "hmac-sha256", SECRET.encode(), NOW)] if signed_for else []
    headers.append((STEWARD_HEADER, steward.encode()))
    topic = "claims.subject-aliases"
    return Incoming(topic, 0, 1, alias.encode(), subject.encode(), tuple(headers), NOW.timestamp())


def test_an_alias_record_needs_its_stewards_signature_over_alias_and_subject(
    processor: Processor,
) -> None:
    gate = processor.authentication
    gate.check_alias(alias_record("INV-9", "inv:9", "ann", "inv:9"), NOW)
    for unproven in (
        alias_record("INV-9", "inv:9", "ann", None),  # unsigned
        alias_record("INV-9", "inv:10", "ann", "inv:9"),  # the signature moved to another subject
        alias_record("INV-9", "inv:9", "mallory", "inv:9"),  # a steward the key is not bound to
    ):
        with pytest.raises(ContractError, match=r"unsigned|bad signature|spoofed"):
            gate.check_alias(unproven, NOW)


def test_claimstream_resolve_signs_as_its_steward(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The CLI signs at the wall clock's instant, so the worker judges it by the wall clock too
    # (the fixed NOW is the suite's start, which a long run leaves beyond max_age behind).
    stewarded = stewarded_policy(tmp_path)
    processor = Processor(Settings(), stewarded, CODEC, Metrics(stewarded), env={"ANN_KEY": SECRET})
    policy = tmp_path / "stewarded.yaml"
    monkeypatch.setenv("ANN_KEY", SECRET)
    args = Namespace(policy=policy, key_id="ann-1", key_env=None, by="ann")
    signer = steward_signer(args, Settings())
    made = resolution()
    value = CODEC.encode(TOPIC, made)
    key = state_key(made.subject, made.field).encode()
    signed = Incoming(TOPIC, owner(key), 4, key, value, tuple(signer(value)), NOW.timestamp())
    assert reason(run(processor, signed)) is None
    with pytest.raises(ClaimstreamError, match="bound to --by 'bob'"):
        steward_signer(Namespace(policy=policy, key_id="ann-1", key_env=None, by="bob"), Settings())
