"""Pydantic mirrors of the Avro schemas in schemas/ (a test keeps them in step).

Models are frozen and validate when built. Timestamps are timezone-aware UTC datetimes.
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any, Protocol, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

# Compiled apart from these models (see instants.py); the core imports them from here.
from streams.core.records.instants import instant as instant
from streams.core.records.instants import micros as micros
from streams.core.records.instants import micros_from_seconds as micros_from_seconds

M = TypeVar("M", bound=BaseModel)


def _as_utc(value: datetime) -> datetime:
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError("timestamp must carry a UTC offset (RFC 3339)")
    return value.astimezone(UTC)


UtcDatetime = Annotated[datetime, AfterValidator(_as_utc)]


class ClaimStatus(StrEnum):
    PRESENT = "present"
    NOT_FOUND = "not_found"
    FORBIDDEN = "forbidden"
    UNAVAILABLE = "unavailable"
    ERROR = "error"


# Say nothing about existence: never evidence of absence (nor of anything else).
NO_EVIDENCE_STATUSES = frozenset(
    {ClaimStatus.FORBIDDEN, ClaimStatus.UNAVAILABLE, ClaimStatus.ERROR}
)


class SourceClass(StrEnum):
    OBSERVATION = "observation"
    USER = "user"
    INFERENCE = "inference"


class Authority(StrEnum):
    """Strongest first; `rank` orders them."""

    SYSTEM_OF_RECORD = "system_of_record"
    CACHED = "cached"
    DERIVED = "derived"
    ASSERTED = "asserted"
    INFERRED = "inferred"

    @property
    def rank(self) -> int:
        return AUTHORITY_RANKS[self]


AUTHORITY_RANKS = {authority: rank for rank, authority in enumerate(Authority)}
"""`Authority.rank` as a dict: the hot path reads it per claim, and the property is Python."""
ASSERTED_RANK = AUTHORITY_RANKS[Authority.ASSERTED]
"""Ranks below it are observations of the world, the only claims that prove state."""


class Outcome(StrEnum):
    RESOLVED = "resolved"
    CONFLICT = "conflict"
    INSUFFICIENT = "insufficient"
    QUARANTINED = "quarantined"
    ERASED = "erased"  # the subject's data was erased: no value, no evidence


OPEN_OUTCOMES = frozenset({Outcome.CONFLICT, Outcome.QUARANTINED})  # a person may need to act


def parse_instant(raw: str) -> datetime:
    """An RFC 3339 instant with an offset (`Z` accepted), in UTC; ValueError otherwise."""
    moment = datetime.fromisoformat(raw.strip())
    if moment.tzinfo is None:
        raise ValueError(f"{raw!r} needs a UTC offset, e.g. 2026-11-29T12:00:00Z")
    return moment.astimezone(UTC)


class ConflictKind(StrEnum):
    VALUE = "value"
    EXISTENCE = "existence"
    SEMANTIC = "semantic"
    CROSS_EPOCH = "cross_epoch"
    PROVENANCE = "provenance"


class Action(StrEnum):
    CONTINUE = "continue"
    DEGRADE = "degrade"
    BLOCK = "block"


class EvidenceRole(StrEnum):
    WINNER = "winner"
    CORROBORATING = "corroborating"
    CONTESTED = "contested"
    SUPERSEDED = "superseded"
    STALE = "stale"
    EXCLUDED = "excluded"
    QUARANTINED = "quarantined"


class RejectReason(StrEnum):
    MALFORMED = "malformed"
    UNKNOWN_SCHEMA = "unknown_schema"
    MISSING_PROVENANCE = "missing_provenance"
    EMPTY_VALUE = "empty_value"
    UNIT_MISMATCH = "unit_mismatch"
    TYPE_MISMATCH = "type_mismatch"
    INVALID_VALUE = "invalid_value"
    UNKNOWN_SOURCE = "unknown_source"
    UNKNOWN_FIELD = "unknown_field"
    FUTURE_OBSERVATION = "future_observation"
    CONFLICTING_DUPLICATE = "conflicting_duplicate"
    UNAUTHENTICATED = "unauthenticated"
    PROCESSING_FAILED = "processing_failed"
    STALE_DECISION = "stale_decision"  # a resolution made against a decision no longer current
    TOO_LARGE = "too_large"  # a text past its bound (streams/core/records/bounds.py)
    REVIEW_REFUSED = "review_refused"  # a steward's review or undo the key does not allow


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


def constructed(model: type[M], fields: dict[str, Any]) -> M:
    """A model from every one of its fields, each already of its validated type (from validated
    models, the policy or Avro's typed read), through the pickle protocol (`__setstate__`):
    about 1 µs, where `model_construct` takes 7-16 µs (a Python loop over aliases and defaults)
    and `model_validate` 5-12 µs. The caller gives all fields, so all are set, as validating a
    complete record sets them."""
    built = model.__new__(model)
    built.__setstate__(
        {
            "__dict__": fields,
            "__pydantic_fields_set__": set(fields),
            "__pydantic_extra__": None,
            "__pydantic_private__": None,
        }
    )
    return built


class Money(_Record):
    amount_minor: int = Field(strict=True)
    currency: str


Value = None | bool | int | float | str | Money


class Claim(_Record):
    claim_id: str
    subject: str
    field: str
    status: ClaimStatus
    value: Value = None
    unit: str | None = None
    source: str
    replica: str | None = None
    source_class: SourceClass = SourceClass.OBSERVATION
    observed_at: UtcDatetime
    valid_from: UtcDatetime | None = None
    valid_to: UtcDatetime | None = None
    epoch: int | None = None
    lineage: str | None = None
    scope: str | None = None
    confidence: float | None = None
    trace_id: str | None = None
    producer: str | None = None
    attributes: dict[str, str] = Field(default_factory=dict)

    @property
    def observed_us(self) -> int:
        return micros(self.observed_at)

    @property
    def valid_from_us(self) -> int | None:
        return None if self.valid_from is None else micros(self.valid_from)

    @property
    def valid_to_us(self) -> int | None:
        return None if self.valid_to is None else micros(self.valid_to)

    def as_claim(self) -> Claim:
        return self


class ClaimFields(Protocol):
    """What the core reads of a claim: the contract's `Claim` (the edges: API, CLI, replay,
    journal) or the hot path's `lean.LeanClaim`, its instants also as integer microseconds."""

    @property
    def claim_id(self) -> str: ...
    @property
    def subject(self) -> str: ...
    @property
    def field(self) -> str: ...
    @property
    def status(self) -> ClaimStatus: ...
    @property
    def value(self) -> Value: ...
    @property
    def unit(self) -> str | None: ...
    @property
    def source(self) -> str: ...
    @property
    def replica(self) -> str | None: ...
    @property
    def source_class(self) -> SourceClass: ...
    @property
    def observed_at(self) -> datetime: ...
    @property
    def valid_from(self) -> datetime | None: ...
    @property
    def valid_to(self) -> datetime | None: ...
    @property
    def epoch(self) -> int | None: ...
    @property
    def lineage(self) -> str | None: ...
    @property
    def scope(self) -> str | None: ...
    @property
    def confidence(self) -> float | None: ...
    @property
    def trace_id(self) -> str | None: ...
    @property
    def producer(self) -> str | None: ...
    @property
    def attributes(self) -> dict[str, str]: ...
    @property
    def observed_us(self) -> int: ...
    @property
    def valid_from_us(self) -> int | None: ...
    @property
    def valid_to_us(self) -> int | None: ...
    def as_claim(self) -> Claim: ...


