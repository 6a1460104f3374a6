"""The stewards' queue: open conflicts and quarantines, filtered, counted and merged across workers.

Each worker lists the open keys it owns (`local_rows`); the worker asked merges every worker's
answer (`merge`) and names those that did not answer, so a missing worker is visible rather than
its conflicts silently absent.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from streams.core.keys.state import KeyState, state_key
from streams.core.keys.stewardship import Task, task_of
from streams.core.records.policy import FieldRules

_FLAGS = ("unassigned", "overdue")


@dataclass(frozen=True, slots=True)
class QueueFilter:
    """Every part optional; `field` is applied after counting, so the counts show every field.
    `assignee`: the tasks a steward holds ("mine"); `unassigned`: those nobody holds (a lapsed
    lease included); `overdue`: those open past their field's `escalate_after`."""

    field: str | None = None
    kind: str | None = None
    source: str | None = None
    min_age_s: float = 0.0
    assignee: str | None = None
    unassigned: bool = False
    overdue: bool = False

    @classmethod
    def from_query(cls, query: Mapping[str, str]) -> QueueFilter:
        try:
            min_age_s = float(query.get("min_age_s") or 0)
        except ValueError as exc:
            raise ValueError(
                f"min_age_s must be a number of seconds, not {query['min_age_s']!r}"
            ) from exc
        flags = {}
        for flag in _FLAGS:
            raw = (query.get(flag) or "").lower()
            if raw not in ("", "0", "1", "true", "false"):
                raise ValueError(f"{flag} must be 1 or 0, not {query[flag]!r}")
            flags[flag] = raw in ("1", "true")
        return cls(
            field=query.get("field") or None,
            kind=query.get("kind") or None,
            source=query.get("source") or None,
            min_age_s=min_age_s,
            assignee=query.get("assignee") or None,
            **flags,
        )

    def query(self) -> dict[str, str]:
        """The parts each worker applies (all but the field), as query parameters."""
        parts = {"kind": self.kind, "source": self.source, "assignee": self.assignee}
        query = {name: value for name, value in parts.items() if value}
        if self.min_age_s:
            query["min_age_s"] = str(self.min_age_s)
        query |= {flag: "1" for flag in _FLAGS if getattr(self, flag)}
        return query

    def keeps(self, kind: str | None, sources: list[str], age_s: float, task: Task) -> bool:
        return not (
            (self.kind and kind != self.kind)
            or (self.source and self.source not in sources)
            or age_s < self.min_age_s
            or (self.assignee and task.assignee != self.assignee)
            or (self.unassigned and task.assignee is not None)
        )


def local_rows(
    open_keys: Iterable[tuple[KeyState, datetime]],
    now: datetime,
    wanted: QueueFilter,
    worker: str,
    rules_for: Callable[[str], FieldRules | None],
) -> list[dict[str, Any]]:
    """The open keys one worker owns, as queue rows (each a steward's task: who holds it, when
    it is due), filtered by kind, source, age, assignee and whether it is overdue."""
    rows = []
    for state, since in open_keys:
        current = state.current
        rules = rules_for(state.field)
        if current is None or rules is None:
            continue
        kind = current.conflict_kind.value if current.conflict_kind else None
        sources = sorted({admitted.claim.source for admitted in state.claims})
        age_s = max(0.0, (now - since).total_seconds())
        task = task_of(state, rules, now)
        due = since + rules.escalate_after
        if not wanted.keeps(kind, sources, age_s, task) or (wanted.overdue and now < due):
            continue
        rows.append(
            {
                "key": state_key(state.subject, state.field),
                "subject": state.subject,
                "field": state.field,
                "outcome": current.outcome.value,
                "conflict_kind": kind,
                "reason": current.reason,
                "sources": sources,
                "open_since": since.isoformat(),
                "age_s": age_s,
                "decision_id": current.decision_id,
                "worker": worker,
                "assignee": task.assignee,
                "lease_until": task.lease_until.isoformat() if task.lease_until else None,
                "due_at": due.isoformat(),
                "overdue": now >= due,
                "waiting_for_review": task.waiting_for_review,
            }
        )
    return rows


def merge(
    answers: Sequence[tuple[str, list[dict[str, Any]] | None]], wanted: QueueFilter, now: datetime
) -> dict[str, Any]:
    """One cluster-wide queue from each worker's rows (None: that worker did not answer)."""
    rows = [row for _, answer in answers if answer is not None for row in answer]
    counts = Counter(row["field"] for row in rows)
    shown = [row for row in rows if wanted.field is None or row["field"] == wanted.field]
    shown.sort(key=lambda row: (-row["age_s"], row["key"]))
    return {
        "as_of": now.isoformat(),
        "workers": [
            {"url": url, "answered": answer is not None, "open": len(answer or ())}
            for url, answer in answers
        ],
        "unanswered": [url for url, answer in answers if answer is None],
        "counts_per_field": dict(sorted(counts.items())),
        "open_conflicts": shown,
    }
