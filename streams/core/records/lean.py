"""A claim as the hot path holds it (`LeanClaim`), compiled (build_backend/compiled.py).

The fast reader builds one per record and the journal one per claim of every key it decodes
(a key outside the decoded cache: all of its claims at once). The contract's models are pydantic
and stay interpreted; this class, apart from them, is a native class: built by a direct call
with its fields as arguments, where a slotted Python class is built by setting each of its 22
fields through the interpreter.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from streams.core.records.contracts import (
    CLAIM_FIELDS,
    Claim,
    ClaimStatus,
    SourceClass,
    Value,
    constructed,
)
from streams.core.records.instants import instant

NO_ATTRIBUTES: dict[str, str] = {}
"""The attributes of every claim that has none, one map shared by all of them (most claims
carry none, and a decoded key holds each of its claims): never to be changed."""

LEAN_FIELDS = (*CLAIM_FIELDS, "observed_us", "valid_from_us", "valid_to_us")
"""A LeanClaim's fields: the contract's, then its instants as integer microseconds."""


class LeanClaim:
    """A claim's contract fields, each already of its validated type (Avro's typed read,
    checked), its instants kept as integer microseconds only. No pydantic: a claim is built per
    record and kept in its key's state, where a model costs 1-2 µs more to build and ~2 KB more
    to keep; nor the instants as datetimes, which the hot path compares as integers: each is
    built where it is read (replay, explain, the Evidence model), and a key's decoded claims
    hold one to three objects fewer each. Equal to a `Claim` with equal fields; `as_claim` builds
    that model where an edge needs one (the API, a dead letter). Not to be changed once built."""

    claim_id: str
    subject: str
    field: str
    status: ClaimStatus
    value: Value
    unit: str | None
    source: str
    replica: str | None
    source_class: SourceClass
    epoch: int | None
    lineage: str | None
    scope: str | None
    confidence: float | None
    trace_id: str | None
    producer: str | None
    attributes: dict[str, str]
    observed_us: int
    valid_from_us: int | None
    valid_to_us: int | None

    def __init__(
        self,
        claim_id: str,
        subject: str,
        field: str,
        status: ClaimStatus,
        value: Value,
        unit: str | None,
        source: str,
        replica: str | None,
        source_class: SourceClass,
        epoch: int | None,
        lineage: str | None,
        scope: str | None,
        confidence: float | None,
        trace_id: str | None,
        producer: str | None,
        attributes: dict[str, str],
        observed_us: int,
        valid_from_us: int | None,
        valid_to_us: int | None,
    ) -> None:
        self.claim_id = claim_id
        self.subject = subject
        self.field = field
        self.status = status
        self.value = value
        self.unit = unit
        self.source = source
        self.replica = replica
        self.source_class = source_class
        self.epoch = epoch
        self.lineage = lineage
        self.scope = scope
        self.confidence = confidence
        self.trace_id = trace_id
        self.producer = producer
        self.attributes = attributes
        self.observed_us = observed_us
        self.valid_from_us = valid_from_us
        self.valid_to_us = valid_to_us

    @property
    def observed_at(self) -> datetime:
        return instant(self.observed_us)

    @property
    def valid_from(self) -> datetime | None:
        start = self.valid_from_us
        return None if start is None else instant(start)

    @property
    def valid_to(self) -> datetime | None:
        end = self.valid_to_us
        return None if end is None else instant(end)

    @classmethod
    def of(cls, claim: Claim) -> LeanClaim:
        return lean_claim(vars(claim), claim.observed_us, claim.valid_from_us, claim.valid_to_us)

    def as_claim(self) -> Claim:
        return constructed(Claim, {name: getattr(self, name) for name in CLAIM_FIELDS})

    def with_subject(self, subject: str) -> LeanClaim:
        fields = {name: getattr(self, name) for name in CLAIM_FIELDS} | {"subject": subject}
        return lean_claim(fields, self.observed_us, self.valid_from_us, self.valid_to_us)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, LeanClaim | Claim):
            return NotImplemented
        return all(getattr(self, name) == getattr(other, name) for name in CLAIM_FIELDS)

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in CLAIM_FIELDS)
        return f"LeanClaim({fields})"


def lean_claim(
    fields: dict[str, Any], observed_us: int, valid_from_us: int | None, valid_to_us: int | None
) -> LeanClaim:
    """From every field of a Claim by name, each of its validated type, its instants as
    microseconds (the caller has them already: a raw-long Avro read, or `micros`); the
    datetimes among `fields` are not read."""
    return LeanClaim(
        fields["claim_id"],
        fields["subject"],
        fields["field"],
        fields["status"],
        fields["value"],
        fields["unit"],
        fields["source"],
        fields["replica"],
        fields["source_class"],
        fields["epoch"],
        fields["lineage"],
        fields["scope"],
        fields["confidence"],
        fields["trace_id"],
        fields["producer"],
        fields["attributes"] or NO_ATTRIBUTES,
        observed_us,
        valid_from_us,
        valid_to_us,
    )