CLAIM_FIELDS = tuple(Claim.model_fields)


class Evidence(_Record):
    claim_id: str
    source: str
    replica: str | None = None
    authority: Authority
    status: ClaimStatus
    value: Value = None
    observed_at: UtcDatetime
    valid_from: UtcDatetime | None = None
    valid_to: UtcDatetime | None = None
    epoch: int | None = None
    lineage: str | None = None
    scope: str | None = None
    sent_about: str | None = None
    """The subject the claim was sent about, where an alias counts it on the key of another
    spelling (None: the decision's subject)."""
    role: EvidenceRole


class Decision(_Record):
    decision_id: str
    subject: str
    field: str
    outcome: Outcome
    conflict_kind: ConflictKind | None = None
    status: ClaimStatus | None = None
    value: Value = None
    unit: str | None = None
    action: Action
    policy_version: str
    reason: str
    tiebreak: str | None = None
    resolution_id: str | None = None
    evidence: tuple[Evidence, ...] = ()
    decided_at: UtcDatetime
    supersedes: str | None = None


class Rejection(_Record):
    claim_id: str | None = None
    reason: RejectReason
    detail: str
    source: str | None = None
    subject: str | None = None
    field: str | None = None
    claim_json: str | None = None
    raw: bytes | None = None
    topic: str | None = None
    partition: int | None = None
    offset: int | None = None
    rejected_at: UtcDatetime


