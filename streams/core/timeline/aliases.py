"""Subject aliases over time: which spelling names a subject when, and where a key's evidence
belongs once an alias takes effect or is retracted.

A steward asserts that one spelling of a subject (`Acme Corp`) names the same thing as another
(`acme`), or retracts that, at an instant: an `AliasChange`, published ahead as a policy is.
The changes with their instants (an `AliasHistory`) are what every worker shares and what replay
is given. Spellings match regardless of case and spacing (`alias_key`: `ACME  Corp` is `acme
corp`). Chains resolve (`ACME-2231` -> `Acme Corp` -> `acme`: both name `acme`), and a change
that would close a cycle at any instant is refused where it is added, so every spelling has one
canonical subject at every instant.

A claim keeps the subject it was sent with; the key it counts on is that subject's canonical
spelling at the key's clock. `belongs_to` answers it for one spelling and `regrouped` for a
key's kept claims and resolutions, the one place that says what an alias moves.
"""

from __future__ import annotations

import json
from bisect import bisect_right
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from types import MappingProxyType
from typing import Any

from streams.core.admission.intake import AdmittedClaim
from streams.core.admission.normalize import normalize_string
from streams.core.decision.agreement import RECENCY, distinct
from streams.core.keys.journal import decode_state, encode_state
from streams.core.keys.state import KeyState, Limits
from streams.core.keys.steward_log import StewardStep
from streams.core.keys.transitions import Transition, regroup
from streams.core.keys.upkeep import RefusedClaim
from streams.core.records.contracts import Resolution, parse_instant
from streams.core.records.errors import AliasError
from streams.core.records.policy import Policy, StringCase

NO_ALIASES: Mapping[str, str] = MappingProxyType({})
_JUST_BEFORE = timedelta(microseconds=1)  # instants are whole microseconds


def alias_key(subject: str) -> str:
    """A spelling as aliases match it: case folded, spaces collapsed (`ACME  Corp` -> `acme
    corp`)."""
    return normalize_string(subject, StringCase.FOLD)


@dataclass(frozen=True, slots=True)
class AliasChange:
    """`alias` names `canonical` from `at` on; `canonical` None retracts the alias. `by`: the
    steward who made the change."""

    alias: str
    canonical: str | None
    at: datetime
    by: str = ""

    def __post_init__(self) -> None:
        if not self.alias.strip():
            raise AliasError("an alias needs a spelling")
        if self.canonical is not None and not self.canonical.strip():
            raise AliasError(f"alias {self.alias!r}: the subject it names is empty")
        if self.canonical is not None and alias_key(self.canonical) == alias_key(self.alias):
            raise AliasError(f"alias {self.alias!r} names itself")
        if self.at.tzinfo is None:
            raise AliasError(f"alias {self.alias!r}: at {self.at.isoformat()} needs a UTC offset")


