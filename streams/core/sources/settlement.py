"""Settled outcomes: which sources a closed conflict proved right, and the tallies of it.

Where it sits: beside the decision, never in it. When a key that was open (a conflict or a
quarantine) is settled, by a person's resolution or by a later observation that the rules let
decide, `settlement_of` compares every claim that was evidence of the open decision with the settled
value, as the engine compares values (normalized, the field's tolerance): `agreed` or
`disagreed`, per source, replica and field. A `Ledger` sums those judgements per day, with the
pairwise co-agreement that `dependence.py` reads, and is kept as one task-level record of the
changelog by the stream shell (`streams.arbiter.sources`). Nothing here is read back by the rules:
authority stays the operator's.

A ledger depends only on the set of settlements it was given, not their order (counts are sums,
the latest disagreements the greatest by instant and key), while its bounds hold.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import date, datetime
from enum import StrEnum
from itertools import combinations
from typing import Any, TypeVar

from streams.core.admission.intake import AdmittedClaim
from streams.core.admission.normalize import values_agree
from streams.core.decision.agreement import clusters
from streams.core.keys.state import KeyState, state_key
from streams.core.records.contracts import (
    OPEN_OUTCOMES,
    ClaimStatus,
    Decision,
    EvidenceRole,
    Outcome,
)

LEDGER_FORMAT = 1
KEPT_DAYS = 92
"""Days of tallies a ledger keeps (the oldest go first): what `--since` can reach back to."""
KEPT_DISAGREEMENTS = 5
"""Latest disagreements kept per source, replica and field: the keys a person looks at first."""
MAX_ROWS = 2048
MAX_PAIRS = 4096
"""Rows and pairs one day of a ledger tracks: a row or pair beyond them is counted as untracked,
so that a flood of invented replica names cannot grow a task's record without bound."""
_NOT_JUDGED = frozenset({EvidenceRole.STALE, EvidenceRole.EXCLUDED})
"""Evidence that did not speak for its source when the key closed: too old, out of scope or
period. A claim superseded by the settling observation did speak while the key was open."""


class Settler(StrEnum):
    RESOLUTION = "resolution"  # a person's resolution
    OBSERVATION = "observation"  # a later claim the rules let decide


@dataclass(frozen=True, slots=True)
class Judgement:
    """One claim of the open decision, against the settled value. `statement`: which of the
    open decision's statements it made (claims with the same number said the same thing)."""

    source: str
    replica: str
    claim_id: str
    agreed: bool
    statement: int

    @property
    def participant(self) -> str:
        """The name a pair is counted under: the source, and its replica where there is one."""
        return f"{self.source}/{self.replica}" if self.replica else self.source


@dataclass(frozen=True, slots=True)
class Settlement:
    key: str
    field: str
    decision_id: str
    settled_at: datetime
    by: Settler
    judgements: tuple[Judgement, ...]


def settlement_of(
    before: KeyState | None, decision: Decision, tolerance: float
) -> Settlement | None:
    """The settlement `decision` makes of the key's open decision in `before`, if it makes one:
    the key was open, is now resolved, by a resolution or by a claim the open decision did not
    have winning (not by time alone, nor by a claim withdrawn). Judged: what each source and
    replica last said while the key was open, unless it had gone stale or out of scope."""
    if before is None or before.current is None or before.current.outcome not in OPEN_OUTCOMES:
        return None
    if decision.outcome is not Outcome.RESOLVED:
        return None
    held = {a.claim.claim_id for a in before.claims}
    roles = {e.claim_id: e.role for e in decision.evidence}
    by = Settler.RESOLUTION if decision.resolution_id is not None else None
    if by is None:
        winners = [claim_id for claim_id, role in roles.items() if role is EvidenceRole.WINNER]
        if not winners or any(claim_id in held for claim_id in winners):
            return None
        by = Settler.OBSERVATION
    spoke = [
        admitted
        for admitted in _latest_per_replica(before)
        if roles.get(admitted.claim.claim_id, EvidenceRole.EXCLUDED) not in _NOT_JUDGED
    ]
    settled_status = decision.status or ClaimStatus.PRESENT
    judgements = []
    for number, group in enumerate(clusters(spoke, tolerance)):
        for admitted in group:
            claim = admitted.claim
            agreed = claim.status == settled_status and values_agree(
                admitted.value, decision.value, tolerance
            )
            judgements.append(
                Judgement(claim.source, claim.replica or "", claim.claim_id, agreed, number)
            )
    judgements.sort(key=lambda j: (j.source, j.replica, j.claim_id))
    return Settlement(
        key=state_key(decision.subject, decision.field),
        field=decision.field,
        decision_id=decision.decision_id,
        settled_at=decision.decided_at,
        by=by,
        judgements=tuple(judgements),
    )


