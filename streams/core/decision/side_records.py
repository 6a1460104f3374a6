"""The records a decision is built of and sends beside itself: each claim's Evidence, the
EpochChange when the key moved to a new epoch, the ReobserveRequest when it is quarantined.
Built from an arbitration's parts (`arbitration.py`) only when someone reads them."""

from __future__ import annotations

from dataclasses import dataclass

from streams.core.admission.intake import AdmittedClaim
from streams.core.records.contracts import (
    Decision,
    EpochChange,
    EvidenceRole,
    ReobserveRequest,
    Value,
)

Roles = dict[str, EvidenceRole]


@dataclass(frozen=True, slots=True)
class EpochShift:
    """A value that changed across an epoch boundary (set aside by the newest_epoch rule)."""

    from_epoch: int
    to_epoch: int
    previous_value: Value
    new_value: Value
    claim_ids: list[str]


def evidence_fields(admitted: AdmittedClaim, role: EvidenceRole, subject: str) -> dict[str, object]:
    """The fields of the claim's Evidence, as weighed in a decision about `subject` in the role
    it played."""
    claim = admitted.claim
    fields = evidence_facts(admitted, subject)
    fields["observed_at"] = claim.observed_at
    fields["valid_from"] = claim.valid_from
    fields["valid_to"] = claim.valid_to
    fields["role"] = role
    return fields


def evidence_facts(admitted: AdmittedClaim, subject: str) -> dict[str, object]:
    """The fields of the claim's Evidence in a decision about `subject` but its instants and its
    role: what the decision writer writes once a claim, with the instants as the microseconds
    the claim holds (a hot-path claim builds a datetime only where one is read)."""
    claim = admitted.claim
    sent_about = claim.subject
    return {
        "claim_id": claim.claim_id,
        "source": claim.source,
        "replica": claim.replica,
        "authority": admitted.authority,
        "status": claim.status,
        "value": admitted.value,
        "epoch": claim.epoch,
        "lineage": admitted.lineage,
        # As compared (normalized): one claim sent twice with its scope spelled two ways is
        # the same claim, and its evidence must not depend on which spelling arrived first.
        "scope": admitted.scope_key,
        "sent_about": None if sent_about == subject else sent_about,
    }


def epoch_event(decision: Decision, shift: EpochShift) -> EpochChange:
    return EpochChange(
        subject=decision.subject,
        field=decision.field,
        from_epoch=shift.from_epoch,
        to_epoch=shift.to_epoch,
        previous_value=shift.previous_value,
        new_value=shift.new_value,
        claim_ids=tuple(shift.claim_ids),
        decision_id=decision.decision_id,
        detected_at=decision.decided_at,
    )


def reobserve_request(
    decision: Decision, claims: list[AdmittedClaim], roles: Roles
) -> ReobserveRequest:
    held = [a for a in claims if roles[a.claim_id] is EvidenceRole.QUARANTINED]
    epochs = [a.claim.epoch for a in held if a.claim.epoch is not None]
    return ReobserveRequest(
        request_id=f"reobs_{decision.decision_id.removeprefix('dec_')}",
        subject=decision.subject,
        field=decision.field,
        epoch=max(epochs) if epochs else None,
        sources=tuple(sorted({a.claim.source for a in held})),
        reason=decision.reason,
        decision_id=decision.decision_id,
        requested_at=decision.decided_at,
    )
