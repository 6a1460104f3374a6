"""An audit export's rows: what each key believed at the cut, the evidence behind it, its
stewards' statements and the policies in force, as flat records an analytics tool loads.

Pure: the shell (`streams.audit`) writes the rows as Parquet or JSON Lines in the order given.
`TABLES` names each table's columns and their kinds, the one description both writers follow.
A value is written as canonical JSON text (a value may be a string, a number, a boolean, money
or null, which no single typed column holds); an instant as microseconds since the epoch, UTC.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import BaseModel

from streams.core.keys.state import KeyState
from streams.core.records.contracts import Decision, Resolution, micros, parse_instant
from streams.core.records.policy import policy_from_text

Row = dict[str, Any]

STRING, INTEGER, INSTANT = "string", "int64", "instant"

TABLES: dict[str, tuple[tuple[str, str], ...]] = {
    "beliefs": (
        ("subject", STRING),
        ("field", STRING),
        ("decision_id", STRING),
        ("outcome", STRING),
        ("conflict_kind", STRING),
        ("status", STRING),
        ("value", STRING),
        ("unit", STRING),
        ("action", STRING),
        ("reason", STRING),
        ("tiebreak", STRING),
        ("resolution_id", STRING),
        ("policy_version", STRING),
        ("decided_at", INSTANT),
        ("supersedes", STRING),
        ("claims_held", INTEGER),
    ),
    "evidence": (
        ("subject", STRING),
        ("field", STRING),
        ("decision_id", STRING),
        ("claim_id", STRING),
        ("source", STRING),
        ("replica", STRING),
        ("authority", STRING),
        ("status", STRING),
        ("value", STRING),
        ("observed_at", INSTANT),
        ("valid_from", INSTANT),
        ("valid_to", INSTANT),
        ("epoch", INTEGER),
        ("lineage", STRING),
        ("scope", STRING),
        ("role", STRING),
        ("sent_about", STRING),
    ),
    "statements": (
        ("subject", STRING),
        ("field", STRING),
        ("resolution_id", STRING),
        ("act", STRING),
        ("target_id", STRING),
        ("decided_by", STRING),
        ("decided_at", INSTANT),
        ("status", STRING),
        ("value", STRING),
        ("unit", STRING),
        ("note", STRING),
        ("resolves_decision_id", STRING),
        ("basis_digest", STRING),
        ("assignee", STRING),
        ("standing", STRING),
        ("needs", INTEGER),
        ("why", STRING),
        ("sent_about", STRING),
    ),
    "policies": (
        ("version", STRING),
        ("since", INSTANT),
        ("until", INSTANT),
        ("digest", STRING),
    ),
}
"""Each table's columns in order, with their kinds (STRING, INTEGER, INSTANT); every column
may be null but a key's subject and field, and the ids."""

IN_FORCE = "in_force"
"""A resolution counting at the cut (`KeyState.resolutions`); the steward log's standings name
the rest (`keys.steward_log.Standing`)."""


def value_text(value: Any) -> str | None:
    """A value as canonical JSON text (None: no value)."""
    if value is None:
        return None
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _micros(at: Any) -> int | None:
    return None if at is None else micros(at)


def belief_row(decision: Decision, claims_held: int) -> Row:
    """The key's belief at the cut: its last decision, and how many claims the key held."""
    return {
        "subject": decision.subject,
        "field": decision.field,
        "decision_id": decision.decision_id,
        "outcome": decision.outcome.value,
        "conflict_kind": decision.conflict_kind.value if decision.conflict_kind else None,
        "status": decision.status.value if decision.status else None,
        "value": value_text(decision.value),
        "unit": decision.unit,
        "action": decision.action.value,
        "reason": decision.reason,
        "tiebreak": decision.tiebreak,
        "resolution_id": decision.resolution_id,
        "policy_version": decision.policy_version,
        "decided_at": micros(decision.decided_at),
        "supersedes": decision.supersedes,
        "claims_held": claims_held,
    }


def evidence_rows(decision: Decision) -> list[Row]:
    """One row a claim the belief weighed, with the role it played."""
    return [
        {
            "subject": decision.subject,
            "field": decision.field,
            "decision_id": decision.decision_id,
            "claim_id": evidence.claim_id,
            "source": evidence.source,
            "replica": evidence.replica,
            "authority": evidence.authority.value,
            "status": evidence.status.value,
            "value": value_text(evidence.value),
            "observed_at": micros(evidence.observed_at),
            "valid_from": _micros(evidence.valid_from),
            "valid_to": _micros(evidence.valid_to),
            "epoch": evidence.epoch,
            "lineage": evidence.lineage,
            "scope": evidence.scope,
            "role": evidence.role.value,
            "sent_about": evidence.sent_about or decision.subject,
        }
        for evidence in decision.evidence
    ]


def statement_rows(state: KeyState) -> list[Row]:
    """The key's stewards' statements at the cut: the resolutions in force, then the rest of
    its steward log (proposals, reviews, undos, what was sent back) in the order taken."""
    held = [(said, IN_FORCE, 0, "") for said in state.resolutions]
    held += [(s.statement, s.standing.value, s.needs, s.why) for s in state.steward_log]
    return [_statement(state, *each) for each in held]


def _statement(state: KeyState, said: Resolution, standing: str, needs: int, why: str) -> Row:
    return {
        "subject": state.subject,
        "field": state.field,
        "resolution_id": said.resolution_id,
        "act": said.act.value,
        "target_id": said.target_id,
        "decided_by": said.decided_by,
        "decided_at": micros(said.decided_at),
        "status": said.status.value,
        "value": value_text(said.value),
        "unit": said.unit,
        "note": said.note or None,
        "resolves_decision_id": said.resolves_decision_id,
        "basis_digest": said.basis_digest,
        "assignee": said.assignee,
        "standing": standing,
        "needs": needs,
        "why": why or None,
        "sent_about": said.subject,
    }


def policy_rows(lines: list[str]) -> list[Row]:
    """One row a policy publication (a line of the policy history, `core.timeline.
    policy_history`), in the order of the instants they take effect: its version, from when
    until when it was in force (None: still at the cut) and the SHA-256 of its text. Lines
    taking effect at one instant keep their order: the later one wins, as in `PolicyHistory`."""
    published = []
    for line in lines:
        data = json.loads(line)
        text: str = data["policy"]
        version = policy_from_text(text, "policy").version
        digest = hashlib.sha256(text.encode()).hexdigest()
        published.append((micros(parse_instant(data["since"])), version, digest))
    published.sort(key=lambda each: each[0])  # stable: at one instant, the later line wins
    untils = [*(since for since, _, _ in published[1:]), None][: len(published)]
    return [
        {"version": version, "since": since, "until": until, "digest": digest}
        for (since, version, digest), until in zip(published, untils, strict=True)
    ]
