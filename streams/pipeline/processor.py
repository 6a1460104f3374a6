"""The pipeline's dispatcher: one input record to the key's new state and the records to send.

`Processor.process` retries a record whose handling failed unexpectedly, then dead-letters it;
`_handle` sends it by kind to the claim, resolution or tick path, each of which runs the rooms in
order: decode, authenticate, key (and re-key), admit, decide; then `Outputs.emit` builds what the
key's transition sends. A claim changes its key's state in place: once decided, a retry builds
the records again from the same transition and never decides the claim twice; a record whose
records cannot be built after its state changed is `TaskCorrupted`, for the arbiter to reload.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from time import perf_counter

from streams.core.admission.intake import admit_micros, admit_resolution, skew_us
from streams.core.keys.state import KeyState, state_key
from streams.core.keys.transitions import Transition, add_resolution, apply_claim
from streams.core.records.contracts import (
    EvidenceRole,
    Outcome,
    Resolution,
    instant,
    micros_from_seconds,
)
from streams.core.records.errors import RejectedInput
from streams.core.records.lean import LeanClaim
from streams.core.records.policy import Policy
from streams.core.timeline.aliases import (
    AliasHistory,
)
from streams.core.timeline.rollout import PolicyHistory
from streams.ops.metrics import DECODE, ENCODE, Metrics, StageClock
from streams.pipeline.authentication import Authentication
from streams.pipeline.key_clock import CaughtUp, KeyClock
from streams.pipeline.outputs import Outputs
from streams.pipeline.records import Handled, Incoming, Outgoing
from streams.pipeline.rekey import (
    HEADER_DUE,
    HEADER_KIND,
    KIND_CLAIM,
    KIND_MOVED,
    KIND_RESOLUTION,
    KIND_TICK,
    Rekeying,
)
from streams.settings import Settings
from streams.wire.registry import WireCodec

# The pipeline's rooms log under the one name operators filter on.
log = logging.getLogger(__package__)

StateOf = Callable[[bytes], KeyState | None]
Position = tuple[str, int, int]  # an input record's topic, partition and offset


class TaskCorrupted(Exception):
    """A record's output records could not be built, on any attempt, after its key's state had
    changed in place: the task's state no longer matches its changelog. The arbiter reloads the
    task from its changelog and reads on from its last commit; the record, read again, is then
    dead-lettered without being decided (as Kafka Streams revives a corrupted task)."""

    def __init__(self, record: Incoming, cause: Exception) -> None:
        super().__init__(
            f"{record.topic}[{record.partition}]@{record.offset}: building its records failed "
            f"after its key's state changed ({type(cause).__name__}: {cause})"
        )


class RefusedForGood(Exception):
    """The broker refused the records a record made, for good (a record too large for its
    topic, say): the record is dead-lettered, undecided, when read again."""


class _Decided:
    """A record's transition, its records not yet built: what a retry starts again from, as the
    transition holds all the record sends (decision, escalation, dead letter, settlement)."""

    __slots__ = ("claim", "clocks", "in_place", "key", "step", "timed", "wall_s")

    def __init__(
        self,
        key: bytes,
        step: Transition,
        in_place: bool,
        claim: LeanClaim | None = None,
        wall_s: float = 0.0,
        clocks: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0),
        timed: CaughtUp | None = None,
    ) -> None:
        self.key = key
        self.step = step
        # The key's re-decisions before the record's instant (its timers as they came due, its
        # move to a policy that took effect since, its evidence regrouped by an alias change),
        # made first.
        self.timed = timed
        # The key's stored state is the transition's: it changed, and deciding again would find
        # the record already applied (a redelivery), sending nothing it did not send.
        self.in_place = in_place
        self.claim = claim  # on the claim path, counted once its records are built
        self.wall_s = wall_s
        # When the claim's decode started and ended, its admission ended, its arbitration ended.
        self.clocks = clocks


class Processor:
    def __init__(
        self,
        settings: Settings,
        policies: PolicyHistory | Policy,
        codec: WireCodec,
        metrics: Metrics,
        group: str = "",
        wall_clock: Callable[[], float] = time.time,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.settings = settings
        self.topics = settings.topics
        if isinstance(policies, Policy):  # one policy, in force from the first instant
            policies = PolicyHistory.of(policies)
        policy = policies.latest.policy
        self.codec = codec
        self.metrics = metrics
        self.wall_clock = wall_clock
        self.limits = settings.key_limits()
        self._skew_us = skew_us(policy.defaults)  # the latest a record's timestamp counts
        self.stages = StageClock()
        self._env = env
        # Who may publish is the newest policy's to say, from the moment it is known.
        self.authentication = Authentication(settings, policy, env)
        self.rekeying = Rekeying(settings, metrics)
        # The policies and aliases by which each key is brought to a record's instant.
        self.clock = KeyClock(settings, policies, metrics, self.rekeying)
        self.outputs = Outputs(settings, codec, metrics, group, wall_clock)
        # Records that failed after changing their key's state, until read again (`_unapplied`).
        self._unbuildable: dict[Position, tuple[Exception, int]] = {}

    @property
    def policies(self) -> PolicyHistory:
        return self.clock.policies

    @property
    def aliases(self) -> AliasHistory:
        return self.clock.aliases

    @property
    def policy(self) -> Policy:
        """The policy in force now (by the wall clock)."""
        return self.policies.in_force(instant(micros_from_seconds(self.wall_clock())))

    def adopt(self, policies: PolicyHistory) -> None:
        """A policy history that grew (one more version published): decide by it from now."""
        self.clock.policies = policies
        latest = policies.latest.policy
        self._skew_us = skew_us(latest.defaults)
        self.authentication = Authentication(self.settings, latest, self._env)

    def adopt_aliases(self, aliases: AliasHistory) -> None:
        """An alias history that grew: each key's evidence regroups at the instants of its
        changes, by the key's clock (`KeyClock.caught_up`); the erasures cover the spellings
        these aliases give them."""
        self.clock.adopt_aliases(aliases)

    def process(self, record: Incoming, state_of: StateOf) -> Handled:
        """Handle one record: retried on unexpected failure, dead-lettered when it cannot be.
        A record once decided is retried from its transition (`_Decided`)."""
        if self._unbuildable:
            failed = self._unbuildable.pop((record.topic, record.partition, record.offset), None)
            if failed is not None:
                return Handled(outputs=[self.outputs.dead_letter(record, *failed)])
        attempts = self.settings.retry_attempts
        decided: _Decided | None = None
        decided_in = 0  # the attempt that decided the record
        for attempt in range(1, attempts + 1):
            try:
                if decided is None:
                    handled = self._handle(record, state_of)
                    if isinstance(handled, Handled):
                        return handled
                    decided, decided_in = handled, attempt
                return self._emitted(record, decided, counts_decision=decided_in == attempt)
            except RejectedInput as exc:
                if decided is None:
                    return Handled(outputs=[self.outputs.dead_letter(record, exc, attempt)])
                # The record's own fault, met building its records: retrying builds the same.
                return self._unapplied(record, decided, exc, attempt)
            except Exception as exc:
                log.warning(
                    "processing %s[%d]@%d failed (attempt %d/%d): %s",
                    record.topic,
                    record.partition,
                    record.offset,
                    attempt,
                    attempts,
                    type(exc).__name__,
                )
                if attempt == attempts:
                    return self._unapplied(record, decided, exc, attempt)
                self.metrics.processing_retries.inc()
        raise AssertionError("unreachable: the last attempt returns")

    def _unapplied(
        self, record: Incoming, decided: _Decided | None, exc: Exception, attempts: int
    ) -> Handled:
        """A record that failed for good: dead-lettered, unless its key's state changed in place
        already; then it is dead-lettered when read again, once its task has been reloaded."""
        if decided is not None and decided.in_place:
            self._unbuildable[(record.topic, record.partition, record.offset)] = (exc, attempts)
            raise TaskCorrupted(record, exc) from exc
        return Handled(outputs=[self.outputs.dead_letter(record, exc, attempts)])

    def refuse(self, topic: str, partition: int, offset: int, cause: str) -> None:
        """The records the input record at this position made are refused by the broker for
        good (`arbiter.isolation`): dead-letter it, undecided, when it is read again."""
        failed = RefusedForGood(f"the broker refuses the records it makes: {cause}")
        self._unbuildable[(topic, partition, offset)] = (failed, 1)

    def tick(self, key: bytes, due: datetime) -> Outgoing:
        """A self-addressed record that makes the owner of `key` re-decide at `due`."""
        return Outgoing(
            self.topics.rekeyed,
            key,
            None,
            ((HEADER_KIND, KIND_TICK), (HEADER_DUE, due.isoformat().encode())),
        )

    def _handle(self, record: Incoming, state_of: StateOf) -> Handled | _Decided:
        topic = record.topic
        if topic == self.topics.rekeyed:  # written by workers only: its kind header is theirs
            kind = record.header(HEADER_KIND)
            if kind == KIND_TICK:
                return self._on_tick(record, state_of)
            if kind == KIND_RESOLUTION:
                return self._on_resolution(record, state_of)
            if kind == KIND_MOVED:
                return self._on_moved(record, state_of)
        elif topic == self.topics.resolutions:
            return self._on_resolution(record, state_of)
        # On a claims topic, a kind header is the producer's: a resolution posing as a claim's
        # record is refused as a claim, never applied (stewards write the resolutions topic).
        return self._on_claim(record, state_of)

    def _on_claim(self, record: Incoming, state_of: StateOf) -> Handled | _Decided:
        # Counted (metrics, stage clocks) only once nothing is left that can fail: an attempt
        # that raises is retried, and must leave no count behind.
        started = perf_counter()
        claim = self.codec.decode_claim(record.value)
        decoded = perf_counter()
        wall_s = self.wall_clock()
        wall_us = micros_from_seconds(wall_s)
        now = instant(self._now_us(record, wall_us))
        # Keyed by its subject's canonical spelling; the claim keeps the subject it was sent about.
        clock = self.clock
        subject = clock.subject_of(record, claim.subject, now)
        if clock.erasures.erasures and clock.erasing(claim.subject, subject, now):
            return Handled()  # about data erased since: never counts, nor is dead-lettered again
        self.authentication.check(record, claim.source, wall_us)
        policy = self.policies.in_force(now)
        rekeying = self.rekeying
        admitted = admit_micros(claim, policy, wall_us, rekeying.source_class(record))
        key = state_key(subject, claim.field).encode()
        if rekeying.misrouted(record, key):
            forwarded = rekeying.forward(record, key, KIND_CLAIM)
            self.stages.charge(DECODE, started, decoded)
            return forwarded
        # The key's state, its catch-up and its transition are the arbitration's share.
        admitted_at = perf_counter()
        stored = state_of(key)
        later = clock.sent_on_late(record, stored, claim.subject, now, KIND_CLAIM)
        if later is not None:
            return later
        current, timed = clock.brought_to(stored, subject, claim.field, now)
        own = clock.policy_of(current, policy, now)
        if own is not policy:  # a late record, for a key already on a later policy
            policy = own
            admitted = admit_micros(claim, own, wall_us, rekeying.source_class(record))
        rules = policy.rules_for(claim.field)
        assert rules is not None  # admit() refused unknown fields
        step = apply_claim(current, admitted, rules, policy.version, now, self.limits)
        clocks = (started, decoded, admitted_at, perf_counter())
        return _Decided(key, step, step.state is stored, claim, wall_s, clocks, timed)

    def _emitted(self, record: Incoming, decided: _Decided, counts_decision: bool) -> Handled:
        """The records `decided` sends; a claim's counts. `counts_decision`: the attempt that
        builds them also decided the claim (a failed attempt's time is not charged)."""
        emitting = perf_counter()
        step = decided.step
        handled = self.outputs.emit(decided.key, step, record)
        timed = decided.timed
        if timed is not None:
            self._emit_timed_first(handled, decided.key, timed, record)
            handled.outputs += timed.moves
        claim = decided.claim
        if claim is None:
            return handled
        stages = self.stages
        if counts_decision:
            stages.charge_decided(decided.clocks)
        if step.refused is not None:
            return handled
        metrics = self.metrics
        metrics.accepted(claim.field, claim.source, decided.wall_s)
        if step.emitted is None:
            arbitration = step.arbitration
            if (
                arbitration.outcome is Outcome.RESOLVED
                and arbitration.roles.get(claim.claim_id) is EvidenceRole.CONTESTED
            ):
                # Arrived late and lost: the decision stands, but the loss is the signal.
                metrics.lost(claim.field, claim.source)
        stages.charge(ENCODE, emitting, perf_counter())
        return handled

    def _emit_timed_first(
        self, handled: Handled, key: bytes, timed: CaughtUp, record: Incoming
    ) -> None:
        """Put the records of the re-decisions by time (or the key's erasure) ahead of the
        record's own."""
        earlier = [self.outputs.emit(key, step, record) for _, step in timed.steps]
        handled.outputs[:0] = [out for each in earlier for out in each.outputs]
        handled.emitted[:0] = [arbitration for each in earlier for arbitration in each.emitted]
        if timed.erased is not None:
            handled.outputs.insert(0, self.outputs.erased(key, timed.erased))

    def _on_resolution(self, record: Incoming, state_of: StateOf) -> Handled | _Decided:
        wall_us = micros_from_seconds(self.wall_clock())
        wall = instant(wall_us)
        decoded = self.codec.decode(Resolution, record.value)
        now = instant(self._now_us(record, wall_us))
        clock = self.clock
        subject = clock.subject_of(record, decoded.subject, now)
        if clock.erasures.erasures and clock.erasing(decoded.subject, subject, now):
            return Handled()  # about data erased since: never counts, nor is dead-lettered again
        self.authentication.check_steward(
            record.value or b"", record.headers, decoded.decided_by, wall
        )
        policy = self.policies.in_force(now)
        resolution = admit_resolution(decoded, policy, wall)
        key = state_key(subject, resolution.field).encode()
        if self.rekeying.misrouted(record, key):
            return self.rekeying.forward(record, key, KIND_RESOLUTION)
        stored = state_of(key)
        later = clock.sent_on_late(record, stored, resolution.subject, now, KIND_RESOLUTION)
        if later is not None:
            return later
        current, timed = clock.brought_to(stored, subject, resolution.field, now)
        own = clock.policy_of(current, policy, now)
        if own is not policy:  # a late record, for a key already on a later policy
            policy = own
            resolution = admit_resolution(decoded, own, wall)
        rules = policy.rules_for(resolution.field)
        assert rules is not None
        step = add_resolution(current, resolution, rules, policy.version, now, self.limits)
        return _Decided(key, step, step.state is stored, timed=timed)

    def _on_tick(self, record: Incoming, state_of: StateOf) -> Handled | _Decided:
        """A key's timer came due, or a policy took effect that its key is not on yet (the
        rollout sweep): the key re-decided up to the tick's instant."""
        if record.key is None:
            return Handled()
        state = state_of(record.key)
        due_header = record.header(HEADER_DUE)
        if state is None or due_header is None:
            return Handled()
        due = datetime.fromisoformat(due_header.decode())
        if self.policies.in_force(due).rules_for(state.field) is None:
            # The policy no longer has this field: time re-decides nothing until one does (the
            # rollout sweep then moves the key, firing this timer at its instant first). It
            # waits off the timer index, or the key would be handed out and read past at every
            # tick.
            state.timer_waits = True
            return Handled(record.key, state)
        timed = self.clock.caught_up(state, due)
        if timed is None:  # a late tick: a record since fired the timer, or moved it
            return Handled()
        if timed.erased is not None:  # its subject erased: it says so once, and is dropped
            return Handled(
                record.key, None, [self.outputs.erased(record.key, timed.erased)], dropped=True
            )
        if not timed.steps:  # its evidence regrouped at an alias change and nothing moved
            return Handled(record.key, timed.state, timed.moves)
        (_, step) = timed.steps.pop()
        return _Decided(record.key, step, step.state is state, timed=timed)

    def _on_moved(self, record: Incoming, state_of: StateOf) -> Handled | _Decided:
        """Evidence an alias change moved here from the key of another spelling, due at the
        change's instant (`KeyClock.moved_in`)."""
        due_header = record.header(HEADER_DUE)
        if record.key is None or record.value is None or due_header is None:
            return Handled()
        stored = state_of(record.key)
        due = datetime.fromisoformat(due_header.decode())
        moved = self.clock.moved_in(record.key, stored, record.value, due)
        if moved is None:
            return Handled()
        step, timed = moved
        return _Decided(record.key, step, step.state is stored, timed=timed)

    def _now_us(self, record: Incoming, wall_us: int) -> int:
        """Decide as of the record's own timestamp, so a redelivered record decides the same."""
        if record.timestamp is None or record.timestamp <= 0:
            return wall_us
        stamped = micros_from_seconds(record.timestamp)
        latest = wall_us + self._skew_us
        return stamped if stamped < latest else latest
