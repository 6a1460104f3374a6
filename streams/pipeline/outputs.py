"""What a decided record sends: the key's decision records, escalations and outcome counts
(`Outputs.emit`), or a dead letter carrying the original record plus why it was refused
(`Outputs.dead_letter`, headers under `ERROR_HEADER_PREFIX`). The last room of the pipeline.
Decision records are assembled by streams.wire.decision_bytes; every other record is written by the
codec from its model.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime

from streams.core.decision.arbitration import Arbitration
from streams.core.keys.transitions import Transition
from streams.core.records.contracts import Claim, Decision, RejectReason
from streams.core.records.errors import RejectedInput
from streams.ops.metrics import Metrics
from streams.pipeline.records import Handled, Headers, Incoming, Outgoing
from streams.settings import Settings
from streams.wire.decision_bytes import DecisionWriter
from streams.wire.registry import WireCodec

# The pipeline's rooms log under the one name operators filter on.
log = logging.getLogger(__package__)

ERROR_HEADER_PREFIX = "claimstream.error."
_DEAD_LETTER_OVERHEAD = 512  # a record's batch header, lengths and timestamps, at most


class Outputs:
    def __init__(
        self,
        settings: Settings,
        codec: WireCodec,
        metrics: Metrics,
        group: str,
        wall_clock: Callable[[], float],
    ) -> None:
        self.topics = settings.topics
        self.max_record_bytes = settings.max_record_bytes
        self.codec = codec
        self.metrics = metrics
        self.group = group
        self.wall_clock = wall_clock
        decisions = self.topics.decisions
        self.decision_bytes = DecisionWriter(lambda: codec.framing(decisions, Decision))

    def emit(self, key: bytes, step: Transition, record: Incoming) -> Handled:
        """The key's new state and the records its step sends (a refused claim: a dead letter)."""
        handled = Handled(key, step.state, [], [], step.opened)
        emitted, escalation = step.emitted, step.escalation
        if emitted is None and escalation is None and step.refused is None:
            return handled  # most claims: the key's belief stands
        topics, outputs = self.topics, handled.outputs
        if step.refused is not None:
            outputs.append(self.dead_letter(record, step.refused, 1))
        if emitted is not None:
            self._arbitration_records(key, emitted, outputs)
            handled.emitted.append(emitted)
        if escalation is not None:
            outputs.append(
                Outgoing(topics.escalations, key, self.codec.encode(topics.escalations, escalation))
            )
        # Counted once every record is built: a failed attempt is retried and must count nothing.
        metrics = self.metrics
        if emitted is not None and emitted.epoch_change is not None:
            metrics.epoch_changes.labels(metrics.field_label(step.state.field)).inc()
        if escalation is not None:
            metrics.escalations.labels(metrics.field_label(step.state.field)).inc()
        return handled

    def erased(self, key: bytes, decision: Decision) -> Outgoing:
        """The decision a key of an erased subject sends once, as it is dropped."""
        self.metrics.erasures.keys.inc()
        decisions = self.topics.decisions
        return Outgoing(decisions, key, self.codec.encode(decisions, decision))

    def _arbitration_records(
        self, key: bytes, arbitration: Arbitration, records: list[Outgoing]
    ) -> None:
        topics = self.topics
        records.append(Outgoing(topics.decisions, key, self.decision_bytes(arbitration)))
        if arbitration.epoch_change is not None:
            records.append(
                Outgoing(
                    topics.epoch_changes,
                    key,
                    self.codec.encode(topics.epoch_changes, arbitration.epoch_change),
                )
            )
        if arbitration.reobserve is not None:
            records.append(
                Outgoing(
                    topics.reobserve,
                    key,
                    self.codec.encode(topics.reobserve, arbitration.reobserve),
                )
            )

    def dead_letter(self, record: Incoming, exc: Exception, attempts: int) -> Outgoing:
        """The original record to the dead-letter topic, with the reason in its headers."""
        reason = exc.reason if isinstance(exc, RejectedInput) else RejectReason.PROCESSING_FAILED
        detail = exc.detail if isinstance(exc, RejectedInput) else str(exc)
        source = self._declared_source(record)
        log.info(
            "dead letter %s[%d]@%d: %s",
            record.topic,
            record.partition,
            record.offset,
            reason,
            extra={"reason": reason.value, "attempts": attempts},
        )
        error_headers = {
            "reason": reason.value,
            "detail": detail[:2000],
            "exception": type(exc.__cause__ or exc).__name__,
            "topic": record.topic,
            "partition": str(record.partition),
            "offset": str(record.offset),
            "group": self.group,
            "attempts": str(attempts),
            "rejected_at": datetime.fromtimestamp(self.wall_clock(), UTC).isoformat(),
        }
        errors = tuple(
            (ERROR_HEADER_PREFIX + name, value.encode()) for name, value in error_headers.items()
        )
        self.metrics.rejected(reason.value, source)
        return self._within_limit(record, errors)

    def _within_limit(self, record: Incoming, errors: Headers) -> Outgoing:
        """The original record with the error headers; or, where that would pass
        `max_record_bytes` (the dead-letter topic would refuse it for good, and the partition's
        commit with it), the error headers alone, saying where the record stays: on its topic,
        for the audit horizon (`claimstream replay-dead-letters` passes over a dead letter
        without a value)."""
        headers = record.headers + errors
        size = _DEAD_LETTER_OVERHEAD + len(record.key or b"") + len(record.value or b"")
        size += sum(len(name) + len(value) for name, value in headers)
        if size <= self.max_record_bytes:
            return Outgoing(self.topics.dead_letters, record.key, record.value, headers)
        dropped = (
            f"the record ({size:,} bytes with these headers) passes max_record_bytes="
            f"{self.max_record_bytes:,}: its key, value and headers are at "
            f"{record.topic}[{record.partition}]@{record.offset}"
        )
        errors += ((ERROR_HEADER_PREFIX + "dropped", dropped.encode()),)
        return Outgoing(self.topics.dead_letters, None, None, errors)

    def _declared_source(self, record: Incoming) -> str | None:
        """The source a rejected claim claims to be, for the per-source rejection metric."""
        try:
            return self.codec.decode(Claim, record.value).source
        except Exception:
            return None
