"""The journal's bytes do not move: states grown from a fixed history encode exactly as a
recorded copy (tests/core/keys/golden/journal-v4.json, written by the code that first stored them),
the copy recorded before version 4 stored a key's policy version
(journal-v4-before-policy-version.json) reads back and encodes to its own bytes, and the copy
version 3 recorded in JSON (journal-v3.json) reads back as the same states.

A changelog written before a change must read the same after it, and a state journaled again
must not change its bytes (the store compares them); the decision ids inside are held too.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import msgspec
import pytest

from streams.core.admission.intake import admit, admit_resolution, parse_claim
from streams.core.keys.journal import decode_state, encode_state
from streams.core.keys.state import KeyState, state_key
from streams.core.keys.transitions import add_claim, add_resolution, advance
from streams.core.records.contracts import Resolution
from streams.core.records.errors import ContractError
from streams.core.records.policy import Policy, load_policy
from streams.devkit.synthetic import generate_claims
from tests.support.builders import NOW, REPO, claim_with_every_field

POLICY: Policy = load_policy(REPO / "examples" / "policy.yaml")
GOLDEN = Path(__file__).parent / "golden" / "journal-v4.json"
GOLDEN_UNVERSIONED = Path(__file__).parent / "golden" / "journal-v4-before-policy-version.json"
GOLDEN_V3 = Path(__file__).parent / "golden" / "journal-v3.json"


def journals() -> dict[str, bytes]:
    """Each key's encoded state after generated claims (epochs, reused ids, assertions, no
    evidence), resolutions of the open keys, time passing past escalation, and one claim with
    every field set."""
    states: dict[str, KeyState] = {}
    now = NOW
    generated = generate_claims(
        400, now, seed=19, subjects=40, epochs=True, reused_id_share=0.1, bad_share=0.0
    )
    for n, data in enumerate(generated):
        now = NOW + timedelta(seconds=n // 20, microseconds=n)
        try:
            admitted = admit(parse_claim(data), POLICY, now)
        except ContractError:
            continue
        rules = POLICY.rules_for(admitted.claim.field)
        assert rules is not None
        key = state_key(admitted.claim.subject, admitted.claim.field)
        states[key] = add_claim(states.get(key), admitted, rules, POLICY.version, now).state
    later = now + timedelta(minutes=20)
    for n, (key, state) in enumerate(sorted(states.items())):
        rules = POLICY.rules_for(state.field)
        assert rules is not None
        states[key] = advance(state, rules, POLICY.version, later).state
        current = states[key].current
        if n % 3 == 0 and current is not None and current.outcome != "resolved":
            value = next((a.claim.value for a in state.claims if a.claim.value is not None), None)
            resolution = Resolution.model_validate(
                {
                    "resolution_id": f"r{n}",
                    "subject": state.subject,
                    "field": state.field,
                    "status": "present" if value is not None else "not_found",
                    "value": value,
                    "unit": "ms" if state.field == "api.latency" and value is not None else None,
                    "decided_by": "ann",
                    "note": "checked the ledger" if n % 2 else "",
                    "decided_at": later,
                    "resolves_decision_id": current.decision_id,
                }
            )
            admitted_resolution = admit_resolution(resolution, POLICY, later)
            resolved = add_resolution(
                states[key], admitted_resolution, rules, POLICY.version, later
            )
            states[key] = resolved.state
    rules = POLICY.rules_for("api.latency")
    assert rules is not None
    full = claim_with_every_field("full")
    state = add_claim(None, admit(full, POLICY, NOW), rules, POLICY.version, NOW).state
    states[state_key(full.subject, full.field)] = state
    return {key: encode_state(state) for key, state in sorted(states.items())}


def _digest(encoded: dict[str, bytes]) -> str:
    hashed = hashlib.sha256()
    for key, data in encoded.items():
        hashed.update(f"{key}\n".encode() + data + b"\n")
    return hashed.hexdigest()


def _samples(encoded: dict[str, bytes]) -> dict[str, dict[str, str]]:
    """A few states written out in full, the first of each kind seen: their bytes in hex, and
    for a reader what they hold, as JSON."""
    wanted = ("resolutions", "escalated", "disputed", "V", "L", "amount_minor")
    chosen: dict[str, dict[str, str]] = {}
    for name in wanted:
        mark = msgspec.msgpack.encode(name)
        key = next(k for k, data in encoded.items() if mark in data)
        data = encoded[key]
        shown = msgspec.json.encode(msgspec.msgpack.decode(data)).decode()
        chosen[key] = {"hex": data.hex(), "holds": shown}
    return chosen


def test_the_journal_bytes_are_the_recorded_ones() -> None:
    golden = json.loads(GOLDEN.read_text(encoding="utf-8"))
    encoded = journals()
    for key, sample in golden["samples"].items():
        assert encoded[key].hex() == sample["hex"]
    assert len(encoded) == golden["keys"]
    assert _digest(encoded) == golden["digest"]


@pytest.mark.parametrize("recorded", [GOLDEN, GOLDEN_UNVERSIONED], ids=lambda p: p.stem)
def test_the_recorded_states_read_back_and_encode_to_the_same_bytes(recorded: Path) -> None:
    golden = json.loads(recorded.read_text(encoding="utf-8"))
    for sample in golden["samples"].values():
        data = bytes.fromhex(sample["hex"])
        assert encode_state(decode_state(data)) == data


def test_a_state_recorded_before_its_policy_version_reads_back_without_one() -> None:
    golden = json.loads(GOLDEN_UNVERSIONED.read_text(encoding="utf-8"))
    encoded = journals()
    for key, sample in golden["samples"].items():
        state = decode_state(bytes.fromhex(sample["hex"]))
        assert state.policy_version is None
        assert encode_state(replace(state, policy_version=POLICY.version)) == encoded[key]


def test_the_states_version_3_recorded_read_back_as_the_same_states() -> None:
    golden = json.loads(GOLDEN_V3.read_text(encoding="utf-8"))
    encoded = journals()
    for key, data in golden["samples"].items():
        state = replace(decode_state(data.encode()), policy_version=POLICY.version)
        assert encode_state(state) == encoded[key]


if __name__ == "__main__":  # records the copy: only for a deliberate change of the format
    recorded = journals()
    GOLDEN.write_text(
        json.dumps(
            {"keys": len(recorded), "digest": _digest(recorded), "samples": _samples(recorded)},
            indent=1,
            sort_keys=True,
        )
        + "\n",
        encoding="utf-8",
    )
