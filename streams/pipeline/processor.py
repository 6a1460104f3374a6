"""The pipeline's dispatcher: one input record to the key's new state and the records to send.

`Processor.process` retries a record whose handling failed unexpectedly, then dead-letters it;
`_handle` sends it by kind to the claim, resolution or tick path, each of which runs the rooms in
order: decode, authenticate, key (and re-key), admit, decide, emit.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from time import perf_counter

from streams.core.contracts import (
    EvidenceRole,
    Outcome,
    Resolution,
    instant,
    micros_from_seconds,
)
from streams.core.errors import RejectedInput
from streams.core.intake import admit_micros, admit_resolution, skew_us
from streams.core.keystate import (
    KeyState,
    Limits,
    add_resolution,
    advance,
    apply_claim,
    state_key,
)
from streams.core.policy import Policy
from streams.metrics import ADMIT, ARBITRATE, DECODE, ENCODE, Metrics, StageClock
from streams.pipeline.authentication import Authentication
from streams.pipeline.outputs import Outputs
from streams.pipeline.records import Handled, Incoming, Outgoing
from streams.pipeline.rekey import (
    HEADER_DUE,
    HEADER_KIND,
    KIND_CLAIM,
    KIND_RESOLUTION,
    KIND_TICK,
    Rekeying,
    canonical,
)
from streams.registry import WireCodec
from streams.settings import Settings

# The pipeline's rooms log under the one name operators filter on.
log = logging.getLogger(__package__)

StateOf = Callable[[bytes], KeyState | None]
AliasOf = Callable[[str], str | None]


class Processor:
    def __init__(
        self,
        settings: Settings,
        policy: Policy,
        codec: WireCodec,
        metrics: Metrics,
        group: str = "",
        wall_clock: Callable[[], float] = time.time,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.settings = settings
        self.topics = settings.topics
        self.policy = policy
        self.codec = codec
        self.metrics = metrics
        self.wall_clock = wall_clock
        self.limits = Limits(
            settings.max_claims_per_key,
            settings.decision_history_per_key,
            settings.max_disputed_per_key,
            max_resolutions=settings.resolutions_per_key,
        )
        self.stages = StageClock()
        self.authentication = Authentication(settings, policy, env)
        self.rekeying = Rekeying(settings, metrics)
        self.outputs = Outputs(settings, codec, metrics, group, wall_clock)

    def process(self, record: Incoming, state_of: StateOf, alias_of: AliasOf) -> Handled:
        """Handle one record: retried on unexpected failure, dead-lettered when it cannot be."""
        attempts = self.settings.retry_attempts
        for attempt in range(1, attempts + 1):
            try:
                return self._handle(record, state_of, alias_of)
            except RejectedInput as exc:
                return Handled(outputs=[self.outputs.dead_letter(record, exc, attempt)])
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
                    return Handled(outputs=[self.outputs.dead_letter(record, exc, attempt)])
                self.metrics.processing_retries.inc()
        raise AssertionError("unreachable: the last attempt returns")

    def tick(self, key: bytes, due: datetime) -> Outgoing:
        """A self-addressed record that makes the owner of `key` re-decide at `due`."""
        return Outgoing(
            self.topics.rekeyed,
            key,
            None,
            ((HEADER_KIND, KIND_TICK), (HEADER_DUE, due.isoformat().encode())),
        )

    def _handle(self, record: Incoming, state_of: StateOf, alias_of: AliasOf) -> Handled:
        kind = record.header(HEADER_KIND)
        if record.topic == self.topics.rekeyed and kind == KIND_TICK:
            return self._on_tick(record, state_of)
        if record.topic == self.topics.resolutions or kind == KIND_RESOLUTION:
            return self._on_resolution(record, state_of, alias_of)
        return self._on_claim(record, state_of, alias_of)

    def _on_claim(self, record: Incoming, state_of: StateOf, alias_of: AliasOf) -> Handled:
        # Counted (metrics, stage clocks) only once nothing is left that can fail: an attempt
        # that raises is retried, and must leave no count behind.
        started = perf_counter()
        claim = self.codec.decode_claim(record.value)
        decoded = perf_counter()
        wall_s = self.wall_clock()
        wall_us = micros_from_seconds(wall_s)
        self.authentication.check(record, claim.source, wall_us)
        claim = canonical(claim, alias_of)
        rekeying = self.rekeying
        admitted = admit_micros(claim, self.policy, wall_us, rekeying.source_class(record))
        key = state_key(claim.subject, claim.field).encode()
        if rekeying.misrouted(record, key):
            forwarded = rekeying.forward(record, key, KIND_CLAIM)
            self.stages.charge(DECODE, started, decoded)
            return forwarded
        rules = self.policy.rules_for(claim.field)
        assert rules is not None  # admit() refused unknown fields
        admitted_at = perf_counter()
        step = apply_claim(
            state_of(key),
            admitted,
            rules,
            self.policy.version,
            instant(self._now_us(record, wall_us)),
            self.limits,
        )
        arbitrated = perf_counter()
        handled = self.outputs.emit(key, step, record)
        stages = self.stages
        stages.charge(DECODE, started, decoded)
        stages.charge(ADMIT, decoded, admitted_at)
        stages.charge(ARBITRATE, admitted_at, arbitrated)
        if step.refused is not None:
            return handled
        self.metrics.accepted(claim.field, claim.source, wall_s)
        decided = step.arbitration
        if (
            step.emitted is None
            and decided.outcome is Outcome.RESOLVED
            and decided.roles.get(claim.claim_id) is EvidenceRole.CONTESTED
        ):
            # Arrived late and lost: the decision stands, but the loss is the signal.
            self.metrics.lost(claim.field, claim.source)
        stages.charge(ENCODE, arbitrated, perf_counter())
        return handled

    def _on_resolution(self, record: Incoming, state_of: StateOf, alias_of: AliasOf) -> Handled:
        wall_us = micros_from_seconds(self.wall_clock())
        wall = instant(wall_us)
        decoded = self.codec.decode(Resolution, record.value)
        self.authentication.check_steward(
            record.value or b"", record.headers, decoded.decided_by, wall
        )
        resolution = admit_resolution(decoded, self.policy, wall)
        resolution = canonical(resolution, alias_of)
        key = state_key(resolution.subject, resolution.field).encode()
        if self.rekeying.misrouted(record, key):
            return self.rekeying.forward(record, key, KIND_RESOLUTION)
        rules = self.policy.rules_for(resolution.field)
        assert rules is not None
        step = add_resolution(
            state_of(key),
            resolution,
            rules,
            self.policy.version,
            instant(self._now_us(record, wall_us)),
            self.limits,
        )
        return self.outputs.emit(key, step, record)

    def _on_tick(self, record: Incoming, state_of: StateOf) -> Handled:
        if record.key is None:
            return Handled()
        state = state_of(record.key)
        due_header = record.header(HEADER_DUE)
        if state is None or due_header is None:
            return Handled()
        rules = self.policy.rules_for(state.field)
        if rules is None:  # the policy no longer has this field; nothing to re-decide
            return Handled()
        due = datetime.fromisoformat(due_header.decode())
        step = advance(state, rules, self.policy.version, due, self.limits)
        return self.outputs.emit(record.key, step, record)

    def _now_us(self, record: Incoming, wall_us: int) -> int:
        """Decide as of the record's own timestamp, so a redelivered record decides the same."""
        if record.timestamp is None or record.timestamp <= 0:
            return wall_us
        stamped = micros_from_seconds(record.timestamp)
        return min(stamped, wall_us + skew_us(self.policy.defaults))
