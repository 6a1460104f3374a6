"""The state formats a release reads: every version it wrote, and no other (a newer release's
record is refused with what to do, never misread as the current form)."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from streams.core.admission.intake import admit
from streams.core.keys.journal import UnknownStateFormat, decode_state, encode_state
from streams.core.keys.state import KeyState, Limits
from streams.core.keys.transitions import add_claim
from streams.core.records.policy import Policy, load_policy
from tests.support.builders import NOW, REPO, claim

POLICY: Policy = load_policy(REPO / "examples" / "policy.yaml")


def _state() -> KeyState:
    """A real key's state."""
    rules = POLICY.rules_for("order.payment_status")
    assert rules is not None
    step = add_claim(None, admit(claim(1), POLICY, NOW), rules, POLICY.version, NOW, Limits())
    assert isinstance(step.state, KeyState)
    return step.state


def _record() -> dict[str, Any]:
    """That state journaled, as the record it encodes."""
    raw: dict[str, Any] = msgspec.msgpack.decode(encode_state(_state()))
    assert raw["version"] == 4
    return raw


def journaled(version: object) -> bytes:
    """That state in MessagePack, the current form, with its version replaced."""
    return msgspec.msgpack.encode({**_record(), "version": version})


def in_json(version: object) -> bytes:
    """That state in JSON, the form of versions 1 to 3, with its version replaced."""
    return json.dumps({**_record(), "version": version}).encode()


@pytest.mark.parametrize("version", [4, 5])
def test_the_current_versions_read_back(version: int) -> None:
    assert decode_state(journaled(version)).claims[0].claim.claim_id == "c1"


def test_version_3_reads_back_from_its_json() -> None:
    read = decode_state(in_json(3))
    assert read == _state()
    assert encode_state(read) == encode_state(_state())  # journaled again in the current form


def test_a_newer_version_is_refused_with_what_to_do() -> None:
    with pytest.raises(UnknownStateFormat) as refused:
        decode_state(journaled(6))
    assert refused.value.version == 6
    assert str(refused.value) == (
        "key state format v6 is newer than this release reads (v1-v5): upgrade, or restore "
        "from a changelog written by this release (runbook: Upgrades and rollbacks)"
    )


@pytest.mark.parametrize("version", [0, -1, 3, "4", 4.0, True, [4]])
def test_a_version_no_release_wrote_in_messagepack_is_refused(version: object) -> None:
    with pytest.raises(UnknownStateFormat, match="is not one this release reads"):
        decode_state(journaled(version))


@pytest.mark.parametrize("version", [0, -1, 4, "3", 3.0, True, [3]])
def test_a_version_no_release_wrote_in_json_is_refused(version: object) -> None:
    with pytest.raises(UnknownStateFormat, match="is not one this release reads"):
        decode_state(in_json(version))


def test_a_malformed_record_of_the_current_version_says_what_is_wrong() -> None:
    with pytest.raises(msgspec.ValidationError, match="claims"):
        decode_state(msgspec.msgpack.encode({**_record(), "claims": "none"}))
