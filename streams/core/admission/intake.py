"""The contract boundary: a decoded claim is admitted (authority assigned, value normalized) or
rejected with a reason. Authority comes from the policy and the arrival channel, never the payload.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from sys import intern

from msgspec import Raw
from pydantic import ValidationError

from streams.core.admission.normalize import (
    canonical_value,
    normalize_scope,
    normalizer_for,
    statement_order,
)
from streams.core.records.bounds import check_claim, check_resolution
from streams.core.records.contracts import (
    ASSERTED_RANK,
    AUTHORITY_RANKS,
    CLAIM_FIELDS,
    VALUED,
    Authority,
    Claim,
    ClaimFields,
    ClaimStatus,
    RejectReason,
    Resolution,
    SourceClass,
    Value,
    instant,
    micros,
)
from streams.core.records.errors import ContractError
from streams.core.records.members import PRESENT
from streams.core.records.memo import by_identity
from streams.core.records.policy import Defaults, FieldRules, Policy, SourcePolicy

_CLASS_AUTHORITY = {SourceClass.USER: Authority.ASSERTED, SourceClass.INFERENCE: Authority.INFERRED}
_STATUS_TEXT = {status: status.value for status in ClaimStatus}  # `.value` is a Python property
# What a claim says beyond its value: compared as received (value and unit are compared
# normalized, scope as normalized), its instants as the microseconds both forms of a claim hold.
_INSTANTS = {"observed_at": "observed_us", "valid_from": "valid_from_us", "valid_to": "valid_to_us"}
_CONTENT_FIELDS = tuple(
    _INSTANTS.get(name, name) for name in CLAIM_FIELDS if name not in {"value", "unit", "scope"}
)


class AdmittedClaim:
    """A claim the policy accepted: its authority, normalized value and independence key.

    A key's claims are arbitrated again on every new claim, so the orderings the engine sorts by
    are computed once here rather than on every arbitration. A plain slotted class whose
    `__init__` computes them: a frozen dataclass sets each through `object.__setattr__`. Not to be
    changed once built (only `journaled`, `evidence_avro` and `size` are filled in later); equal
    by the four given fields."""

    __slots__ = (
        "authority",
        "channel",
        "claim",
        "claim_id",
        "evidence_avro",
        "journaled",
        "lineage",
        "observed_us",
        "observes",
        "plain",
        "rank",
        "recency",
        "scope_key",
        "size",
        "statement",
        "status",
        "valid_from_us",
        "valid_to_us",
        "value",
    )

    claim: ClaimFields
    claim_id: str
    status: ClaimStatus
    """`claim.claim_id` and `claim.status`, read natively: the engine reads them per claim
    several times a decision, where the claim's own attributes are Python lookups."""
    authority: Authority
    value: Value
    lineage: str
    channel: SourceClass | None
    """The class of the topic it arrived on, where that overrides the payload's (a user's topic
    makes any claim an assertion): kept, so that a later policy admits it again alike."""
    rank: int
    """`authority.rank`: lower is stronger."""
    recency: tuple[int, str]
    """(observed_us, claim_id): later sorts last, ties broken by id."""
    statement: tuple[tuple[str, str, float, str], str]
    """Status and value in `statement_order`, then claim_id: how the engine clusters claims."""
    observes: bool
    """An observation of the world (authority above `asserted`): only these prove state."""
    scope_key: str | None
    """The declared scope as compared: case folded, spacing collapsed."""
    plain: bool
    """No epoch, validity period or scope: the rules about those have nothing to look at."""
    observed_us: int
    valid_from_us: int | None
    valid_to_us: int | None
    """The claim's instants as integer microseconds since the epoch."""
    journaled: Raw | None
    """Its stored form (the journal's bytes), kept once a key's state is first journaled with
    it: a key's state is written again on every change, and its older claims never change."""
    evidence_avro: bytes | None
    """Its Avro Evidence record up to the role, kept once a decision first sends it: every
    decision of the key sends it again, with only its role changed."""
    size: int
    """What it adds to its key's records, at most (`bounds.claim_bytes`), once first asked
    (`upkeep.held_bytes`); -1 before."""

    def __init__(
        self,
        claim: ClaimFields,
        authority: Authority,
        value: Value,
        lineage: str,
        channel: SourceClass | None = None,
    ):
        self.claim = claim
        self.authority = authority
        self.value = value
        self.lineage = lineage
        self.channel = channel
        self.rank = rank = AUTHORITY_RANKS[authority]
        self.claim_id = claim_id = claim.claim_id
        self.observed_us = observed = claim.observed_us
        self.valid_from_us = start = claim.valid_from_us
        self.valid_to_us = end = claim.valid_to_us
        self.recency = (observed, claim_id)
        self.status = status = claim.status
        self.statement = (statement_order(_STATUS_TEXT[status], value), claim_id)
        self.observes = rank < ASSERTED_RANK
        scope = claim.scope
        self.scope_key = None if scope is None else normalize_scope(scope)
        self.plain = claim.epoch is None and start is None and end is None and scope is None
        self.journaled = None
        self.evidence_avro = None
        self.size = -1

    def __eq__(self, other: object) -> bool:
        if type(other) is not AdmittedClaim:
            return NotImplemented
        return (self.claim, self.authority, self.value, self.lineage, self.channel) == (
            other.claim,
            other.authority,
            other.value,
            other.lineage,
            other.channel,
        )

    __hash__ = None  # type: ignore[assignment]  # its claim holds a dict

    def __repr__(self) -> str:
        return (
            f"AdmittedClaim(claim={self.claim!r}, authority={self.authority!r}, "
            f"value={self.value!r}, lineage={self.lineage!r}, channel={self.channel!r})"
        )

    def same_content(self, other: AdmittedClaim) -> bool:
        """Whether two claims with one claim_id say the same thing: equal once normalized (an
        enum spelled in another case, a number in another unit), admitted alike."""
        if (self.authority, self.lineage, self.scope_key) != (
            other.authority,
            other.lineage,
            other.scope_key,
        ) or canonical_value(self.value) != canonical_value(other.value):
            return False
        mine, theirs = self.claim, other.claim
        return all(getattr(mine, name) == getattr(theirs, name) for name in _CONTENT_FIELDS)