class AliasHistory:
    """The aliases in force over time. Changes apply in the order of their instants (two at one
    instant, in the order given); before the first, no alias is in force. Each instant's table
    (`alias_key` of a spelling -> the spelling it names) is worked out once, when the history is
    built, and checked for cycles then, with the spellings whose subject it changed (`touched`).
    """

    __slots__ = ("_instants", "_named_by", "_tables", "_touched", "changes")

    def __init__(self, changes: Iterable[AliasChange] = ()) -> None:
        self._instants: list[datetime] = []
        self._tables: list[dict[str, str]] = []
        self._touched: list[set[str]] = []
        self._named_by: dict[str, set[str]] = {}
        """The latest table read backwards: `alias_key` of a subject -> the spellings naming it."""
        added = [self._add(change) for change in sorted(changes, key=lambda change: change.at)]
        self.changes: tuple[AliasChange, ...] = tuple(added)

    @classmethod
    def accepting(
        cls, changes: Iterable[AliasChange]
    ) -> tuple[AliasHistory, list[tuple[AliasChange, AliasError]]]:
        """The history of the changes that can be added, in the order given (which must be the
        order of their instants), and those refused with why: what a worker makes of the aliases
        topic, where a change that would close a cycle is passed over, not applied."""
        history = cls()
        added: list[AliasChange] = []
        refused: list[tuple[AliasChange, AliasError]] = []
        for change in changes:
            try:
                added.append(history._add(change))
            except AliasError as exc:
                refused.append((change, exc))
        history.changes = tuple(added)
        return history, refused

    def joined(self, change: AliasChange) -> AliasHistory:
        """A new history: this one with `change` at its instant (after the changes already there
        for the same instant). AliasError where `change` would close a cycle then, or would make
        a change already there for later close one: what `alias add` refuses to publish."""
        ordered = sorted([*self.changes, change], key=lambda c: c.at)
        joined, refused = AliasHistory.accepting(ordered)
        for passed, exc in refused:
            if passed is change:
                raise exc
            raise AliasError(
                f"alias {change.alias!r} -> {change.canonical!r} at {_moment(change.at)}: the "
                f"change {passed.alias!r} -> {passed.canonical!r} at {_moment(passed.at)} would "
                f"then close a cycle: {exc}"
            )
        return joined

    def superseded_by(self, change: AliasChange) -> AliasChange | None:
        """For a retraction (an unmerge), the next change that names a subject for the same
        spelling again (a later merge), if any: from then on the split no longer stands."""
        if change.canonical is not None:
            return None
        key = alias_key(change.alias)
        later = (c for c in self.changes if c.at > change.at and alias_key(c.alias) == key)
        following = next(later, None)
        return following if following is not None and following.canonical is not None else None

    def _add(self, change: AliasChange) -> AliasChange:
        """Apply `change` on the table of its instant (a copy of the one before, for a new
        instant), or raise AliasError leaving the history as it was. Costs the change's chain
        and the spellings that name it, not the table (a table is copied once per instant)."""
        at, key = change.at, alias_key(change.alias)
        same_instant = bool(self._instants) and self._instants[-1] == at
        if self._instants and at < self._instants[-1]:
            raise AliasError(
                f"alias {change.alias!r} at {at.isoformat()}: changes are added in the order "
                "of their instants"
            )
        table = self._tables[-1] if same_instant else dict(self._tables[-1] if self._tables else {})
        was_end = alias_key(belongs_to(change.alias, table))
        previous = table.get(key)
        if change.canonical is None:
            table.pop(key, None)
        else:
            table[key] = change.canonical
            try:
                _refuse_cycle(table, key, change)
            except AliasError:
                if previous is None:
                    table.pop(key)
                else:
                    table[key] = previous
                raise
        if previous is not None:
            self._named_by.get(alias_key(previous), set()).discard(key)
        if change.canonical is not None:
            self._named_by.setdefault(alias_key(change.canonical), set()).add(key)
        # Whose subject changed: the spelling and those whose chain runs through it; and the
        # subjects they named before and name now.
        touched = {*self._naming(key), was_end, alias_key(belongs_to(change.alias, table))}
        if same_instant:
            self._touched[-1] |= touched
        else:
            self._instants.append(at)
            self._tables.append(table)
            self._touched.append(touched)
        return change

    def _naming(self, key: str) -> set[str]:
        """`key` and every spelling whose chain runs through it, in the latest table."""
        found, frontier = {key}, [key]
        while frontier:
            for spelling in self._named_by.get(frontier.pop(), ()):
                if spelling not in found:
                    found.add(spelling)
                    frontier.append(spelling)
        return found

    def in_force(self, at: datetime) -> Mapping[str, str]:
        """The aliases in force at `at`: `alias_key` of a spelling -> the spelling it names
        (read only: a history's tables never change once it is built)."""
        position = bisect_right(self._instants, at) - 1
        return self._tables[position] if position >= 0 else NO_ALIASES

    def canonical(self, subject: str, at: datetime) -> str:
        """The subject `subject` names at `at`: itself unless it is an alias, followed through
        every alias of a chain."""
        return belongs_to(subject, self.in_force(at))

    def instants(self, until: datetime) -> list[datetime]:
        """The instants a change took effect by `until`, oldest first."""
        return self._instants[: bisect_right(self._instants, until)]

    @property
    def latest(self) -> datetime | None:
        """The instant of the last change, if any."""
        return self._instants[-1] if self._instants else None

    def last_by(self, at: datetime) -> datetime | None:
        """The instant of the last change in force at `at`, if any."""
        position = bisect_right(self._instants, at) - 1
        return self._instants[position] if position >= 0 else None

    def involving(self, subject: str) -> tuple[AliasChange, ...]:
        """The changes that moved evidence into or out of the key of `subject`: its merges and
        splits, oldest first."""
        spelling = alias_key(subject)
        found = []
        for change in self.changes:
            after = self.in_force(change.at)
            before = self.in_force(change.at - _JUST_BEFORE)
            ends = {belongs_to(change.alias, before), belongs_to(change.alias, after)}
            if spelling in {alias_key(change.alias), *map(alias_key, ends)}:
                found.append(change)
        return tuple(found)

    def regroupings(self, subject: str, since: datetime | None, until: datetime) -> list[datetime]:
        """The instants after `since` and by `until` whose change can move evidence into or out
        of the key of `subject` (its spelling, or one whose subject it was or became): where its
        evidence regroups. Others leave its evidence where it is."""
        start = 0 if since is None else bisect_right(self._instants, since)
        end = bisect_right(self._instants, until)
        if start >= end:
            return []
        spelling = alias_key(subject)
        return [self._instants[i] for i in range(start, end) if spelling in self._touched[i]]


