"""The decision record: what the engine decided about one key, and the records built from it.

Where it sits: the rules (`engine.py`) reach a `Verdict` and give each claim a role; this module
turns them into an `Arbitration`, which carries the decision id and the roles at once and builds the
Decision (with its evidence), the EpochChange and the ReobserveRequest only when someone reads them.
Downstream, a key's state keeps the last arbitration in memory and the pipeline sends its records.
Every path that decides (the full rules, their shortcuts in `shortcuts/`, a decision restated as
first emitted) computes the id here, from the verdict.
"""

from __future__ import annotations

import hashlib
from bisect import insort
from datetime import datetime
from typing import Final

from streams.core.admission.intake import AdmittedClaim
from streams.core.decision.agreement import RECENCY
from streams.core.decision.side_records import (
    EpochShift,
    Roles,
    epoch_event,
    evidence_fields,
    reobserve_request,
)
from streams.core.decision.summary import DecisionSummary
from streams.core.records.contracts import (
    Action,
    Authority,
    ClaimStatus,
    ConflictKind,
    Decision,
    EpochChange,
    Evidence,
    Money,
    Outcome,
    ReobserveRequest,
    Value,
    constructed,
)
from streams.core.records.members import QUARANTINED, RESOLVED
from streams.core.records.policy import FieldRules, OnConflict

_CONFLICT_ACTIONS: Final = {
    OnConflict.BLOCK: Action.BLOCK,
    OnConflict.DEGRADE: Action.DEGRADE,
    OnConflict.SURFACE: Action.CONTINUE,
    OnConflict.MOST_RECENT: Action.BLOCK,
}


def _action_of(outcome: Outcome, on_conflict: OnConflict) -> Action:
    if outcome is Outcome.RESOLVED:
        return Action.CONTINUE
    if outcome is Outcome.QUARANTINED:
        return Action.BLOCK
    if outcome is Outcome.INSUFFICIENT:
        return Action.BLOCK if on_conflict is OnConflict.BLOCK else Action.DEGRADE
    return _CONFLICT_ACTIONS[on_conflict]


_ACTIONS: Final = {c: {o: _action_of(o, c) for o in Outcome} for c in OnConflict}
"""What a decision asks of its readers, by the field's on_conflict and then its outcome: a table
worked out once (reading enum members per decision is slow, see `members.py`), nested so that
a lookup builds no key tuple."""


class Verdict:
    """What the rules found: the parts of a decision its id is made of, and how it was reached.

    `by_precedence` is set by the rule that resolves by authority precedence (corroboration,
    without a tiebreak): the winner's own value decides, so one more claim that agrees with it,
    or is weaker, leaves the belief standing (see `shortcuts.incremental.placement`).

    A plain slotted class, not a NamedTuple: every arbitration builds one, and a NamedTuple's
    `__new__` is Python code where this class's `__init__` compiles. Not to be changed once
    built; equal field by field."""

    __slots__ = (
        "by_precedence",
        "kind",
        "outcome",
        "reason",
        "resolution_id",
        "status",
        "tiebreak",
        "value",
    )

    outcome: Outcome
    reason: str
    kind: ConflictKind | None
    status: ClaimStatus | None
    value: Value
    tiebreak: str | None
    resolution_id: str | None
    by_precedence: bool

    def __init__(
        self,
        outcome: Outcome,
        reason: str,
        kind: ConflictKind | None = None,
        status: ClaimStatus | None = None,
        value: Value = None,
        tiebreak: str | None = None,
        resolution_id: str | None = None,
        by_precedence: bool = False,
    ) -> None:
        self.outcome, self.reason, self.kind, self.status = outcome, reason, kind, status
        self.value, self.tiebreak, self.resolution_id = value, tiebreak, resolution_id
        self.by_precedence = by_precedence

    def _fields(self) -> tuple[object, ...]:
        return (
            self.outcome,
            self.reason,
            self.kind,
            self.status,
            self.value,
            self.tiebreak,
            self.resolution_id,
            self.by_precedence,
        )

    def __eq__(self, other: object) -> bool:
        if type(other) is not Verdict:
            return NotImplemented
        return self._fields() == other._fields()

    __hash__ = None  # type: ignore[assignment]  # a money value is a model

    def __repr__(self) -> str:
        return f"Verdict{self._fields()!r}"


