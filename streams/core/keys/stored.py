"""The stored forms of a key's state (versions 3 to 5) as msgspec Structs: what the journal
writes to the changelog and the state store, field by field, in the order written; and
`EarlierSummary`, which validates a decision summary as versions 1 and 2 stored it.

Where it sits: journal.py turns a `KeyState` into a `StoredState` and one msgspec encoder writes
it; a typed decoder reads the bytes back into these Structs, and journal.py rebuilds the state.
Version 4 writes these records in MessagePack, version 3 wrote the same records in JSON: one
set of Structs reads both. This module holds only these classes: msgspec's Struct and pydantic's
model have a metaclass, which mypyc cannot compile, so a compiled core leaves this module
interpreted and the journal's code around it native.

Each field is the record model's own under its stored short name, left out at its default (None,
a model default, or UNSET for what is stored only when it differs), times in microseconds since
the epoch; the subject and field are the key's and stored once, on the state.
"""

from __future__ import annotations

from datetime import datetime
from typing import Final, Literal

import msgspec
from pydantic import BaseModel, ConfigDict

from streams.core.keys.steward_log import Standing
from streams.core.records.contracts import (
    Authority,
    ClaimStatus,
    ConflictKind,
    Outcome,
    SourceClass,
    StewardAct,
    Value,
)


class StoredMoney(msgspec.Struct, gc=False):
    amount_minor: int
    currency: str


# An integer MessagePack has no form for (below -2**63 or above 2**64 - 1) is stored as its
# digits, the one item of an array (version 3's JSON held it as a number).
StoredValue = None | bool | int | float | str | StoredMoney | tuple[str]


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
        "channel": "C",
        "sent_about": "s",
    },
):
    """A claim as admitted: the claim's fields, then what admission gave it under capitals
    (A: authority; V: the normalized value when it differs from the claim's own; L: the
    lineage when not the claim's default; C: the class of the topic it arrived on, where that
    overrode its own; s: the subject it was sent about, where an alias put it on the key of
    another spelling)."""

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
    confidence: float | None = None
    trace_id: str | None = None
    producer: str | None = None
    attributes: dict[str, str] = msgspec.field(default_factory=dict)
    authority: Authority
    admitted_value: StoredValue | msgspec.UnsetType = msgspec.UNSET
    admitted_lineage: str | msgspec.UnsetType = msgspec.UNSET
    channel: SourceClass | None = None
    sent_about: str | None = None


class StoredRefusal(msgspec.Struct, kw_only=True, rename={"claim": "c", "reason": "r"}):
    """A kept claim the policy in force refuses: its stored form (as admitted before) and why."""

    claim: msgspec.Raw
    reason: str


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
        "sent_about": "s",
        "act": "act",
        "target_id": "tg",
        "basis_digest": "bd",
        "assignee": "as",
    },
):
    """A resolution; `sent_about`, the subject it named, where an alias put it on the key of
    another spelling."""

    resolution_id: str
    status: ClaimStatus = ClaimStatus.PRESENT
    value: StoredValue = None
    unit: str | None = None
    decided_by: str
    note: str = ""
    decided_at: int
    resolves_decision_id: str | None = None
    sent_about: str | None = None
    act: StewardAct = StewardAct.RESOLVE
    target_id: str | None = None
    basis_digest: str | None = None
    assignee: str | None = None


class StoredStep(
    msgspec.Struct,
    kw_only=True,
    omit_defaults=True,
    gc=False,
    rename={"statement": "r", "standing": "st", "needs": "n", "why": "w"},
):
    """A steward's statement the key keeps besides its resolutions in force (`StewardStep`)."""

    statement: StoredResolution
    standing: Standing
    needs: int = 0
    why: str = ""


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


class StoredState(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A key's state; `version` first, so a reader knows the form before reading the rest (3 in
    JSON, 4 in MessagePack, 5 the same with a steward log)."""

    version: Literal[3, 4, 5]
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
    policy_version: str | None = None
    """The policy the key was last decided under (absent: written before it was recorded)."""
    refused: tuple[StoredRefusal, ...] = ()
    timer_waits: bool = False
    """`KeyState.timer_waits` (absent, as every state's but a few: false)."""
    aliases_at: int | None = None
    """`KeyState.aliases_at` (absent where no alias change reached the key)."""
    steward_log: tuple[StoredStep, ...] = ()
    """`KeyState.steward_log`: written only in version 5, which a state holding one is."""


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


STEWARD_LOG_VERSION: Final = 5
"""The version of a state that holds a steward log (journal.py writes 4 for one without)."""


class _Version(msgspec.Struct):
    version: object


_VERSION_ONLY = msgspec.msgpack.Decoder(_Version)


def holds_steward_log(data: bytes) -> bool:
    """Whether a stored state holds a steward log, read without decoding the rest of it."""
    if data[:1] == b"{":
        return False
    try:
        return _VERSION_ONLY.decode(data).version == STEWARD_LOG_VERSION
    except msgspec.DecodeError:
        return False