def belongs_to(subject: str, table: Mapping[str, str]) -> str:
    """The canonical subject of `subject` under `table` (an `AliasHistory.in_force` table)."""
    if not table:
        return subject
    named = table.get(alias_key(subject))
    while named is not None:
        subject = named
        named = table.get(alias_key(subject))
    return subject


def _refuse_cycle(table: Mapping[str, str], start: str, change: AliasChange) -> None:
    seen = [start]
    named = table.get(start)
    while named is not None:
        key = alias_key(named)
        if key in seen:
            path = " -> ".join([change.alias, *(table[k] for k in seen)])
            raise AliasError(
                f"alias {change.alias!r} -> {change.canonical!r} at {change.at.isoformat()} "
                f"closes a cycle ({path}): retract one of its aliases first"
            )
        seen.append(key)
        named = table.get(key)


@dataclass(frozen=True, slots=True)
class Moved:
    """What leaves a key for another when the aliases change: its claims and resolutions that
    now belong there (their subjects as sent)."""

    claims: tuple[AdmittedClaim, ...] = ()
    refused: tuple[RefusedClaim, ...] = ()
    resolutions: tuple[Resolution, ...] = ()
    steward_log: tuple[StewardStep, ...] = ()

    @classmethod
    def held(cls, state: KeyState) -> Moved:
        """Everything `state` holds that an alias change can move."""
        return cls(state.claims, state.refused, state.resolutions, state.steward_log)

    def __bool__(self) -> bool:
        return bool(self.claims or self.refused or self.resolutions or self.steward_log)


def regrouped(state: KeyState, table: Mapping[str, str]) -> tuple[Moved, dict[str, Moved]]:
    """A key's kept claims, resolutions and stewards' statements split by the subject each
    belongs to under `table`: what stays (about `state.subject`) and what goes, by canonical
    subject. Pure: the state is not changed."""
    parts: dict[str, tuple[list[Any], list[Any], list[Any], list[Any]]] = {}

    def bucket(subject: str) -> tuple[list[Any], list[Any], list[Any], list[Any]]:
        return parts.setdefault(belongs_to(subject, table), ([], [], [], []))

    for admitted in state.claims:
        bucket(admitted.claim.subject)[0].append(admitted)
    for refused in state.refused:
        bucket(refused.claim.claim.subject)[1].append(refused)
    for resolution in state.resolutions:
        bucket(resolution.subject)[2].append(resolution)
    for step in state.steward_log:
        bucket(step.statement.subject)[3].append(step)
    moved = {subject: Moved(*map(tuple, lists)) for subject, lists in sorted(parts.items())}
    return moved.pop(state.subject, Moved()), moved


def gathered(stays: Moved, arriving: Iterable[Moved]) -> tuple[Moved, frozenset[str]]:
    """A key's evidence once its other spellings' arrives: claims once each by id (oldest
    first; an id used for claims that say different things counts in no version, as in any key),
    refused claims oldest first, resolutions once each by id, in the order the engine weighs
    them. Returns the evidence and the ids found disputed. The same whatever order the moves
    come in."""
    moves = [stays, *arriving]
    claims, disputed = distinct([claim for move in moves for claim in move.claims])
    refused = sorted((r for move in moves for r in move.refused), key=lambda r: RECENCY(r.claim))
    resolutions = {r.resolution_id: r for move in moves for r in move.resolutions}
    ordered = sorted(resolutions.values(), key=lambda r: (r.decided_at, r.resolution_id))
    steps = {s.statement.resolution_id: s for move in moves for s in move.steward_log}
    log = sorted(steps.values(), key=lambda s: (s.statement.decided_at, s.statement.resolution_id))
    return Moved(tuple(claims), tuple(refused), tuple(ordered), tuple(log)), disputed