_PRECEDENCE: Final = {authority: f"{authority.value}_precedence" for authority in Authority}
"""The reason of a verdict resolved by each authority's precedence (`.value` is a Python
property: read once here, not per decision)."""


def resolved_by(winner: AdmittedClaim, tiebreak: str | None) -> Verdict:
    """The winner's value believed: by its authority's precedence, or by a tiebreak."""
    return Verdict(
        RESOLVED,
        "most_recent" if tiebreak else _PRECEDENCE[winner.authority],
        None,
        winner.status,
        winner.value,
        tiebreak,
        None,
        tiebreak is None,
    )


class Belief:
    """A decision over plain claims (no epoch, period or scope) that one more plain claim may
    leave standing: resolved by precedence (`winner` set), or a conflict at authority `rank`.
    A plain slotted class (a frozen dataclass sets each field through `object.__setattr__`, and
    one is built per arbitration); not to be changed once built."""

    __slots__ = ("policy_version", "rank", "rules", "winner")

    rank: int
    winner: AdmittedClaim | None
    rules: FieldRules
    policy_version: str

    def __init__(
        self, rank: int, winner: AdmittedClaim | None, rules: FieldRules, policy_version: str
    ) -> None:
        self.rank, self.winner = rank, winner
        self.rules, self.policy_version = rules, policy_version

    def __repr__(self) -> str:
        return (
            f"Belief(rank={self.rank!r}, winner={self.winner!r}, rules={self.rules.name!r}, "
            f"policy_version={self.policy_version!r})"
        )


