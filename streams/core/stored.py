"""The stored forms of a key's state (version 3) as msgspec Structs: what the journal writes to
the changelog and the state store, field by field, in the order written; and `EarlierSummary`,
which validates a decision summary as versions 1 and 2 stored it.

Where it sits: journal.py turns a `KeyState` into a `StoredState` and one msgspec encoder writes
it; a typed decoder reads the bytes back into these Structs, and journal.py rebuilds the state.
msgspec's Struct and pydantic's model have a metaclass, which mypyc cannot compile, so a compiled
core leaves this module interpreted and the journal's code around it native. What turns a read
Struct into the hot path's objects (`StoredClaim.lean_claim`, `StoredSummary.summary`) sits here
too, interpreted: it is all attribute reads and writes on classes that are not native, which
CPython specializes and mypyc's generic attribute access does not (2.7 µs a claim interpreted,
3.8 µs compiled).

Each field is the record model's own under its stored short name, left out at its default (None,
a model default, or UNSET for what is stored only when it differs), times in microseconds since
the epoch; the subject and field are the key's and stored once, on the state.
"""

from __future__ import annotations

from datetime import datetime
from sys import intern
from typing import Literal

import msgspec
from pydantic import BaseModel, ConfigDict

from streams.core.contracts import (
    Authority,
    ClaimStatus,
    ConflictKind,
    LeanClaim,
    Money,
    Outcome,
    SourceClass,
    Value,
    constructed,
    instant,
)
from streams.core.summary import DecisionSummary


class StoredMoney(msgspec.Struct, gc=False):
    amount_minor: int
    currency: str


# A float outside [1e-4, 1e16) is carried as `msgspec.Raw` holding Python's spelling of it (see
# journal.py), so the bytes stay those `json` wrote; decoded, every number is an int or a float.
StoredValue = None | bool | int | float | str | StoredMoney | msgspec.Raw
StoredNumber = float | msgspec.Raw


def read_value(stored: StoredValue) -> Value:
    """A value as the records hold it: money as the model, built without validating again."""
    if isinstance(stored, StoredMoney):
        return constructed(
            Money, {"amount_minor": stored.amount_minor, "currency": stored.currency}
        )
    assert not isinstance(stored, msgspec.Raw)  # decoded, a number is an int or a float
    return stored


class StoredClaim(
    msgspec.Struct,
    kw_only=True,
    omit_defaults=True,
    gc=False,
    rename={
        "claim_id": "id",
        "status": "st",
        "value": "v",
        "unit": "u",
        "source": "src",
        "replica": "rep",
        "source_class": "cls",
        "observed_at": "at",
        "valid_from": "from",
        "valid_to": "to",
        "epoch": "ep",
        "lineage": "lin",
        "scope": "sc",
        "confidence": "cf",
        "trace_id": "tr",
        "producer": "pr",
        "attributes": "attr",
        "authority": "A",
        "admitted_value": "V",
        "admitted_lineage": "L",
    },
):
    """A claim as admitted: the claim's fields, then what admission gave it under capitals
    (A: authority; V: the normalized value when it differs from the claim's own; L: the
    lineage when not the claim's default)."""

    claim_id: str
    status: ClaimStatus = ClaimStatus.PRESENT
    value: StoredValue = None
    unit: str | None = None
    source: str
    replica: str | None = None
    source_class: SourceClass = SourceClass.OBSERVATION
    observed_at: int
    valid_from: int | None = None
    valid_to: int | None = None
    epoch: int | None = None
    lineage: str | None = None
    scope: str | None = None
    confidence: StoredNumber | None = None
    trace_id: str | None = None
    producer: str | None = None
    attributes: dict[str, str] = msgspec.field(default_factory=dict)
    authority: Authority
    admitted_value: StoredValue | msgspec.UnsetType = msgspec.UNSET
    admitted_lineage: str | msgspec.UnsetType = msgspec.UNSET

    def lean_claim(self, subject: str, field: str) -> LeanClaim:
        """The claim as the hot path holds it, without the dict of fields LeanClaim's `__init__`
        reads (a cache miss builds one per claim of its key), its instants kept as read. Names
        a policy or a source repeats (the source, the lineage) are interned: held once in
        memory, not once per decoded claim."""
        claim = LeanClaim.__new__(LeanClaim)
        claim.claim_id = self.claim_id
        claim.subject = subject
        claim.field = field
        claim.status = self.status
        claim.value = read_value(self.value)
        claim.unit = self.unit
        claim.source = intern(self.source)
        claim.replica = self.replica
        claim.source_class = self.source_class
        claim.observed_us = observed = self.observed_at
        claim.observed_at = instant(observed)
        claim.valid_from_us = start = self.valid_from
        claim.valid_from = None if start is None else instant(start)
        claim.valid_to_us = end = self.valid_to
        claim.valid_to = None if end is None else instant(end)
        claim.epoch = self.epoch
        lineage = self.lineage
        claim.lineage = None if lineage is None else intern(lineage)
        claim.scope = self.scope
        claim.confidence = self.confidence  # type: ignore[assignment]  # decoded: a float
        claim.trace_id = self.trace_id
        claim.producer = self.producer
        claim.attributes = self.attributes
        return claim


