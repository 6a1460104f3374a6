"""Human-readable explanations, rendered from a decision record (never stored as the truth)."""

from __future__ import annotations

from collections.abc import Iterable

from streams.core.records.contracts import (
    Decision,
    Evidence,
    EvidenceRole,
    Money,
    Outcome,
    Resolution,
    Value,
)

_ROLE_WORDS = {
    EvidenceRole.WINNER: "decided",
    EvidenceRole.CORROBORATING: "agreed",
    EvidenceRole.CONTESTED: "disagreed",
    EvidenceRole.SUPERSEDED: "superseded by a newer statement",
    EvidenceRole.STALE: "too old to count",
    EvidenceRole.EXCLUDED: "not evidence (no answer, or not yet in effect)",
    EvidenceRole.QUARANTINED: "held back until re-observed",
}


def show_value(value: Value, unit: str | None = None) -> str:
    if isinstance(value, Money):
        return f"{value.amount_minor / 100:.2f} {value.currency} ({value.amount_minor} minor units)"
    if value is None:
        return "no value"
    return f"{value} {unit}" if unit else repr(value)


def _evidence_line(item: Evidence) -> str:
    where = f"{item.source}/{item.replica}" if item.replica else item.source
    said = show_value(item.value) if item.status.value == "present" else item.status.value
    epoch = f", epoch {item.epoch}" if item.epoch is not None else ""
    return (
        f"  - {where} ({item.authority.value}{epoch}) said {said} at "
        f"{item.observed_at.isoformat()}: {_ROLE_WORDS[item.role]}"
    )


def _resolution_line(resolution: Resolution) -> str:
    why = f": {resolution.note}" if resolution.note else " (no note given)"
    return (
        f"  resolved by {resolution.decided_by or '(unnamed)'} at "
        f"{resolution.decided_at.isoformat()}{why}"
    )


def explain(decision: Decision, resolutions: Iterable[Resolution] = ()) -> str:
    """`resolutions`: the key's, when at hand, to say who resolved it, when and why."""
    head = f"{decision.subject} {decision.field}: "
    if decision.outcome is Outcome.RESOLVED:
        what = (
            "does not exist"
            if decision.status and decision.status.value == "not_found"
            else f"is {show_value(decision.value, decision.unit)}"
        )
        head += what
        if decision.tiebreak:
            head += f" (tie broken by {decision.tiebreak}, as the field's policy allows)"
        if decision.resolution_id:
            head += f" (decided by a person, resolution {decision.resolution_id})"
    elif decision.outcome is Outcome.CONFLICT:
        head += f"sources disagree ({decision.conflict_kind} conflict); nothing is chosen"
    elif decision.outcome is Outcome.QUARANTINED:
        head += f"quarantined ({decision.conflict_kind}) until it is observed again"
    else:
        head += "not enough usable evidence to decide"
    lines = [
        head,
        f"  outcome {decision.outcome.value}, action {decision.action.value}, "
        f"reason {decision.reason}, policy {decision.policy_version}, "
        f"decided at {decision.decided_at.isoformat()}",
        "  evidence:",
        *(_evidence_line(item) for item in decision.evidence),
    ]
    applied = [r for r in resolutions if r.resolution_id == decision.resolution_id]
    if decision.resolution_id and applied:
        lines.insert(2, _resolution_line(applied[0]))
    if decision.supersedes:
        lines.append(f"  replaces decision {decision.supersedes}")
    return "\n".join(lines)