def admit(
    claim: ClaimFields,
    policy: Policy,
    now: datetime,
    source_class: SourceClass | None = None,
) -> AdmittedClaim:
    """Admit `claim` as of `now` or raise ContractError (`admit_micros`, for callers that hold
    an aware datetime: replay, tools, tests).

    `source_class` is the class implied by the topic the claim arrived on; it overrides the
    payload so that a user assertion cannot pose as an observation.
    """
    return admit_micros(claim, policy, micros(now), source_class)


def admit_micros(
    claim: ClaimFields,
    policy: Policy,
    now_us: int,
    source_class: SourceClass | None = None,
) -> AdmittedClaim:
    """`admit` as of `now_us`, microseconds since the epoch: the hot path's form, which compares
    instants as integers and builds no datetime unless it refuses the claim."""
    return _admitted(claim, policy, source_class, now_us)


def readmit(admitted: AdmittedClaim, policy: Policy) -> AdmittedClaim:
    """`admitted` (a kept claim) admitted again under `policy`, as `admit` would admit it afresh
    from the topic it arrived on, or ContractError naming why `policy` refuses it. Its times
    are not judged again: they were judged against the clock when it arrived. The same object
    when `policy` admits it alike (its stored form and evidence stay cached on it)."""
    again = _admitted(admitted.claim, policy, admitted.channel, None)
    if again == admitted:
        return admitted
    return again


def _admitted(
    claim: ClaimFields, policy: Policy, channel: SourceClass | None, now_us: int | None
) -> AdmittedClaim:
    """What `policy` makes of `claim`, its times judged against `now_us` where given, or
    ContractError."""
    check_claim(claim)
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
            f"source {claim.source!r} is not in policy {policy.version} and it has no '*' entry",
        )
    if now_us is not None:
        _check_times(claim, policy.defaults, now_us)
    confidence = claim.confidence
    if confidence is not None and not (math.isfinite(confidence) and 0.0 <= confidence <= 1.0):
        raise ContractError(RejectReason.INVALID_VALUE, "confidence must be within [0, 1]")
    epoch = claim.epoch
    if epoch is not None and not -(2**63) <= epoch < 2**63:
        raise ContractError(RejectReason.INVALID_VALUE, "epoch is outside the 64-bit range")
    value = _normalized(claim.status, claim.value, claim.unit, rules)
    effective_class = channel or claim.source_class
    authority = _CLASS_AUTHORITY.get(effective_class) or rules.authorities.get(
        claim.source, source_policy.authority
    )
    return AdmittedClaim(claim, authority, value, lineage_of(claim, source_policy), channel)


def lineage_of(claim: ClaimFields, source_policy: SourcePolicy | None) -> str:
    """Lineage belongs to the operator, like authority: the policy's lineage for the source wins;
    a claim's own lineage only applies where the policy names none (and, as independence is
    also counted per source, can only join sources, never split one)."""
    if source_policy is not None and source_policy.lineage:
        return source_policy.lineage
    return claim.lineage or intern(f"source:{claim.source}")  # shared by the source's claims


def admit_resolution(resolution: Resolution, policy: Policy, now: datetime) -> Resolution:
    """Return `resolution` with its value normalized like a claim's, or raise ContractError.
    A resolution dated beyond `now` plus the allowed clock skew is refused like a future claim."""
    check_resolution(resolution)
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
    if resolution.act not in VALUED:
        return resolution  # an undo, a review, an assignment: no value (the contract refuses one)
    if resolution.status not in (ClaimStatus.PRESENT, ClaimStatus.NOT_FOUND):
        raise ContractError(
            RejectReason.INVALID_VALUE, "a resolution decides present (with a value) or not_found"
        )
    value = _normalized(resolution.status, resolution.value, resolution.unit, rules)
    return resolution.model_copy(update={"value": value, "unit": rules.unit or rules.currency})


def _normalized(status: ClaimStatus, value: Value, unit: str | None, rules: FieldRules) -> Value:
    if status is PRESENT:
        return normalizer_for(rules)(value, unit)
    if value is not None:
        raise ContractError(
            RejectReason.INVALID_VALUE,
            f"{rules.name}: status {status.value} carries a value; only present claims may",
        )
    return None


def _skew(defaults: Defaults) -> int:
    return defaults.max_clock_skew // _MICROSECOND


_MICROSECOND = timedelta(microseconds=1)
skew_us = by_identity(_skew)
"""The policy's allowed clock skew in microseconds, worked out once per policy."""


def _check_times(claim: ClaimFields, defaults: Defaults, now_us: int) -> None:
    observed = claim.observed_us
    if observed < 0:
        raise ContractError(RejectReason.INVALID_VALUE, "observed_at is before 1970")
    if observed > now_us + skew_us(defaults):
        raise ContractError(
            RejectReason.FUTURE_OBSERVATION,
            f"observed_at {claim.observed_at.isoformat()} is beyond the allowed clock skew of "
            f"{defaults.max_clock_skew} past {instant(now_us).isoformat()}",
        )
    start, end = claim.valid_from_us, claim.valid_to_us
    if start is not None and end is not None and end <= start:
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
