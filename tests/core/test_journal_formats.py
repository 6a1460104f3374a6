"""The state formats a release reads: every version it wrote, and no other (a newer release's
record is refused with what to do, never misread as the current form)."""

from __future__ import annotations

import json

import pytest

from streams.core.intake import admit
from streams.core.journal import UnknownStateFormat, decode_state, encode_state
from streams.core.keystate import KeyState, Limits, add_claim
from streams.core.policy import Policy, load_policy
from tests.core.conftest import NOW, REPO, claim

POLICY: Policy = load_policy(REPO / "examples" / "policy.yaml")


def journaled(version: object) -> bytes:
    """A real key's journaled state with its version replaced."""
    rules = POLICY.rules_for("order.payment_status")
    assert rules is not None
    step = add_claim(None, admit(claim(1), POLICY, NOW), rules, POLICY.version, NOW, Limits())
    assert isinstance(step.state, KeyState)
    raw = json.loads(encode_state(step.state))
    assert raw["version"] == 3
    return json.dumps({**raw, "version": version}).encode()


def test_the_current_version_reads_back() -> None:
    assert decode_state(journaled(3)).claims[0].claim.claim_id == "c1"


def test_a_newer_version_is_refused_with_what_to_do() -> None:
    with pytest.raises(UnknownStateFormat) as refused:
        decode_state(journaled(4))
    assert refused.value.version == 4
    assert str(refused.value) == (
        "key state format v4 is newer than this release reads (v1-v3): upgrade, or restore "
        "from a changelog written by this release (runbook: Upgrades and rollbacks)"
    )


@pytest.mark.parametrize("version", [0, -1, "3", 3.0, True, [3]])
def test_a_version_no_release_wrote_is_refused(version: object) -> None:
    with pytest.raises(UnknownStateFormat, match="is not one this release reads"):
        decode_state(journaled(version))
