"""A decision as a key's state remembers it: the `DecisionSummary` each emitted belief leaves in
the key's history.

Where it sits: a transition (keys/transitions.py) makes one for each decision it emits and keeps the
last `Limits.max_history`; the journal (journal.py) stores them with the key and reads them back on
every decoded-cache miss, and the as-of reading (asof.py) and the console read them. A plain slotted
class, not a pydantic model: the history is rebuilt on every miss, where a model's `__dict__` and
fields-set took three times the memory and five times the building. Values are already of their
validated types wherever one is made (the engine's verdict, the journal's typed read, or
`stored.EarlierSummary` for the forms written before version 3).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from msgspec import Raw
from pydantic_core import to_jsonable_python

from streams.core.records.contracts import ConflictKind, Outcome, Value


class DecisionSummary:
    """One emitted decision: its id, outcome, value and reason, when it was made and what it
    superseded. Not to be changed once built; equal (and hashed) by those seven fields, not by
    `journaled`."""

    __slots__ = (
        "conflict_kind",
        "decided_at",
        "decision_id",
        "journaled",
        "outcome",
        "reason",
        "supersedes",
        "value",
    )

    decision_id: str
    outcome: Outcome
    conflict_kind: ConflictKind | None
    value: Value
    reason: str
    decided_at: datetime
    supersedes: str | None
    journaled: Raw | None
    """Its stored form (the journal's bytes), kept once made or as read: a key's state is
    journaled again on every change, and the decisions in its history never change."""

    def __init__(
        self,
        decision_id: str,
        outcome: Outcome,
        conflict_kind: ConflictKind | None,
        value: Value,
        reason: str,
        decided_at: datetime,
        supersedes: str | None,
        journaled: Raw | None = None,
    ) -> None:
        self.decision_id = decision_id
        self.outcome = outcome
        self.conflict_kind = conflict_kind
        self.value = value
        self.reason = reason
        self.decided_at = decided_at
        self.supersedes = supersedes
        self.journaled = journaled

    def _fields(self) -> tuple[object, ...]:
        return (
            self.decision_id,
            self.outcome,
            self.conflict_kind,
            self.value,
            self.reason,
            self.decided_at,
            self.supersedes,
        )

    def __eq__(self, other: object) -> bool:
        if type(other) is not DecisionSummary:
            return NotImplemented
        return self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        return (
            f"DecisionSummary(decision_id={self.decision_id!r}, outcome={self.outcome!r}, "
            f"conflict_kind={self.conflict_kind!r}, value={self.value!r}, "
            f"reason={self.reason!r}, decided_at={self.decided_at!r}, "
            f"supersedes={self.supersedes!r})"
        )

    def as_json(self) -> dict[str, Any]:
        """Its fields as JSON values, as the console shows a decision (and the state formats
        before version 3 stored one): enums as their values, times in ISO form."""
        fields: dict[str, Any] = to_jsonable_python(dict(zip(_NAMES, self._fields(), strict=True)))
        return fields


_NAMES = ("decision_id", "outcome", "conflict_kind", "value", "reason", "decided_at", "supersedes")
