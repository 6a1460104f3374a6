"""An alias change previewed against the keys it would regroup: for each, what it decides now
beside what it would decide were the change to take effect now, and where its evidence would
go; nothing is moved, sent or stored.

- `touched_keys`: the keys a change can regroup at `now`: those of the subject the alias's
  claims count on now and of the one they would count on (the alias's own, for a retraction),
  one a field the policy in force decides. The worker asks the cluster for their states.
- `alias_preview`: those states (as they stand: each caught up to `now` on the policy history,
  as the web API reads a key) regrouped by the aliases the change would put in force
  (`aliases.regroup_keys`, what the stream and replay do at the change's instant), each key's
  decision now beside the one it would take (`preview_report.Gist`, compared by what it says).
- `render`: the answer for people.

Pure: states in, an `AliasPreview` out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from streams.core.keys.belief import current_decision
from streams.core.keys.state import KeyState, Limits, state_key
from streams.core.reading.preview_report import Gist, KeyPreview, said
from streams.core.records.policy import Policy
from streams.core.timeline.aliases import (
    AliasChange,
    AliasHistory,
    belongs_to,
    regroup_keys,
    regrouped,
)
from streams.core.timeline.rollout import PolicyHistory, catch_up


@dataclass(frozen=True, slots=True)
class Touched:
    """The subjects a change can regroup: the one the alias's claims count on now, the one they
    would count on after it, and their keys (one per field the policy in force decides); and
    the aliases that would be in force with it (`table`)."""

    before: str
    after: str
    keys: tuple[str, ...]
    table: Mapping[str, str]


def touched_keys(
    aliases: AliasHistory, change: AliasChange, policy: Policy, now: datetime
) -> Touched:
    """The keys `change` can regroup were it to take effect at `now`; AliasError where it would
    close a cycle (nothing to preview: it would not be published)."""
    effective = AliasChange(change.alias, change.canonical, now, change.by)
    table = aliases.joined(effective).in_force(now)
    before = aliases.canonical(change.alias, now)
    after = belongs_to(change.alias, table)
    subjects = sorted({before, after})
    keys = tuple(state_key(subject, field) for subject in subjects for field in policy.fields)
    return Touched(before, after, keys, table)


@dataclass(frozen=True, slots=True)
class Move:
    """Evidence a key would send to another: its claims (kept or refused) and resolutions."""

    source: str
    target: str
    claims: int
    resolutions: int

    def as_json(self) -> dict[str, Any]:
        return {
            "from": self.source,
            "to": self.target,
            "claims": self.claims,
            "resolutions": self.resolutions,
        }


@dataclass(frozen=True, slots=True)
class AliasPreview:
    """A change against the keys it touches: where their evidence would go (`moves`) and each
    key decided again, its decision now (`before`; None: it holds nothing now) beside the one
    it would take (`after`). Keys by key."""

    change: AliasChange
    at: datetime
    subject_before: str
    subject_after: str
    keys: tuple[KeyPreview, ...]
    moves: tuple[Move, ...]

    @property
    def flipped(self) -> int:
        return sum(key.flipped for key in self.keys)

    def as_json(self) -> dict[str, Any]:
        return {
            "alias": self.change.alias,
            "subject": self.change.canonical,
            "at": self.at.isoformat(),
            "subject_before": self.subject_before,
            "subject_after": self.subject_after,
            "moves": [move.as_json() for move in self.moves],
            "keys": [
                {**key.as_json(), "field": key.field, "flipped": key.flipped} for key in self.keys
            ],
            "flipped": self.flipped,
        }


def alias_preview(
    states: Mapping[str, KeyState],
    policies: PolicyHistory,
    aliases: AliasHistory,
    change: AliasChange,
    now: datetime,
    limits: Limits,
) -> AliasPreview:
    """`change` taking effect at `now` against the states of the keys it touches (`states`, by
    key, those that hold anything; `touched_keys` names them), as the stream would regroup them
    then. AliasError where the change would close a cycle."""
    policy = policies.in_force(now)
    touched = touched_keys(aliases, change, policy, now)
    table = touched.table
    caught: dict[tuple[str, str], KeyState] = {}
    for state in states.values():
        steps = catch_up(state, policies, now, limits)
        caught[(state.subject, state.field)] = steps[-1][1].state if steps else state
    moves = []
    for (subject, field), state in sorted(caught.items()):
        for target, moved in regrouped(state, table)[1].items():
            claims = len(moved.claims) + len(moved.refused)
            moves.append(
                Move(
                    state_key(subject, field),
                    state_key(target, field),
                    claims,
                    len(moved.resolutions),
                )
            )
    keys = []
    for (subject, field), step in regroup_keys(caught, table, policy, now, limits):
        held = caught.get((subject, field))
        rules = policy.rules_for(field)
        before = None
        if held is not None and rules is not None:
            before = Gist.of(current_decision(held, rules, policy.version, now))
        after = Gist.of(step.arbitration.decision)
        keys.append(KeyPreview(state_key(subject, field), field, before, after))
    return AliasPreview(change, now, touched.before, touched.after, tuple(keys), tuple(moves))


def render(answer: Mapping[str, Any]) -> list[str]:
    """An `AliasPreview`'s JSON (as the web API answers it) for people: what the change would
    do, where evidence would go, and each key's decision now and after."""
    alias, subject = answer["alias"], answer["subject"]
    what = f"alias {alias!r} -> {subject!r}" if subject else f"retracting alias {alias!r}"
    before, after = answer["subject_before"], answer["subject_after"]
    lines = [f"{what}, were it to take effect at {answer['at']}:"]
    if before == after:
        lines.append(f"  claims about {alias!r} already count on {after!r}: nothing moves")
        return lines
    lines.append(f"  claims about {alias!r} would count on {after!r} (now on {before!r})")
    for move in answer["moves"]:
        evidence = _counted(move["claims"], "claim")
        if move["resolutions"]:
            evidence += " and " + _counted(move["resolutions"], "resolution")
        lines.append(f"  {move['from']}: {evidence} would move to {move['to']}")
    if not answer["moves"]:
        lines.append("  no key holds evidence that would move")
    for key in answer["keys"]:
        now = said(Gist.from_json(key["before"]) if key["before"] else None)
        then = Gist.from_json(key["after"])
        if key["flipped"]:
            reason = f" ({then.reason})" if then.reason else ""
            lines.append(f"  {key['key']}: {now} -> {said(then)}{reason}")
        else:
            lines.append(f"  {key['key']}: {now}, unchanged")
    decided = _counted(len(answer["keys"]), "key")
    lines.append(f"{decided} decided again, {answer['flipped']} would flip; nothing was published")
    return lines


def _counted(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")