class EpochChange(_Record):
    subject: str
    field: str
    from_epoch: int
    to_epoch: int
    previous_value: Value = None
    new_value: Value = None
    claim_ids: tuple[str, ...]
    decision_id: str
    detected_at: UtcDatetime


class ReobserveRequest(_Record):
    request_id: str
    subject: str
    field: str
    epoch: int | None = None
    sources: tuple[str, ...]
    reason: str
    decision_id: str
    requested_at: UtcDatetime


class StewardAct(StrEnum):
    """What a steward's statement does: `resolve` decides a key's value, `undo` takes a
    resolution back; the policy may hold either as a proposal until others `approve` it, and a
    reviewer may instead `reject` it or `send_back` to its author. `propose` is a resolution that
    waits for at least one approval whatever the policy asks (what an agent sends: it may propose,
    never decide). `assign` gives the key's task (its open conflict, its proposals) to a steward,
    or to nobody."""

    RESOLVE = "resolve"
    UNDO = "undo"
    APPROVE = "approve"
    REJECT = "reject"
    SEND_BACK = "send_back"
    ASSIGN = "assign"
    PROPOSE = "propose"


PROPOSALS = frozenset({StewardAct.RESOLVE, StewardAct.PROPOSE, StewardAct.UNDO})
"""The acts a key holds as a proposal where the policy asks for review."""
VALUED = frozenset({StewardAct.RESOLVE, StewardAct.PROPOSE})
"""The acts whose statement carries a value: the resolutions."""


class Resolution(_Record):
    """A steward's dated statement on the resolutions topic (its `act`): a resolution, an undo
    of one, or a review of either. Only a resolution carries a value."""

    resolution_id: str
    subject: str
    field: str
    status: ClaimStatus = ClaimStatus.PRESENT
    value: Value = None
    unit: str | None = None
    decided_by: str
    note: str = ""
    decided_at: UtcDatetime
    resolves_decision_id: str | None = None
    act: StewardAct = StewardAct.RESOLVE
    target_id: str | None = None
    basis_digest: str | None = None
    assignee: str | None = None

    @model_validator(mode="after")
    def _says_what_its_act_needs(self) -> Resolution:
        act = self.act
        if self.assignee is not None and act is not StewardAct.ASSIGN:
            raise ValueError("only assign names an assignee")
        if act in VALUED:
            if self.target_id is not None:
                raise ValueError("a resolution names no target_id (an undo or a review does)")
            return self
        if act is StewardAct.ASSIGN:
            if self.target_id is not None or self.value is not None:
                raise ValueError("assign names an assignee (or none), no target_id or value")
            return self
        if not self.target_id:
            raise ValueError(f"{act.value} names the resolution it is about in target_id")
        if self.value is not None or self.status is not ClaimStatus.PRESENT:
            raise ValueError(f"{act.value} carries no value or status: only a resolution does")
        if act is StewardAct.APPROVE and not (self.resolves_decision_id and self.basis_digest):
            raise ValueError(
                "approve names the basis it saw: the key's decision (resolves_decision_id) "
                "and the digest of its evidence (basis_digest)"
            )
        return self

    def with_subject(self, subject: str) -> Resolution:
        return self.model_copy(update={"subject": subject})


RECORD_MODELS: dict[str, type[BaseModel]] = {
    "Claim": Claim,
    "Evidence": Evidence,
    "Decision": Decision,
    "Rejection": Rejection,
    "EpochChange": EpochChange,
    "ReobserveRequest": ReobserveRequest,
    "Resolution": Resolution,
    "Money": Money,
}
