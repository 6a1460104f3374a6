"""A consistent cut of the input topics as of an instant, and the snapshot token that names it.

On Kafka a cut is a vector of offsets, not a time: for every partition of every input topic
(claims, user claims, the principals' topics, resolutions, aliases, policies) the cut ends before
the first record stamped after the instant, and never past the last stable offset (a
transaction still open or aborted counts nowhere). The token records those offsets and where
each partition began, so the same records can be read again next year, whatever was appended
since; a timestamp alone could not promise that.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from aiokafka import AIOKafkaConsumer, TopicPartition

from streams.core.records.contracts import micros
from streams.core.records.errors import ClaimstreamError
from streams.settings import Settings
from streams.wire.kafka import client_options, topic_partitions

TOKEN_PREFIX = "csa1."


@dataclass(frozen=True, slots=True)
class Span:
    """The records of one partition a cut holds: offsets `start` (the first held when the cut
    was taken) to `end` (exclusive)."""

    partition: int
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class Cut:
    """The instant asked for and, per topic, the span of each of its partitions."""

    as_of: datetime
    topics: dict[str, tuple[Span, ...]]

    @property
    def records(self) -> int:
        """The offsets the cut spans (an upper bound on its records: transaction markers and
        aborted records take offsets too)."""
        return sum(s.end - s.start for spans in self.topics.values() for s in spans)

    def token(self) -> str:
        """The snapshot token: the cut in one line, `csa1.` and base64url JSON."""
        data = {
            "as_of_us": micros(self.as_of),
            "topics": {
                topic: [[s.partition, s.start, s.end] for s in spans]
                for topic, spans in sorted(self.topics.items())
            },
        }
        text = json.dumps(data, sort_keys=True, separators=(",", ":"))
        return TOKEN_PREFIX + base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")

    @classmethod
    def from_token(cls, token: str) -> Cut:
        """The cut a token names, or ClaimstreamError."""
        if not token.startswith(TOKEN_PREFIX):
            raise ClaimstreamError(f"not a snapshot token (one starts {TOKEN_PREFIX!r})")
        body = token.removeprefix(TOKEN_PREFIX)
        try:
            text = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
            data = json.loads(text)
            as_of = datetime.fromtimestamp(0, UTC) + timedelta(microseconds=data["as_of_us"])
            topics = {
                str(topic): tuple(Span(int(p), int(s), int(e)) for p, s, e in spans)
                for topic, spans in data["topics"].items()
            }
        except (ValueError, KeyError, TypeError, AttributeError, OverflowError) as exc:
            raise ClaimstreamError(f"the snapshot token does not read: {exc}") from exc
        return cls(as_of, topics)


def input_topics(settings: Settings, principal_topics: list[str]) -> list[str]:
    """The topics whose records make beliefs: histories first (policies, aliases), then claims
    and statements, in the order the export reads them."""
    names = settings.topics
    return [
        names.policies,
        names.aliases,
        names.claims,
        names.user_claims,
        *principal_topics,
        names.resolutions,
    ]


async def take_cut(settings: Settings, as_of: datetime, topics: list[str]) -> Cut:
    """The cut of `topics` as of `as_of`; ClaimstreamError if `as_of` is in the future or older
    than what a topic still holds (naming the oldest instant that can be exported)."""
    if as_of > datetime.now(UTC):
        raise ClaimstreamError(
            f"--as-of {as_of.isoformat()} is in the future: a cut holds only what was written"
        )
    partitions = [
        TopicPartition(topic, p)
        for topic, numbers in (await topic_partitions(settings, topics)).items()
        for p in numbers
    ]
    if not partitions:
        return Cut(as_of, dict.fromkeys(topics, ()))
    consumer = AIOKafkaConsumer(
        **client_options(settings), enable_auto_commit=False, isolation_level="read_committed"
    )
    await consumer.start()
    try:
        starts = await consumer.beginning_offsets(partitions)
        stable = await consumer.end_offsets(partitions)  # the last stable offsets
        after = micros(as_of) // 1000 + 1  # the first millisecond after the instant
        found = await consumer.offsets_for_times(dict.fromkeys(partitions, after))
        await _refuse_lost(consumer, settings, as_of, starts)
    finally:
        await consumer.stop()
    spans: dict[str, list[Span]] = {topic: [] for topic in topics}
    for tp in partitions:
        first_after = found.get(tp)
        end = stable[tp] if first_after is None else min(first_after.offset, stable[tp])
        spans[tp.topic].append(Span(tp.partition, starts[tp], max(end, starts[tp])))
    return Cut(as_of, {topic: tuple(each) for topic, each in spans.items()})


async def _refuse_lost(
    consumer: AIOKafkaConsumer,
    settings: Settings,
    as_of: datetime,
    starts: dict[TopicPartition, int],
) -> None:
    """Refuse a cut from before the oldest record a partition that lost records still holds."""
    truncated = [tp for tp, start in starts.items() if start > 0]
    oldest: datetime | None = None
    for tp in truncated:
        consumer.assign([tp])
        consumer.seek(tp, starts[tp])
        fetched = await consumer.getmany(tp, timeout_ms=5000, max_records=1)
        for record in fetched.get(tp, []):
            first = datetime.fromtimestamp(record.timestamp / 1000, UTC)
            oldest = first if oldest is None or first > oldest else oldest
    if oldest is not None and as_of < oldest:
        kept = settings.audit_retention_days
        raise ClaimstreamError(
            f"--as-of {as_of.isoformat()} is older than the input topics still hold (they keep "
            f"{'every record' if kept < 0 else f'{kept} days'}: audit_retention_days): the "
            f"oldest instant that can be exported is {oldest.isoformat()}"
        )
