"""The rules table's vocabulary: what a step reads beside the claims, what it returns, and the
row that lists it.

Where it sits: `engine.py` builds the table (`engine.RULES`) from `Rule`s and runs its steps over
one `Context` per arbitration, each returning a `StepResult`;
`shortcuts.incremental.extensible_belief` reads what the steps left in the `Context` once they
ran, and `shortcuts.fused.check_follows` which rows run on plain keys. Compiled with the engine:
one `Context` and a `StepResult` per step are built on every arbitration by the rules.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from types import MappingProxyType

from streams.core.admission.intake import AdmittedClaim
from streams.core.decision.arbitration import Verdict
from streams.core.decision.side_records import EpochShift, Roles
from streams.core.records.contracts import EvidenceRole, Resolution
from streams.core.records.policy import FieldRules


@dataclass(slots=True, init=False, eq=False, repr=False)
class Context:
    """What the steps share beside the claims in play: the inputs, and what earlier steps set
    aside to be judged against the result (which step sets which: the table's `sets`). Built by
    hand, not by the dataclass: one is built per arbitration, and default factories cost more
    than the fields."""

    rules: FieldRules
    now: datetime
    resolutions: Sequence[Resolution]
    evidence: list[AdmittedClaim]
    """Every claim once: what the decision cites, each with its role."""
    plain: bool
    """No claim carries an epoch, a period or a scope: the rows declared `plain=False` are
    skipped."""
    weaker: list[AdmittedClaim]
    """Live claims below the deciding authority (and epoch-less assertions): they agree with the
    result or are contested, never decide."""
    unanchored: list[AdmittedClaim]
    """Observations without an epoch where others carry one: quarantined, checked against the
    result."""
    shift: EpochShift | None
    """A value that changed across the epoch boundary."""
    tiebreak: str | None
    """How a tie at the top was broken."""
    winner: AdmittedClaim | None
    """The claim whose value is believed."""
    verdict: Verdict | None
    roles: Roles
    """The verdict so far and every role given: `arbitrate` writes them from the results."""

    def __init__(self, rules: FieldRules, now: datetime, resolutions: Sequence[Resolution]):
        self.rules, self.now, self.resolutions = rules, now, resolutions
        self.evidence, self.plain, self.weaker, self.unanchored = [], False, [], []
        self.shift = self.tiebreak = self.winner = self.verdict = None
        self.roles = {}


_NO_ROLES: Mapping[str, EvidenceRole] = MappingProxyType({})


class StepResult:
    """A step's result: the claims still in play, the roles it gave, the verdict if it found one.
    A plain slotted class (every step of every arbitration builds one, and a NamedTuple's
    `__new__` is Python code where this `__init__` compiles); not to be changed once built."""

    __slots__ = ("remaining", "roles", "verdict")

    remaining: list[AdmittedClaim]
    roles: Mapping[str, EvidenceRole]
    verdict: Verdict | None

    def __init__(
        self,
        remaining: list[AdmittedClaim],
        roles: Mapping[str, EvidenceRole] = _NO_ROLES,
        verdict: Verdict | None = None,
    ) -> None:
        self.remaining, self.roles, self.verdict = remaining, roles, verdict


Step = Callable[[list[AdmittedClaim], Context], StepResult | None]  # None: no role given


@dataclass(frozen=True, slots=True)
class Rule:
    name: str
    apply: Step
    sets: tuple[str, ...] = ()
    """The `Context` fields the step writes beside what it returns: what later steps read."""
    revises: bool = False
    """Runs only once a verdict exists, and may replace it (the deciding steps stop there)."""
    plain: bool = True
    """Runs on plain claims (`Context.plain`). False: the step has nothing to look at there (no
    epoch, period or scope) and is skipped, a speed shortcut declared here rather than a branch
    in its body."""

    def __post_init__(self) -> None:
        unknown = set(self.sets) - {field.name for field in fields(Context)}
        if unknown:
            raise TypeError(f"rule {self.name} sets unknown context fields {sorted(unknown)}")