def regroup_keys(
    states: Mapping[tuple[str, str], KeyState],
    table: Mapping[str, str],
    policy: Policy,
    at: datetime,
    limits: Limits,
) -> list[tuple[tuple[str, str], Transition]]:
    """The keys (subject, field) of `states` whose evidence `table` regroups, and the keys it
    goes to, each decided again at `at` under `policy` over what stays and what arrives
    (`gathered`); a key left with nothing says where its evidence went. Keys of a field `policy`
    does not decide are not re-decided. By key; pure: no state is changed."""
    stays: dict[tuple[str, str], Moved] = {}
    arriving: dict[tuple[str, str], list[Moved]] = {}
    notes: dict[tuple[str, str], str] = {}
    for key, state in sorted(states.items()):
        stay, away = regrouped(state, table)
        if not away:
            continue
        stays[key] = stay
        if not stay:
            notes[key] = left_for(away)
        for subject, moved in away.items():
            arriving.setdefault((subject, key[1]), []).append(moved)
    steps = []
    for key in sorted(stays.keys() | arriving.keys()):
        rules = policy.rules_for(key[1])
        if rules is None:  # a field no policy in force decides: nothing re-decides it
            continue
        state = states.get(key) or KeyState(subject=key[0], field=key[1])
        own = stays[key] if key in stays else Moved.held(state)
        evidence, disputed = gathered(own, arriving.get(key, []))
        step = regroup(
            state,
            evidence.claims,
            evidence.refused,
            evidence.resolutions,
            rules,
            policy.version,
            at,
            limits,
            steward_log=evidence.steward_log,
            disputed=(*state.disputed, *sorted(disputed - set(state.disputed))),
            note=notes.get(key),
        )
        steps.append((key, step))
    return steps


def left_for(away: Mapping[str, Moved]) -> str:
    """What the decision of a key whose evidence all went elsewhere says of it."""
    return "merged into " + ", ".join(repr(subject) for subject in sorted(away))


# --- The history as JSON lines -------------------------------------------------------------


def _moment(at: datetime) -> str:
    return at.astimezone(UTC).isoformat().replace("+00:00", "Z")


def change_line(change: AliasChange) -> str:
    """One change as the line the aliases history file holds:
    `{"at": "2026-12-01T00:00:00Z", "alias": "Acme Corp", "canonical": "acme", "by": "ana"}`,
    `"canonical": null` for a retraction."""
    return json.dumps(
        {
            "at": _moment(change.at),
            "alias": change.alias,
            "canonical": change.canonical,
            "by": change.by,
        },
        ensure_ascii=False,
    )


def history_from_lines(lines: Iterable[str], origin: str = "alias history") -> AliasHistory:
    """The history the lines record (blank lines skipped; two changes at one instant apply in the
    order of their lines, others in any order), or AliasError naming `origin`, the line number and
    the problem: a line that is not such a JSON object, an `at` that is not an RFC 3339 instant with
    an offset, a change that closes a cycle."""
    changes = [
        _change(line, f"{origin}:{number}")
        for number, line in enumerate(lines, start=1)
        if line.strip()
    ]
    try:
        return AliasHistory(changes)
    except AliasError as exc:
        raise AliasError(f"{origin}: {exc}") from exc


def _change(line: str, where: str) -> AliasChange:
    try:
        data: Any = json.loads(line)
    except json.JSONDecodeError as exc:
        raise AliasError(f"{where}: not JSON: {exc.msg}") from exc
    if not isinstance(data, dict):
        raise AliasError(f"{where}: a line is a JSON object with `at`, `alias` and `canonical`")
    at, alias, canonical, by = (data.get(k) for k in ("at", "alias", "canonical", "by"))
    if not isinstance(at, str):
        raise AliasError(f"{where}: at: give the RFC 3339 instant the change takes effect")
    if not isinstance(alias, str):
        raise AliasError(f"{where}: alias: give the spelling, as a string")
    if canonical is not None and not isinstance(canonical, str):
        raise AliasError(f"{where}: canonical: the subject it names, or null to retract it")
    try:
        moment = parse_instant(at)
    except ValueError as exc:
        raise AliasError(f"{where}: at: {at!r} is not an RFC 3339 instant: {exc}") from exc
    try:
        return AliasChange(alias, canonical, moment, by if isinstance(by, str) else "")
    except AliasError as exc:
        raise AliasError(f"{where}: {exc}") from exc


# --- Evidence on its way between keys -------------------------------------------------------


def moved_record(subject: str, field: str, moved: Moved) -> bytes:
    """What leaves the key of `subject` for another, as its changelog record would hold it: the
    stream sends it to the other key's owner (`moved_from`)."""
    return encode_state(
        KeyState(
            subject=subject,
            field=field,
            claims=moved.claims,
            refused=moved.refused,
            resolutions=moved.resolutions,
            steward_log=moved.steward_log,
        )
    )


def moved_from(data: bytes, subject: str) -> Moved:
    """The evidence `moved_record` sent, arriving at the key of `subject`. A claim's stored form
    is kept on it as read, written for the key it left: one sent about another spelling than
    `subject` drops it, to be written again naming the subject it was sent about."""
    sent = decode_state(data)
    for admitted in (*sent.claims, *(refused.claim for refused in sent.refused)):
        if admitted.claim.subject != subject:
            admitted.journaled = None
    return Moved.held(sent)
