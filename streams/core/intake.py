"""The contract boundary: a decoded claim is admitted (authority assigned, value normalized) or
rejected with a reason. Authority comes from the policy and the arrival channel, never the payload.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import UTC, datetime

from pydantic import ValidationError

from streams.core.contracts import (
    Authority,
    Claim,
    ClaimStatus,
    RejectReason,
    Resolution,
    SourceClass,
    Value,
)
from streams.core.errors import ContractError
from streams.core.normalize import (
    canonical_value,
    normalize_scope,
    normalize_value,
    statement_order,
)
from streams.core.policy import FieldRules, Policy, SourcePolicy

_EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
_CLASS_AUTHORITY = {SourceClass.USER: Authority.ASSERTED, SourceClass.INFERENCE: Authority.INFERRED}
_ASSERTED_RANK = Authority.ASSERTED.rank
# What a claim says beyond its value: compared as received (value and unit are compared
# normalized, scope as normalized).
_CONTENT_EXCLUDES = frozenset({"value", "unit", "scope"})


@dataclass(frozen=True, slots=True)
class AdmittedClaim:
    """A claim the policy accepted: its authority, normalized value and independence key.

    A key's claims are arbitrated again on every new claim, so the orderings the engine sorts by
    are computed once here rather than on every arbitration."""

    claim: Claim
    authority: Authority
    value: Value
    lineage: str
    rank: int = field(init=False, compare=False, repr=False)
    """`authority.rank`: lower is stronger."""
    recency: tuple[datetime, str] = field(init=False, compare=False, repr=False)
    """(observed_at, claim_id): later sorts last, ties broken by id."""
    statement: tuple[tuple[str, str, float, str], str] = field(
        init=False, compare=False, repr=False
    )
    """Status and value in `statement_order`, then claim_id: how the engine clusters claims."""
    observes: bool = field(init=False, compare=False, repr=False)
    """An observation of the world (authority above `asserted`): only these prove state."""
    scope_key: str | None = field(init=False, compare=False, repr=False)
    """The declared scope as compared: case folded, spacing collapsed."""
    plain: bool = field(init=False, compare=False, repr=False)
    """No epoch, validity period or scope: the rules about those have nothing to look at."""
    journaled: str | None = field(default=None, init=False, compare=False, repr=False)
    """Its stored form (JSON), kept once a key's state is first journaled with it: a key's state
    is written again on every change, and its older claims never change."""
    evidence_avro: bytes | None = field(default=None, init=False, compare=False, repr=False)
    """Its Avro Evidence record up to the role, kept once a decision first sends it: every
    decision of the key sends it again, with only its role changed."""

    def __post_init__(self) -> None:
        claim = self.claim
        # A frozen dataclass sets its own fields the same way.
        object.__setattr__(self, "rank", self.authority.rank)
        object.__setattr__(self, "recency", (claim.observed_at, claim.claim_id))
        statement = (statement_order(claim.status.value, self.value), claim.claim_id)
        object.__setattr__(self, "statement", statement)
        object.__setattr__(self, "observes", self.rank < _ASSERTED_RANK)
        scope = claim.scope
        object.__setattr__(self, "scope_key", None if scope is None else normalize_scope(scope))
        plain = claim.epoch is None and claim.valid_from is None and claim.valid_to is None
        object.__setattr__(self, "plain", plain and scope is None)

    def same_content(self, other: AdmittedClaim) -> bool:
        """Whether two claims with one claim_id say the same thing: equal once normalized (an
        enum spelled in another case, a number in another unit), admitted alike."""
        if (self.authority, self.lineage, self.scope_key) != (
            other.authority,
            other.lineage,
            other.scope_key,
        ) or canonical_value(self.value) != canonical_value(other.value):
            return False
        mine, theirs = vars(self.claim), vars(other.claim)
        return all(mine[name] == theirs[name] for name in mine if name not in _CONTENT_EXCLUDES)


def admit(
    claim: Claim,
    policy: Policy,
    now: datetime,
    source_class: SourceClass | None = None,
) -> AdmittedClaim:
    """Admit `claim` or raise ContractError.

    `source_class` is the class implied by the topic the claim arrived on; it overrides the
    payload so that a user assertion cannot pose as an observation.
    """
    rules = policy.rules_for(claim.field)
    if rules is None:
        raise ContractError(
            RejectReason.UNKNOWN_FIELD, f"field {claim.field!r} is not in policy {policy.version}"
        )
    if not claim.source.strip() or not claim.claim_id.strip() or not claim.subject.strip():
        raise ContractError(
            RejectReason.MISSING_PROVENANCE, "claim_id, subject and source must not be blank"
        )
    source_policy = policy.source_policy(claim.source)
    if source_policy is None:
        raise ContractError(
            RejectReason.UNKNOWN_SOURCE,
            f"source {claim.source!r} is not in the policy and the policy has no '*' entry",
        )
    _check_times(claim, policy, now)
    if claim.confidence is not None and not (
        math.isfinite(claim.confidence) and 0.0 <= claim.confidence <= 1.0
    ):
        raise ContractError(RejectReason.INVALID_VALUE, "confidence must be within [0, 1]")
    value = _normalized(claim.status, claim.value, claim.unit, rules)
    effective_class = source_class or claim.source_class
    authority = _CLASS_AUTHORITY.get(effective_class) or rules.authorities.get(
        claim.source, source_policy.authority
    )
    return AdmittedClaim(
        claim=claim, authority=authority, value=value, lineage=lineage_of(claim, source_policy)
    )


def lineage_of(claim: Claim, source_policy: SourcePolicy | None) -> str:
    """Lineage belongs to the operator, like authority: the policy's lineage for the source wins;
    a claim's own lineage only applies where the policy names none (and, as independence is
    also counted per source, can only join sources, never split one)."""
    if source_policy is not None and source_policy.lineage:
        return source_policy.lineage
    return claim.lineage or f"source:{claim.source}"


def admit_resolution(resolution: Resolution, policy: Policy, now: datetime) -> Resolution:
    """Return `resolution` with its value normalized like a claim's, or raise ContractError.
    A resolution dated beyond `now` plus the allowed clock skew is refused like a future claim."""
    rules = policy.rules_for(resolution.field)
    if rules is None:
        raise ContractError(
            RejectReason.UNKNOWN_FIELD, f"field {resolution.field!r} is not in the policy"
        )
    if resolution.decided_at > now + policy.defaults.max_clock_skew:
        raise ContractError(
            RejectReason.FUTURE_OBSERVATION,
            f"decided_at {resolution.decided_at.isoformat()} is beyond the allowed clock skew of "
            f"{policy.defaults.max_clock_skew} past {now.isoformat()}",
        )
    if resolution.status not in (ClaimStatus.PRESENT, ClaimStatus.NOT_FOUND):
        raise ContractError(
            RejectReason.INVALID_VALUE, "a resolution decides present (with a value) or not_found"
        )
    value = _normalized(resolution.status, resolution.value, resolution.unit, rules)
    return resolution.model_copy(update={"value": value, "unit": rules.unit or rules.currency})


def _normalized(status: ClaimStatus, value: Value, unit: str | None, rules: FieldRules) -> Value:
    if status is ClaimStatus.PRESENT:
        return normalize_value(value, unit, rules)
    if value is not None:
        raise ContractError(
            RejectReason.INVALID_VALUE,
            f"{rules.name}: status {status.value} carries a value; only present claims may",
        )
    return None


def _check_times(claim: Claim, policy: Policy, now: datetime) -> None:
    if claim.observed_at < _EARLIEST:
        raise ContractError(RejectReason.INVALID_VALUE, "observed_at is before 1970")
    if claim.observed_at > now + policy.defaults.max_clock_skew:
        raise ContractError(
            RejectReason.FUTURE_OBSERVATION,
            f"observed_at {claim.observed_at.isoformat()} is beyond the allowed clock skew of "
            f"{policy.defaults.max_clock_skew} past {now.isoformat()}",
        )
    if claim.valid_from and claim.valid_to and claim.valid_to <= claim.valid_from:
        raise ContractError(RejectReason.INVALID_VALUE, "valid_to must be after valid_from")


_PROVENANCE_FIELDS = frozenset({"source", "observed_at"})


def parse_claim(data: object) -> Claim:
    """Build a Claim from decoded JSON or Avro data, or raise ContractError naming the problem."""
    if not isinstance(data, dict):
        raise ContractError(RejectReason.MALFORMED, "a claim is a JSON object / Avro record")
    try:
        return Claim.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors()
        missing = [str(e["loc"][0]) for e in errors if e["type"] == "missing" and e["loc"]]
        detail = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '(claim)'}: {e['msg']}" for e in errors
        )
        reason = (
            RejectReason.MISSING_PROVENANCE
            if _PROVENANCE_FIELDS.intersection(missing)
            else RejectReason.MALFORMED
        )
        raise ContractError(reason, detail) from exc