def _latest_per_replica(state: KeyState) -> list[AdmittedClaim]:
    """What each source (and replica) last said while the key was open: its latest claim."""
    latest: dict[tuple[str, str | None], AdmittedClaim] = {}
    for admitted in state.claims:
        claim = admitted.claim
        seen = latest.get((claim.source, claim.replica))
        if seen is None or seen.recency < admitted.recency:
            latest[(claim.source, claim.replica)] = admitted
    return list(latest.values())


RowKey = tuple[str, str, str]
"""source, replica ("" for none), field."""
PairKey = tuple[str, str, str]
"""field, then two participants in name order."""


@dataclass(slots=True)
class Counts:
    settled: int = 0
    agreed: int = 0

    @property
    def disagreed(self) -> int:
        return self.settled - self.agreed


@dataclass(slots=True)
class PairCounts:
    """Settlements that judged both participants of a pair on one field."""

    together: int = 0
    same: int = 0  # they made the same statement
    first_agreed: int = 0
    second_agreed: int = 0
    both_agreed: int = 0
    same_wrong: int = 0  # the same statement, and it was not the settled value: the copying signal

    def as_list(self) -> list[int]:
        return [
            self.together,
            self.same,
            self.first_agreed,
            self.second_agreed,
            self.both_agreed,
            self.same_wrong,
        ]


@dataclass(frozen=True, slots=True, order=True)
class Disagreement:
    settled_at: str  # ISO 8601, UTC: orders as the instants do
    key: str
    decision_id: str


@dataclass(slots=True)
class Day:
    rows: dict[RowKey, Counts] = field(default_factory=dict)
    pairs: dict[PairKey, PairCounts] = field(default_factory=dict)
    untracked: int = 0  # judgements and pairs beyond MAX_ROWS / MAX_PAIRS


@dataclass(slots=True)
class Ledger:
    """A task's (or, merged, the cluster's) tallies of settled outcomes."""

    days: dict[str, Day] = field(default_factory=dict)
    last_settled: dict[RowKey, str] = field(default_factory=dict)
    disagreements: dict[RowKey, list[Disagreement]] = field(default_factory=dict)

    def add(self, settlement: Settlement) -> None:
        settled_at = settlement.settled_at.isoformat()
        day = self._day(settlement.settled_at.date().isoformat())
        if day is None:
            return
        for judgement in settlement.judgements:
            row_key = (judgement.source, judgement.replica, settlement.field)
            counts = _tracked(day.rows, row_key, MAX_ROWS, Counts)
            if counts is None:
                day.untracked += 1
                continue
            counts.settled += 1
            counts.agreed += judgement.agreed
            self.last_settled[row_key] = max(self.last_settled.get(row_key, ""), settled_at)
            if not judgement.agreed:
                latest = Disagreement(settled_at, settlement.key, settlement.decision_id)
                self._note_disagreement(row_key, [latest])
        for first, second in _pairs(settlement.judgements):
            pair_key = (settlement.field, first.participant, second.participant)
            pair = _tracked(day.pairs, pair_key, MAX_PAIRS, PairCounts)
            if pair is None:
                day.untracked += 1
                continue
            same = first.statement == second.statement
            pair.together += 1
            pair.same += same
            pair.first_agreed += first.agreed
            pair.second_agreed += second.agreed
            pair.both_agreed += first.agreed and second.agreed
            pair.same_wrong += same and not first.agreed

    def merge(self, other: Ledger) -> None:
        for name, theirs in other.days.items():
            day = self._day(name)
            if day is None:
                continue
            for row_key, counts in theirs.rows.items():
                mine = day.rows.setdefault(row_key, Counts())
                mine.settled += counts.settled
                mine.agreed += counts.agreed
            for pair_key, pair in theirs.pairs.items():
                total = day.pairs.setdefault(pair_key, PairCounts())
                for name_, value in zip(_PAIR_FIELDS, pair.as_list(), strict=True):
                    setattr(total, name_, getattr(total, name_) + value)
            day.untracked += theirs.untracked
        for row_key, instant in other.last_settled.items():
            self.last_settled[row_key] = max(self.last_settled.get(row_key, ""), instant)
        for row_key, latest in other.disagreements.items():
            self._note_disagreement(row_key, latest)

    def since(self, start: date | None) -> Ledger:
        """The days from `start` on (every day for None), with the disagreements since then."""
        if start is None:
            return self
        first = start.isoformat()
        kept = Ledger(days={name: day for name, day in self.days.items() if name >= first})
        kept.last_settled = {k: v for k, v in self.last_settled.items() if v >= first}
        for row_key, latest in self.disagreements.items():
            recent = [d for d in latest if d.settled_at >= first]
            if recent:
                kept.disagreements[row_key] = recent
        return kept

    def _day(self, name: str) -> Day | None:
        """The day's tallies, made if new; None for a day older than every kept one."""
        day = self.days.get(name)
        if day is not None:
            return day
        if len(self.days) >= KEPT_DAYS:
            oldest = min(self.days)
            if name < oldest:
                return None
            del self.days[oldest]
        day = self.days[name] = Day()
        return day

    def _note_disagreement(self, row_key: RowKey, new: list[Disagreement]) -> None:
        latest = set(self.disagreements.get(row_key, ())) | set(new)
        self.disagreements[row_key] = sorted(latest, reverse=True)[:KEPT_DISAGREEMENTS]


