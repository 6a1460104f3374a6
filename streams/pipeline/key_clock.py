"""A key brought to a record's instant: what is due on it before the record applies, each at
its own instant, and where a record about a subject counts as the aliases change.

Four histories change a key by time alone: its timers, the policies (a key moves to each that
takes effect, its kept claims admitted afresh: `core.timeline.rollout.catch_up`) and the subject
aliases (at each change that reaches the key, its evidence regroups: what now belongs to the
key of another spelling leaves for that key's owner through the rekeyed topic, `KIND_MOVED`,
and is decided there once with what that key holds: `core.timeline.aliases`). `KeyClock`
applies them by the key's own clock, the same functions replay applies by the records' clock,
so the stream decides as replay does whichever worker owns the key and whenever it runs.
And the erasures: at an erasure's instant a key of an erased subject says so once and is
dropped (`core.timeline.erasures`), ahead of anything else due on it.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from streams.core.keys.state import KeyState, Limits, split_key, state_key
from streams.core.keys.transitions import Transition, regroup
from streams.core.records.contracts import Decision
from streams.core.records.policy import Policy
from streams.core.timeline.aliases import (
    AliasHistory,
    Moved,
    gathered,
    left_for,
    moved_from,
    moved_record,
    regrouped,
)
from streams.core.timeline.erasures import Erasure, ErasureHistory, erased_decision
from streams.core.timeline.rollout import PolicyHistory, catch_up
from streams.ops.metrics import Metrics
from streams.pipeline.records import Handled, Incoming, Outgoing
from streams.pipeline.rekey import HEADER_DUE, HEADER_KIND, KIND_MOVED, Rekeying, partition_of
from streams.settings import Settings


class CaughtUp:
    """A key's re-decisions due before a record's instant, each at its own (`KeyClock.caught_up`),
    and the evidence its alias regroupings sent to the keys of other spellings (`moves`).
    `state`: the key after them; None where it was dropped, its subject erased (`erased`: what
    it says of that)."""

    __slots__ = ("erased", "moves", "state", "steps")

    def __init__(
        self,
        steps: list[tuple[datetime, Transition]],
        moves: list[Outgoing],
        state: KeyState | None,
        erased: Decision | None = None,
    ) -> None:
        self.steps = steps
        self.moves = moves
        self.state = state
        self.erased = erased


class KeyClock:
    """The policy and alias histories a worker decides by, applied to one key at a time."""

    def __init__(
        self, settings: Settings, policies: PolicyHistory, metrics: Metrics, rekeying: Rekeying
    ) -> None:
        self.policies = policies
        self.aliases = AliasHistory()
        self.erasures = ErasureHistory()
        self.limits: Limits = settings.key_limits()
        self.rekeying = rekeying
        self.rekeyed = settings.topics.rekeyed
        self.partitions = settings.partitions
        self.alias_moves = metrics.aliases.moves
        self.erased_records = metrics.erasures.records

    def subject_of(self, record: Incoming, sent_about: str, now: datetime) -> str:
        """The subject whose key a record about `sent_about` at `now` counts on: its canonical
        spelling under the aliases of the record's instant (or of a later one it was sent on
        under, `Rekeying.routed_at`)."""
        aliases = self.aliases
        if not aliases.changes:
            return sent_about
        return aliases.canonical(sent_about, self.rekeying.routed_at(record, now))

    def adopt_aliases(self, aliases: AliasHistory) -> None:
        """An alias history that grew: each key's evidence regroups at the instants of its
        changes, by the key's clock (`caught_up`); the erasures cover the spellings these
        aliases give them."""
        self.aliases = aliases
        if self.erasures:
            self.adopt_erasures(self.erasures.erasures)

    def adopt_erasures(self, erasures: Iterable[Erasure]) -> None:
        """The erasures in effect: each key of an erased subject is dropped at its instant, by
        the key's clock, and records about the data they erased never count again."""
        self.erasures = ErasureHistory(erasures, self.aliases)

    def erasing(self, sent_about: str, subject: str, now: datetime) -> Erasure | None:
        """The erasure a record about `sent_about` (counting on `subject`'s key) at `now` is
        erased by: one that took effect after `now`, counted as such. None (every record where
        no erasure is in effect): it counts."""
        erasures = self.erasures
        if not erasures:
            return None
        erasure = erasures.erasing(sent_about, now) or erasures.erasing(subject, now)
        if erasure is not None:
            self.erased_records.inc()
        return erasure

    def erased_by(self, state: KeyState, now: datetime) -> Decision | None:
        """What the key says where an erasure of its subject took effect after it was last
        decided and by `now`: it is then dropped. None: no erasure reaches it."""
        if not self.erasures:
            return None
        erasure = self.erasures.dropping(state, now)
        if erasure is None:
            return None
        policy = self.policies.in_force(erasure.at).version
        return erased_decision(state.subject, state.field, erasure, policy)

    def policy_of(self, state: KeyState | None, policy: Policy, now: datetime) -> Policy:
        """The policy a record at `now` is decided under: the one in force then (`policy`), or
        for a key whose clock is past `now` (a late record) the one in force at the key's clock:
        a key's clock never runs backwards (`transitions._decide`), nor does its policy."""
        last = state.current if state is not None else None
        if last is None or last.decided_at <= now:
            return policy
        return self.policies.in_force(last.decided_at)

    def caught_up(self, state: KeyState | None, now: datetime) -> CaughtUp | None:
        """The key's re-decisions due by `now`, each at its own instant, made before the record
        applies: its timers that came due (a tick that went out late, a catch-up, a restart must
        not let a later record decide first), its move to a policy that took effect since
        (`catch_up`) and its evidence regrouped at each alias change since that reaches it
        (`_regrouped`). None (most records): none is due."""
        if state is None:
            return None
        erased = self.erased_by(state, now) if self.erasures.erasures else None
        if erased is not None:  # nothing else due on it matters: it is about the erased data
            return CaughtUp([], [], None, erased)
        latest = self.policies.latest
        aliases = self.aliases
        regroups = bool(aliases.changes) and self._regroups(state, now)
        if (
            not regroups
            and state.policy_version == latest.policy.version
            and now >= latest.since
            and (state.next_check_at is None or state.next_check_at > now)
        ):
            return None
        steps: list[tuple[datetime, Transition]] = []
        moves: list[Outgoing] = []
        current = state
        if regroups:
            for at in aliases.regroupings(state.subject, state.aliases_at, now):
                steps += catch_up(current, self.policies, at, self.limits)
                current = steps[-1][1].state if steps else state
                step = self._regrouped(current, at, moves)
                if step is not None:
                    steps.append((at, step))
                    current = step.state
            # A copy a transition made, or the stored state when nothing moved (nothing is lost
            # if it is not journaled: the regrouping finds nothing to move again).
            current.aliases_at = aliases.last_by(now)
        later = catch_up(current, self.policies, now, self.limits)
        if later:
            steps += later
            current = later[-1][1].state
        return CaughtUp(steps, moves, current)

    def _regroups(self, state: KeyState, now: datetime) -> bool:
        """Whether an alias change took effect after the key's evidence last regrouped and by
        `now`."""
        last = self.aliases.last_by(now)
        return last is not None and (state.aliases_at is None or state.aliases_at < last)

    def _regrouped(self, state: KeyState, at: datetime, moves: list[Outgoing]) -> Transition | None:
        """The key's evidence as the aliases in force at `at` group it: what now belongs to
        another key is sent there (`moves`, through the rekeyed topic to its owner, with this
        key's transition), and the key decided again over what stays; a key left with nothing
        says where its evidence went. None: nothing moves."""
        stays, away = regrouped(state, self.aliases.in_force(at))
        if not away:
            return None
        policy = self.policy_of(state, self.policies.in_force(at), at)
        rules = policy.rules_for(state.field)
        if rules is None:  # no policy decides the field: nothing re-decides it, nothing moves
            return None
        self._send(state, away, at, moves)
        return regroup(
            state,
            stays.claims,
            stays.refused,
            stays.resolutions,
            rules,
            policy.version,
            at,
            self.limits,
            steward_log=stays.steward_log,
            note=None if stays else left_for(away),
        )

    def _send(
        self, state: KeyState, away: dict[str, Moved], at: datetime, moves: list[Outgoing]
    ) -> None:
        """The evidence leaving `state`'s key at `at`, a record to each key it goes to."""
        field, rekeyed, partitions = state.field, self.rekeyed, self.partitions
        due = ((HEADER_KIND, KIND_MOVED), (HEADER_DUE, at.isoformat().encode()))
        for subject, moved in away.items():
            key = state_key(subject, field).encode()
            value = moved_record(state.subject, field, moved)
            moves.append(Outgoing(rekeyed, key, value, due, partition_of(key, partitions)))
        self.alias_moves.inc(len(away))

    def sent_on_late(
        self, record: Incoming, state: KeyState | None, sent_about: str, now: datetime, kind: bytes
    ) -> Handled | None:
        """A record that reaches its key late, after an alias change regrouped the key's
        evidence (`state.aliases_at`), and that those aliases send elsewhere: sent on there, as
        it would have moved had it arrived in time. None: it counts here (always, for a key
        that holds nothing yet or was never regrouped)."""
        if state is None:
            return None
        regrouped_at = state.aliases_at
        if regrouped_at is None or regrouped_at <= self.rekeying.routed_at(record, now):
            return None
        subject = self.aliases.canonical(sent_about, regrouped_at)
        if subject == state.subject:
            return None
        key = state_key(subject, state.field).encode()
        return self.rekeying.forward(record, key, kind, regrouped_at)

    def brought_to(
        self, stored: KeyState | None, subject: str, field: str, now: datetime
    ) -> tuple[KeyState | None, CaughtUp | None]:
        """The key a record about `subject` and `field` at `now` applies to: `stored` caught up
        to `now` (`caught_up`, whose re-decisions go out first), or where aliases exist a new
        key's first state (`new_key`); None: a new key, with no aliases to group by."""
        timed = self.caught_up(stored, now)
        current = timed.state if timed else stored
        if current is None and self.aliases.changes:
            current = self.new_key(subject, field, now)
        return current, timed

    def new_key(self, subject: str, field: str, now: datetime) -> KeyState:
        """A key's first state where aliases exist: named by its canonical subject, its evidence
        grouped by the aliases in force (only later changes regroup it)."""
        return KeyState(subject=subject, field=field, aliases_at=self.aliases.last_by(now))

    def moved_in(
        self, key: bytes, stored: KeyState | None, value: bytes, due: datetime
    ) -> tuple[Transition, CaughtUp | None] | None:
        """Evidence an alias change moved to `key` from the key of another spelling
        (`_regrouped`): the key, caught up to the change's instant, decided once over its own
        evidence and the arriving (`aliases.gathered`: each claim once by id, in any order of
        arrival). None: no policy decides its field, so nothing re-decides it (as replay)."""
        timed = self.caught_up(stored, due)
        current = timed.state if timed else stored
        if current is None:  # a new key, on the policy and the aliases in force then
            subject, field = split_key(key.decode())
            current = self.new_key(subject, field, due)
        policy = self.policy_of(current, self.policies.in_force(due), due)
        rules = policy.rules_for(current.field)
        if rules is None:
            return None
        arriving = moved_from(value, current.subject)
        moves: list[Outgoing] = []
        regrouped_at = current.aliases_at
        if regrouped_at is not None and regrouped_at > due:
            # It arrives after the key regrouped at a later change: what those aliases send
            # elsewhere goes on there, as it would have had it arrived in time.
            arriving = self._sent_on(current, arriving, regrouped_at, moves)
        own = Moved.held(current)
        evidence, disputed = gathered(own, [arriving])
        known = set(current.disputed)
        step = regroup(
            current,
            evidence.claims,
            evidence.refused,
            evidence.resolutions,
            rules,
            policy.version,
            due,
            self.limits,
            steward_log=evidence.steward_log,
            disputed=(*current.disputed, *sorted(disputed - known)) if disputed - known else None,
        )
        if moves:
            timed = timed or CaughtUp([], [], current)
            timed.moves += moves
        return step, timed

    def _sent_on(
        self, state: KeyState, arriving: Moved, at: datetime, moves: list[Outgoing]
    ) -> Moved:
        """What of `arriving` belongs to `state`'s key under the aliases in force at `at`; the
        rest is sent on to where they put it (`moves`)."""
        held = KeyState(
            subject=state.subject,
            field=state.field,
            claims=arriving.claims,
            refused=arriving.refused,
            resolutions=arriving.resolutions,
            steward_log=arriving.steward_log,
        )
        stays, away = regrouped(held, self.aliases.in_force(at))
        self._send(state, away, at, moves)
        return stays