class StoredResolution(
    msgspec.Struct,
    kw_only=True,
    omit_defaults=True,
    gc=False,
    rename={
        "resolution_id": "id",
        "status": "st",
        "value": "v",
        "unit": "u",
        "decided_by": "by",
        "note": "n",
        "decided_at": "at",
        "resolves_decision_id": "dec",
    },
):
    resolution_id: str
    status: ClaimStatus = ClaimStatus.PRESENT
    value: StoredValue = None
    unit: str | None = None
    decided_by: str
    note: str = ""
    decided_at: int
    resolves_decision_id: str | None = None


class StoredSummary(
    msgspec.Struct,
    kw_only=True,
    omit_defaults=True,
    gc=False,
    rename={
        "decision_id": "id",
        "outcome": "o",
        "conflict_kind": "k",
        "value": "v",
        "reason": "r",
        "decided_at": "at",
        "supersedes": "sup",
    },
):
    decision_id: str
    outcome: Outcome
    conflict_kind: ConflictKind | None = None
    value: StoredValue = None
    reason: str
    decided_at: int
    supersedes: str | None = None

    def summary(self, journaled: msgspec.Raw) -> DecisionSummary:
        """The decision summary, keeping `journaled`, its stored form."""
        return DecisionSummary(
            self.decision_id,
            self.outcome,
            self.conflict_kind,
            read_value(self.value),
            intern(self.reason),  # one of the engine's few reasons
            instant(self.decided_at),
            self.supersedes,
            journaled,
        )


class StoredState(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A key's state; `version` first, so a reader knows the form before reading the rest."""

    version: Literal[3]
    subject: str
    field: str
    resolutions: tuple[StoredResolution, ...] = ()
    history: tuple[msgspec.Raw, ...] = ()
    """Each a `StoredSummary`'s bytes (as `claims` are): kept on the summary once written."""
    conflict_since: int | None = None
    escalated: bool = False
    next_check_at: int | None = None
    disputed: tuple[str, ...] = ()
    claims: tuple[msgspec.Raw, ...] = ()
    """Each a `StoredClaim`'s bytes, kept on the claim once written (`AdmittedClaim.journaled`):
    a key's state is written again on every change, and its older claims never change."""


class EarlierSummary(BaseModel):
    """A decision summary as versions 1 and 2 stored it (pydantic's JSON dump of the model the
    summary then was), validated as that model validated it: the same errors, under its name."""

    model_config = ConfigDict(frozen=True, extra="forbid", title="DecisionSummary")

    decision_id: str
    outcome: Outcome
    conflict_kind: ConflictKind | None = None
    value: Value = None
    reason: str
    decided_at: datetime
    supersedes: str | None = None
