"""An alias change previewed against the keys it touches: what would move where and what each key
would decide, equal to what replay decides once the change takes effect at that instant; a
retraction previews the split back; a change that would close a cycle is refused; no state
handed in is changed."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from streams.core.admission.intake import admit
from streams.core.keys.journal import encode_state
from streams.core.keys.state import KeyState, state_key
from streams.core.keys.transitions import add_claim
from streams.core.reading.alias_preview import alias_preview, render, touched_keys
from streams.core.reading.replay import replay_with_clock
from streams.core.records.contracts import Claim
from streams.core.records.errors import AliasError
from streams.core.timeline.aliases import AliasChange, AliasHistory, regroup_keys
from streams.core.timeline.rollout import PolicyHistory
from tests.support.builders import POLICY, WIDE

T0 = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
NOW = T0 + timedelta(hours=1)
SEATS = "contract.seats"
HISTORY = PolicyHistory.of(POLICY)


def _claim(n: int, subject: str, source: str, value: int) -> dict[str, Any]:
    return {
        "claim_id": f"c{n}",
        "subject": subject,
        "field": SEATS,
        "status": "present",
        "value": value,
        "source": source,
        "observed_at": (T0 + timedelta(seconds=n)).isoformat(),
    }


CLAIMS = [_claim(0, "Acme Corp", "crm", 40), _claim(1, "acme", "order-form", 25)]


def _states(claims: list[dict[str, Any]]) -> dict[str, KeyState]:
    """Each claim on the key of the subject it was sent about, as a worker without aliases
    holds them."""
    rules = POLICY.rules_for(SEATS)
    assert rules is not None
    states: dict[str, KeyState] = {}
    for data in claims:
        said = Claim.model_validate(data)
        key = state_key(said.subject, SEATS)
        at = said.observed_at
        step = add_claim(states.get(key), admit(said, POLICY, at), rules, POLICY.version, at, WIDE)
        states[key] = step.state
    return states


def test_a_merge_previews_the_move_and_the_conflict_replay_then_decides() -> None:
    states = _states(CLAIMS)
    journaled = {key: encode_state(state) for key, state in states.items()}
    change = AliasChange("Acme Corp", "acme", NOW, "ana")
    preview = alias_preview(states, HISTORY, AliasHistory(), change, NOW, WIDE)

    assert (preview.subject_before, preview.subject_after) == ("Acme Corp", "acme")
    [move] = preview.moves
    assert (move.source, move.target, move.claims) == (
        "Acme Corp|contract.seats",
        "acme|" + SEATS,
        1,
    )
    by_key = {key.key: key for key in preview.keys}
    assert set(by_key) == {"Acme Corp|" + SEATS, "acme|" + SEATS}
    canonical, left = by_key["acme|" + SEATS], by_key["Acme Corp|" + SEATS]
    assert canonical.before is not None
    assert canonical.before.outcome == "resolved"
    assert canonical.after is not None
    assert canonical.after.outcome == "conflict"
    assert left.after is not None
    assert left.after.reason.endswith("merged into 'acme'")
    assert preview.flipped == 2
    # What replay decides once the alias takes effect at that instant, key by key.
    lines = [json.dumps(claim) for claim in CLAIMS]
    replayed = replay_with_clock(
        lines, POLICY, NOW, aliases=AliasHistory([change]), limits=WIDE
    ).emitted
    at_merge = {state_key(e.decision.subject, SEATS): e.decision for e in replayed if e.at == NOW}
    assert {key: (k.after.outcome, k.after.value) for key, k in by_key.items() if k.after} == {
        key: (d.outcome.value, d.value) for key, d in at_merge.items()
    }
    # Nothing handed in changed.
    assert {key: encode_state(state) for key, state in states.items()} == journaled
    text = "\n".join(render(preview.as_json()))
    assert "1 claim would move to acme|contract.seats" in text
    assert "2 keys decided again, 2 would flip" in text


def test_a_retraction_previews_the_split_back() -> None:
    merged_at = T0 + timedelta(minutes=1)
    merge = AliasChange("Acme Corp", "acme", merged_at, "ana")
    aliases = AliasHistory([merge])
    held = {(s.subject, s.field): s for s in _states(CLAIMS).values()}
    steps = regroup_keys(held, aliases.in_force(merged_at), POLICY, merged_at, WIDE)
    states = {state_key(*key): step.state for key, step in steps if step.state.claims}
    assert list(states) == ["acme|" + SEATS]

    preview = alias_preview(
        states, HISTORY, aliases, AliasChange("Acme Corp", None, NOW, "ana"), NOW, WIDE
    )
    assert (preview.subject_before, preview.subject_after) == ("acme", "Acme Corp")
    assert [(m.source, m.target, m.claims) for m in preview.moves] == [
        ("acme|" + SEATS, "Acme Corp|" + SEATS, 1)
    ]
    after = {key.key: key.after for key in preview.keys}
    assert after["acme|" + SEATS] is not None
    assert after["acme|" + SEATS].value == 25
    assert after["Acme Corp|" + SEATS] is not None
    assert after["Acme Corp|" + SEATS].value == 40


def test_a_change_already_in_force_moves_nothing_and_a_cycle_is_refused() -> None:
    aliases = AliasHistory([AliasChange("Acme Corp", "acme", T0, "ana")])
    again = AliasChange("ACME corp", "acme", NOW, "ana")
    preview = alias_preview({}, HISTORY, aliases, again, NOW, WIDE)
    assert preview.subject_before == preview.subject_after == "acme"
    assert (preview.moves, preview.keys) == ((), ())
    assert "nothing moves" in "\n".join(render(preview.as_json()))
    with pytest.raises(AliasError, match="cycle"):
        touched_keys(aliases, AliasChange("acme", "Acme Corp", NOW), POLICY, NOW)


def test_the_touched_keys_are_both_subjects_for_every_field_the_policy_decides() -> None:
    touched = touched_keys(AliasHistory(), AliasChange("Acme Corp", "acme", NOW), POLICY, NOW)
    assert len(touched.keys) == 2 * len(POLICY.fields)
    assert {key.split("|")[0] for key in touched.keys} == {"Acme Corp", "acme"}