_T = TypeVar("_T")
_PAIR_FIELDS = ("together", "same", "first_agreed", "second_agreed", "both_agreed", "same_wrong")


def _tracked(table: dict[Any, _T], key: Any, bound: int, make: type[_T]) -> _T | None:
    found = table.get(key)
    if found is None and len(table) < bound:
        found = table[key] = make()
    return found


def _pairs(judgements: tuple[Judgement, ...]) -> list[tuple[Judgement, Judgement]]:
    """Each two judgements of different sources, in participant order; a participant judged
    twice in one settlement (two claims of one replica) is paired by its first claim only."""
    first_of: dict[str, Judgement] = {}
    for judgement in judgements:
        first_of.setdefault(judgement.participant, judgement)
    ordered = [first_of[name] for name in sorted(first_of)]
    return [(a, b) for a, b in combinations(ordered, 2) if a.source != b.source]


def encode_ledger(ledger: Ledger) -> bytes:
    """The ledger's stored form: JSON with sorted keys, so the same ledger stores the same bytes."""
    return json.dumps(ledger_document(ledger), sort_keys=True, separators=(",", ":")).encode()


def ledger_document(ledger: Ledger) -> dict[str, Any]:
    """The ledger as JSON values, as stored and as one worker hands it to another."""
    days = {
        name: {
            "rows": sorted([*k, c.settled, c.agreed] for k, c in day.rows.items()),
            "pairs": sorted([*k, *p.as_list()] for k, p in day.pairs.items()),
            "untracked": day.untracked,
        }
        for name, day in ledger.days.items()
    }
    return {
        "format": LEDGER_FORMAT,
        "days": days,
        "last_settled": sorted([*k, v] for k, v in ledger.last_settled.items()),
        "disagreements": sorted(
            [*k, d.settled_at, d.key, d.decision_id]
            for k, latest in ledger.disagreements.items()
            for d in latest
        ),
    }


class UnknownLedgerFormat(ValueError):
    pass


def decode_ledger(data: bytes) -> Ledger:
    return ledger_from_document(json.loads(data))


def ledger_from_document(document: dict[str, Any]) -> Ledger:
    if document.get("format") != LEDGER_FORMAT:
        raise UnknownLedgerFormat(f"source ledger format {document.get('format')!r}")
    ledger = Ledger()
    for name, day in document["days"].items():
        tallies = ledger.days[name] = Day(untracked=day["untracked"])
        for source, replica, field_name, settled, agreed in day["rows"]:
            tallies.rows[(source, replica, field_name)] = Counts(settled, agreed)
        for field_name, first, second, *counts in day["pairs"]:
            tallies.pairs[(field_name, first, second)] = PairCounts(*counts)
    for source, replica, field_name, instant in document["last_settled"]:
        ledger.last_settled[(source, replica, field_name)] = instant
    for source, replica, field_name, instant, key, decision_id in document["disagreements"]:
        ledger.disagreements.setdefault((source, replica, field_name), []).append(
            Disagreement(instant, key, decision_id)
        )
    for latest in ledger.disagreements.values():
        latest.sort(reverse=True)
    return ledger