class Arbitration:
    """What the engine decided: the decision id and roles at once, the full records on demand.

    Building a Decision with its evidence costs more than deciding; a stream emits only when the
    belief changes, so the records are built only when someone reads them."""

    decision_id: str

    def __init__(
        self,
        *,
        subject: str,
        field: str,
        claims: list[AdmittedClaim],
        roles: Roles,
        verdict: Verdict,
        rules: FieldRules,
        policy_version: str,
        decided_at: datetime,
        supersedes: str | None,
        shift: EpochShift | None = None,
        belief: Belief | None = None,
        known_id: str | None = None,
        previous: Arbitration | None = None,
    ) -> None:
        """`previous`: the key's last arbitration, whose id is taken (not hashed again) where
        this one decided the same (`_decides`)."""
        self.subject, self.field = subject, field
        self.belief = belief
        """Set when a new claim may be added without arbitrating again (see
        `shortcuts.incremental.placement`)."""
        self.roles = roles
        self.outcome = verdict.outcome
        self._claims, self._verdict, self._rules = claims, verdict, rules
        self._policy_version, self._decided_at = policy_version, decided_at
        self._supersedes, self._shift = supersedes, shift
        self._decision: Decision | None = None
        self._events: tuple[EpochChange | None, ReobserveRequest | None] | None = None
        """The records built on demand, kept until `place` changes the decision."""
        self.action = _action(verdict, rules)
        resolved = verdict.outcome is RESOLVED
        self.unit = rules.unit or rules.currency if resolved and verdict.value is not None else None
        if (
            known_id is None
            and previous is not None
            and previous._decides(subject, field, verdict, rules, policy_version)
        ):
            known_id = previous.decision_id
        self.decision_id = known_id or decision_id(
            subject=subject,
            field=field,
            verdict=verdict,
            unit=self.unit,
            action=self.action,
            policy_version=policy_version,
        )

    @property
    def claims(self) -> list[AdmittedClaim]:
        """The evidence, oldest first."""
        return self._claims

    @property
    def verdict(self) -> Verdict:
        return self._verdict

    @property
    def supersedes(self) -> str | None:
        return self._supersedes

    @property
    def policy_version(self) -> str:
        return self._policy_version

    @property
    def decided_at(self) -> datetime:
        return self._decided_at

    @property
    def decision(self) -> Decision:
        """Built once, without re-validation (`constructed`): every part comes from validated
        claims and the policy. Tests round-trip decisions through Avro and `model_validate`."""
        built = self._decision
        if built is None:
            built = self._decision = self._built_decision()
        return built

    def _built_decision(self) -> Decision:
        verdict = self._verdict
        roles = self.roles
        return constructed(
            Decision,
            {
                "decision_id": self.decision_id,
                "subject": self.subject,
                "field": self.field,
                "outcome": verdict.outcome,
                "conflict_kind": verdict.kind,
                "status": verdict.status,
                "value": verdict.value,
                "unit": self.unit,
                "action": self.action,
                "policy_version": self._policy_version,
                "reason": verdict.reason,
                "tiebreak": verdict.tiebreak,
                "resolution_id": verdict.resolution_id,
                "evidence": tuple(
                    constructed(Evidence, evidence_fields(a, roles[a.claim_id], self.subject))
                    for a in self._claims
                ),
                "decided_at": self._decided_at,
                "supersedes": self._supersedes,
            },
        )

    def summarized(self, decided_at: datetime) -> DecisionSummary:
        """What the key's history keeps of it, read from the verdict, not the Decision: the
        evidence records are built only for what is sent."""
        verdict = self._verdict
        return DecisionSummary(
            self.decision_id,
            verdict.outcome,
            verdict.kind,
            verdict.value,
            verdict.reason,
            decided_at,
            self._supersedes,
        )

    def noting(self, note: str) -> Arbitration:
        """This decision with `note` added to its reason (the kept claims the policy refuses and
        why, those dropped for size, where an alias moved the key's evidence): what it was
        reached without is part of what was decided (and of its id)."""
        mine = self._verdict
        verdict = Verdict(
            mine.outcome,
            f"{mine.reason}; {note}",
            mine.kind,
            mine.status,
            mine.value,
            mine.tiebreak,
            mine.resolution_id,
            mine.by_precedence,
        )
        return Arbitration(
            subject=self.subject,
            field=self.field,
            claims=self._claims,
            roles=self.roles,
            verdict=verdict,
            rules=self._rules,
            policy_version=self._policy_version,
            decided_at=self._decided_at,
            supersedes=self._supersedes,
            shift=self._shift,
        )

    def restated(self, decided_at: datetime, supersedes: str | None) -> Arbitration:
        """The same decision with another decided_at and supersedes (as first emitted)."""
        return Arbitration(
            subject=self.subject,
            field=self.field,
            claims=self._claims,
            roles=self.roles,
            verdict=self._verdict,
            rules=self._rules,
            policy_version=self._policy_version,
            decided_at=decided_at,
            supersedes=supersedes,
            shift=self._shift,
            belief=self.belief,
            known_id=self.decision_id,
        )

    def owned(self, decided_at: datetime, supersedes: str | None) -> Arbitration:
        """`restated`, with a claims list and roles of its own: what a key's state keeps, and
        `place` changes in place without touching the arbitration it was copied from (one
        already emitted, say)."""
        copy = self.restated(decided_at, supersedes)
        copy._claims, copy.roles = list(self._claims), dict(self.roles)
        return copy

    def place(
        self,
        added: AdmittedClaim,
        roles: Roles,
        belief: Belief,
        decided_at: datetime,
        supersedes: str | None,
    ) -> None:
        """One more claim placed in this decision, in place (its verdict and id stand, see
        `shortcuts.incremental.placement`): only for an arbitration a key's state owns (`owned`).
        The records built from it before are dropped: they describe the decision before `added`."""
        self.roles.update(roles)
        insort(self._claims, added, key=RECENCY)
        self.belief = belief
        self._decided_at, self._supersedes = decided_at, supersedes
        self._decision = self._events = None

    def _decides(
        self, subject: str, field: str, verdict: Verdict, rules: FieldRules, policy_version: str
    ) -> bool:
        """Whether `verdict` has this decision's id: every part `decision_id` hashes is equal
        (unit and action follow from the verdict and the rules; the value as hashed)."""
        mine = self._verdict
        return (
            rules is self._rules
            and policy_version == self._policy_version
            and subject == self.subject
            and field == self.field
            and (mine.outcome, mine.kind, mine.status, mine.reason, mine.tiebreak)
            == (verdict.outcome, verdict.kind, verdict.status, verdict.reason, verdict.tiebreak)
            and mine.resolution_id == verdict.resolution_id
            and (mine.value is verdict.value or _hashable(mine.value) == _hashable(verdict.value))
        )

    @property
    def epoch_change(self) -> EpochChange | None:
        return self._built_events()[0]

    @property
    def reobserve(self) -> ReobserveRequest | None:
        return self._built_events()[1]

    def _built_events(self) -> tuple[EpochChange | None, ReobserveRequest | None]:
        """Each checks first whether there is an event at all: reading `decision` builds it."""
        events = self._events
        if events is None:
            shift = self._shift
            epoch = None if shift is None else epoch_event(self.decision, shift)
            quarantined = self.outcome is QUARANTINED
            reobserve = (
                reobserve_request(self.decision, self._claims, self.roles) if quarantined else None
            )
            events = self._events = (epoch, reobserve)
        return events


