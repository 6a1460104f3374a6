"""Alias changes reviewed where the policy asks, as a steward's resolution is.

Where the policy in force at a change's instant says `defaults.review.approvals: N`, a merge or
split counts once N stewards other than its author have made the same change (the same alias,
naming the same subject, or retracting it): each such record on the aliases topic is an
approval, and its author's own counts only where `author_may_approve` says so. The change then
takes effect at the later of its own instant and the last approval's; until then it is waiting:
listed, not applied. Another change of the same alias made meanwhile takes its place. A record
naming no steward approves nothing. Every worker reads the same records in the same order, so
each applies the same changes at the same instants, and replay is given that history.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from streams.core.records.policy import Review
from streams.core.timeline.aliases import AliasChange, alias_key


@dataclass(frozen=True, slots=True)
class Waiting:
    """A change waiting for approvals: the stewards who approved it so far, of `needs`."""

    change: AliasChange
    needs: int
    approvals: tuple[str, ...] = ()

    def as_json(self) -> dict[str, Any]:
        change = self.change
        return {
            "alias": change.alias,
            "subject": change.canonical,
            "at": change.at.isoformat(),
            "by": change.by,
            "needs": self.needs,
            "approvals": list(self.approvals),
        }


def reviewed(
    changes: Iterable[AliasChange], review_at: Callable[[datetime], Review]
) -> tuple[list[AliasChange], list[Waiting]]:
    """The changes that take effect, each at its instant (in the order of their instants), and
    those still waiting for approvals, from `changes` in the order of their instants."""
    applied: list[AliasChange] = []
    waiting: dict[str, Waiting] = {}
    for change in changes:
        key = alias_key(change.alias)
        held = waiting.get(key)
        if held is not None and held.change.canonical == change.canonical:
            approved = _approved(held, change, review_at(held.change.at))
            if len(approved.approvals) < approved.needs:
                waiting[key] = approved
                continue
            del waiting[key]
            applied.append(replace(held.change, at=max(held.change.at, change.at)))
            continue
        needs = review_at(change.at).approvals
        waiting.pop(key, None)  # another change of the alias takes the waiting one's place
        if needs == 0:
            applied.append(change)
        else:
            waiting[key] = Waiting(change, needs)
    applied.sort(key=lambda change: change.at)  # stable: one instant's, in the order made
    return applied, list(waiting.values())


def _approved(held: Waiting, change: AliasChange, review: Review) -> Waiting:
    by = change.by
    if not by or by in held.approvals or (by == held.change.by and not review.author_may_approve):
        return held
    return replace(held, approvals=(*held.approvals, by))
