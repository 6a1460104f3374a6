"""What a worker keeps for one key (a subject and field): its claims as admitted, the
resolutions for it, the decisions it emitted, and the bounds on all of them.

The transitions that change a KeyState are transitions.py's; how it is stored is journal.py's.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime

from streams.core.admission.intake import AdmittedClaim
from streams.core.decision.arbitration import Arbitration
from streams.core.decision.summary import DecisionSummary
from streams.core.keys.steward_log import StewardStep
from streams.core.keys.upkeep import RefusedClaim
from streams.core.records.bounds import RECORD_BYTES, reserve
from streams.core.records.contracts import Resolution

KEY_SEPARATOR = "|"


def state_key(subject: str, field: str) -> str:
    """`subject|field`; policy field names never contain the separator, so it splits on the last."""
    return f"{subject}{KEY_SEPARATOR}{field}"


def split_key(key: str) -> tuple[str, str]:
    subject, _, field = key.rpartition(KEY_SEPARATOR)
    return subject, field


@dataclass(slots=True)
class KeyState:
    """One key's claims (as admitted, so re-deciding re-uses their precomputed orderings), the
    resolutions for it and the decisions emitted so far. The task that owns the key changes it
    in place (`apply_claim`), the pure transitions a copy; only `arbitration` is mutable."""

    subject: str
    field: str
    claims: tuple[AdmittedClaim, ...] = ()
    resolutions: tuple[Resolution, ...] = ()
    history: tuple[DecisionSummary, ...] = ()
    conflict_since: datetime | None = None
    escalated: bool = False
    next_check_at: datetime | None = None
    disputed: tuple[str, ...] = ()
    """Claim ids seen with different content, the `Limits.max_disputed` most recent: no version
    of them counts, and any later version is refused too, whichever order they arrive in. An id
    trimmed off the bound is forgotten: a later version of it counts as a new claim (replay keeps
    every id, so it decides such a key apart from the stream)."""
    policy_version: str | None = None
    """The policy the key was last decided under, which admitted its claims as they are."""
    refused: tuple[RefusedClaim, ...] = ()
    """Kept claims the policy in force refuses (a later policy may admit them again): no part
    in the decision, which names each with its reason."""
    timer_waits: bool = False
    """Its timer came due while no policy in force decided its field: `next_check_at` is kept
    (it fires, at its own instant, once a policy decides the field again, as `rollout.catch_up`
    and replay fire it) but the key leaves the timer index until a decision sets a new one."""
    aliases_at: datetime | None = None
    """The instant of the last alias change the key's evidence was regrouped at (or that was in
    force when the key began): changes after it are still to apply (`AliasHistory.regroupings`).
    Its claims and resolutions keep the subject each was sent about; those sent about another
    spelling than the key's are an alias's."""
    steward_log: tuple[StewardStep, ...] = ()
    """Its stewards' statements besides the resolutions in force, in the order taken: proposals
    waiting for review, reviews, undos and resolutions no longer counting (steward_log.py)."""
    arbitration: Arbitration | None = dataclasses.field(default=None, compare=False, repr=False)
    """The last arbitration, in memory only (never journaled): lets a claim that cannot change
    the belief be placed without running the rules again, and a verdict that did not change
    keep its id without hashing it again."""

    @property
    def current(self) -> DecisionSummary | None:
        return self.history[-1] if self.history else None


@dataclass(frozen=True, slots=True)
class Limits:
    """Per-key bounds on what a key's state keeps (settings `max_claims_per_key`,
    `decision_history_per_key`, `max_disputed_per_key`, `resolutions_per_key`, and the bytes
    `max_record_bytes` leaves its claims)."""

    max_claims: int = 16
    max_history: int = 10
    max_disputed: int = 64
    max_resolutions: int = 10
    """Stewards' statements a key keeps (`stewardship._bounded`): its resolutions in force are
    the latest by `decided_at`, which include the one the engine applies, so a late-arriving
    older resolution never pushes out the one deciding the key."""
    max_claim_bytes: int = RECORD_BYTES - reserve(16, 10, 64, 10)
    """What its kept claims take at most (`bounds.claim_bytes`, summed): its changelog record
    and its decisions then stay within the record limit (`bounds.reserve`)."""