def decision_id(
    *,
    subject: str,
    field: str,
    verdict: Verdict,
    unit: str | None,
    action: Action,
    policy_version: str,
) -> str:
    """Hash of what was decided (not when, nor the evidence list, which grows as claims agree,
    nor how the rules got there): blake2b over its parts joined by a unit separator (enum members
    as their values, an absent part as `None`; the subject, the only free text before parts of
    fixed vocabulary, is length-prefixed). Every path computes it here."""
    text = (
        f"{len(subject)}:{subject}\x1f{field}\x1f{_TEXT[verdict.outcome]}\x1f{_TEXT[verdict.kind]}"
        f"\x1f{_TEXT[verdict.status]}\x1f{_hashable(verdict.value)}\x1f{_or_none(unit)}"
        f"\x1f{_TEXT[action]}\x1f{policy_version}\x1f{verdict.reason}"
        f"\x1f{_or_none(verdict.tiebreak)}\x1f{_or_none(verdict.resolution_id)}"
    )
    hasher = _BLAKE2B.copy()
    hasher.update(text.encode())
    return f"dec_{hasher.hexdigest()}"


_BLAKE2B: Final = hashlib.blake2b(digest_size=12)
"""The empty hasher every id starts from: a copy costs less than a new one (whose keyword
arguments are parsed on every call)."""

_TEXT: Final[dict[Outcome | ConflictKind | ClaimStatus | Action | None, str]] = {
    member: member.value for kind in (Outcome, ConflictKind, ClaimStatus, Action) for member in kind
}
"""Each enum member as the id formats it (its value), and None as `None`: read here, not
formatted per decision (formatting a member looks its `__str__` up on the enum class, which
costs about as much as the hash)."""
_TEXT[None] = "None"


def _or_none(part: str | None) -> str:
    """An optional part as the id formats it: itself, or `None` (without `str(None)`)."""
    return "None" if part is None else part


def _hashable(value: Value) -> str:
    """A normalized value as text for the decision id: its repr (floats exactly), money as
    amount and currency. (A str, the common value, is told apart before the isinstance check:
    the model's metaclass runs Python code for it.)"""
    if type(value) is str or not isinstance(value, Money):
        return repr(value)
    return f"money:{value.amount_minor}:{value.currency}"


def _action(verdict: Verdict, rules: FieldRules) -> Action:
    return _ACTIONS[rules.on_conflict][verdict.outcome]
