"""`claimstream audit export`: everything believed as of an instant, from a cut of the input
topics, with no worker running and none disturbed.

The export takes the cut (`cut`), reads the policy and alias histories in it as a worker reads
them (`worker.policy_log`, `worker.alias_log`, proven alike), then reads the claims and the
stewards' statements once: each is authenticated as a worker would at its instant and spilled
to the bucket of its subject's family (`buckets`). Each bucket is then replayed alone
(`replaying`) and its rows appended to the tables (`files`), so memory holds one bucket and one
row group a table. Last, `manifest.json` (`manifest`). Run again from the manifest's token, the
export writes the same bytes: `audit verify --replay` checks that.
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any, TextIO

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import OffsetOutOfRangeError

from streams.audit.buckets import Families, Spill, Spilled, bucket_count
from streams.audit.cut import Cut, input_topics, take_cut
from streams.audit.files import TableWriter, sha256_of, table_writer
from streams.audit.manifest import Signer, unsigned_manifest, write_manifest
from streams.audit.replaying import CLAIM, RESOLUTION, USER_CLAIM, BucketReplay
from streams.core.reading.audit_rows import policy_rows
from streams.core.records.contracts import Resolution, instant, micros
from streams.core.records.errors import ClaimstreamError, RejectedInput
from streams.core.records.policy import Policy
from streams.core.timeline.aliases import AliasHistory
from streams.core.timeline.erasures import ErasureHistory
from streams.core.timeline.policy_history import history_from_lines
from streams.core.timeline.rollout import PolicyHistory
from streams.pipeline.authentication import Authentication, principal_topics
from streams.pipeline.records import Incoming
from streams.settings import Settings
from streams.wire.kafka import client_options
from streams.wire.registry import WireCodec, registry_for
from streams.worker.alias_log import AliasLog
from streams.worker.erasure_log import published_erasures
from streams.worker.policy_log import PolicyLog

TABLE_NAMES = ("beliefs", "evidence", "statements", "policies")


class Progress:
    """What the export is doing, on a terminal: a line rewritten in place (elsewhere, a line
    every `every_s` seconds), with counts, rate and time left."""

    def __init__(self, out: TextIO = sys.stderr, every_s: float = 10.0) -> None:
        self.out, self.live = out, out.isatty()
        self.every_s = every_s if not self.live else 0.2
        self._shown = 0.0
        self._phase_started = time.monotonic()

    def phase(self) -> None:
        self._phase_started = time.monotonic()

    def show(self, what: str, done: int, total: int, unit: str, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._shown < self.every_s:
            return
        self._shown = now
        elapsed = max(now - self._phase_started, 1e-6)
        rate = done / elapsed
        left = (total - done) / rate if rate > 0 and total > done else 0.0
        line = (
            f"audit export: {what} {done:,}/{total:,} {unit} · {rate:,.0f} {unit}/s · "
            f"{elapsed:.0f} s, about {left:.0f} s left"
        )
        self.out.write(f"\r{line}\x1b[K" if self.live else line + "\n")
        self.out.flush()

    def line(self, text: str) -> None:
        self.out.write(("\r\x1b[K" if self.live else "") + text + "\n")
        self.out.flush()


@dataclass
class Histories:
    """The cut's policy and alias histories, and the policy topic's lines."""

    policies: PolicyHistory
    aliases: AliasHistory
    policy_lines: list[str]
    erasures: ErasureHistory
    """Every erasure in effect when the export runs, those after the cut too: what an erasure
    erased is never exported, as of any instant."""


async def export(
    settings: Settings,
    out: Path,
    *,
    as_of: datetime | None = None,
    token: str | None = None,
    fmt: str = "parquet",
    signer: Signer | None = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Export what was believed as of `as_of` (or at the cut `token` names) into `out`, which
    must be empty or new; returns the manifest written."""
    progress = progress or Progress()
    if out.exists() and any(out.iterdir()):
        raise ClaimstreamError(f"{out} is not empty: an export goes into a folder of its own")
    cut = Cut.from_token(token) if token else await _cut(settings, _given(as_of))
    out.mkdir(parents=True, exist_ok=True)
    reader = CutReader(settings, cut)
    histories = await reader.histories()
    codec = WireCodec(registry_for(settings))
    with tempfile.TemporaryDirectory(prefix="claimstream-audit-") as scratch:
        spill = Spill(Path(scratch), bucket_count(cut.records))
        read = await reader.spill(histories, codec, spill, progress)
        manifest = _replayed(cut, histories, codec, spill, read, out, fmt, settings, progress)
    if signer is not None:
        manifest = signer.signed(manifest)
    write_manifest(out, manifest)
    return manifest


def _given(as_of: datetime | None) -> datetime:
    if as_of is None:
        raise ClaimstreamError("give --as-of T or --token TOKEN")
    return as_of.astimezone(UTC)


async def _cut(settings: Settings, as_of: datetime) -> Cut:
    """The cut as of `as_of`: first the policies' (which name the principals' topics), then
    every input topic's."""
    first = await take_cut(settings, as_of, [settings.topics.policies])
    lines = await CutReader(settings, first).policy_lines()
    principals = sorted(
        {
            topic
            for entry in _history(lines, settings.topics.policies).entries
            for topic in principal_topics(entry.policy, settings)
        }
    )
    return await take_cut(settings, as_of, input_topics(settings, principals))


def _history(lines: list[str], topic: str) -> PolicyHistory:
    if not lines:
        raise ClaimstreamError(
            f"the policy topic {topic} holds no policy at the cut: nothing was decided by then"
        )
    return history_from_lines(lines, topic)


@dataclass
class Read:
    """What reading the cut found: records spilled, refused by reason, and the schema ids of
    the records, by topic."""

    spilled: int
    refused: Counter[str]
    schema_ids: dict[str, list[int]]


class CutReader:
    """Reads a cut's records from the broker, a topic's partitions in order."""

    def __init__(self, settings: Settings, cut: Cut) -> None:
        self.settings, self.cut = settings, cut
        self._proofs: dict[str, Authentication] = {}

    async def records(self, topic: str, each: Callable[[Any], object]) -> None:
        """Every record of `topic` the cut holds, to `each`, by partition and offset."""
        spans = self.cut.topics.get(topic, ())
        if not any(span.end > span.start for span in spans):
            return
        consumer = AIOKafkaConsumer(
            **client_options(self.settings),
            enable_auto_commit=False,
            isolation_level="read_committed",
            max_partition_fetch_bytes=8 << 20,
            fetch_max_bytes=64 << 20,
            auto_offset_reset="none",  # a span no longer held is an error, never skipped
        )
        await consumer.start()
        try:
            for span in spans:
                tp = TopicPartition(topic, span.partition)
                consumer.assign([tp])
                consumer.seek(tp, span.start)
                try:
                    while await consumer.position(tp) < span.end:
                        fetched = await consumer.getmany(tp, timeout_ms=1000, max_records=20_000)
                        for record in fetched.get(tp, []):
                            if record.offset < span.end:
                                each(record)
                except OffsetOutOfRangeError as exc:
                    raise ClaimstreamError(
                        f"{topic}[{span.partition}] no longer holds offsets {span.start} to "
                        f"{span.end} of the cut: its records were deleted (retention)"
                    ) from exc
        finally:
            await consumer.stop()

    async def policy_lines(self) -> list[str]:
        policy_log = PolicyLog(self.settings)
        await self.records(self.settings.topics.policies, policy_log.take)
        return policy_log.lines

    async def histories(self) -> Histories:
        lines = await self.policy_lines()
        policies = _history(lines, self.settings.topics.policies)
        alias_log = AliasLog(
            self.settings,
            lambda record, at: self.proof(policies.in_force(at)).check_alias(record, at),
        )
        await self.records(self.settings.topics.aliases, alias_log.take)
        aliases = alias_log.history(lambda at: policies.in_force(at).defaults.review)
        erasure_log = await published_erasures(
            self.settings,
            lambda record, by, at: self.proof(policies.in_force(at)).check_erasure(record, by, at),
        )
        in_effect = erasure_log.in_effect(lambda at: policies.in_force(at).defaults.review)
        return Histories(policies, aliases, lines, ErasureHistory(in_effect, aliases))

    def proof(self, policy: Policy) -> Authentication:
        proof = self._proofs.get(policy.version)
        if proof is None:
            proof = self._proofs[policy.version] = Authentication(self.settings, policy)
        return proof

    async def spill(
        self, histories: Histories, codec: WireCodec, spill: Spill, progress: Progress
    ) -> Read:
        """Read the claims and statements, authenticated, into the buckets of `spill`, the
        topics in the order of their names (the order is the replay's tie-break)."""
        spiller = _Spiller(self, histories, codec, spill, progress)
        topics = self.settings.topics
        kinds = {topics.resolutions: RESOLUTION, topics.user_claims: USER_CLAIM}
        histories_topics = {topics.policies, topics.aliases}
        progress.phase()
        for topic in sorted(set(self.cut.topics) - histories_topics):
            await self.records(topic, partial(spiller.take, kinds.get(topic, CLAIM)))
        spill.close()
        progress.show("reading", spiller.seen, self.cut.records, "records", force=True)
        for ids in spiller.read.schema_ids.values():
            ids.sort()
        return spiller.read


class _Spiller:
    """Each record read: authenticated as a worker would at its instant, then spilled to the
    bucket of its subject's family, or counted as refused."""

    def __init__(
        self,
        reader: CutReader,
        histories: Histories,
        codec: WireCodec,
        spill: Spill,
        progress: Progress,
    ) -> None:
        self.reader, self.policies, self.codec = reader, histories.policies, codec
        self.spill, self.progress = spill, progress
        self.families = Families(histories.aliases)
        self.as_of_us = micros(reader.cut.as_of)
        self.read = Read(0, Counter(), {})
        self.seen = 0

    def take(self, kind: int, record: Any) -> None:
        self.seen += 1
        self.progress.show("reading", self.seen, self.reader.cut.records, "records")
        value: bytes = record.value or b""
        read = self.read
        if len(value) >= 5:  # the magic byte, then the writer's schema id
            ids = read.schema_ids.setdefault(record.topic, [])
            sid = int.from_bytes(value[1:5], "big")
            if sid not in ids:
                ids.append(sid)
        at_us = min(record.timestamp * 1000, self.as_of_us)
        at = instant(at_us)
        headers = tuple((k, bytes(v or b"")) for k, v in record.headers or ())
        incoming = Incoming(
            record.topic, record.partition, record.offset, record.key, value, headers
        )
        proof = self.reader.proof(self.policies.in_force(at))
        try:
            if kind == RESOLUTION:
                said = self.codec.decode(Resolution, value)
                proof.check_steward(value, headers, said.decided_by, at)
                subject = said.subject
            else:
                claim = self.codec.decode_claim(value)
                proof.check(incoming, claim.source, at_us)
                subject = claim.subject
        except RejectedInput as exc:
            read.refused[exc.reason.value] += 1
            return
        self.spill.add(self.families.of(subject), Spilled(at_us, read.spilled, kind, value))
        read.spilled += 1


def _replayed(
    cut: Cut,
    histories: Histories,
    codec: WireCodec,
    spill: Spill,
    read: Read,
    out: Path,
    fmt: str,
    settings: Settings,
    progress: Progress,
) -> dict[str, Any]:
    """Each bucket replayed and written; the manifest of the files (unsigned)."""
    replay = BucketReplay(
        histories.policies,
        histories.aliases,
        cut.as_of,
        settings.key_limits(),
        codec,
        histories.erasures,
    )
    writers: dict[str, TableWriter] = {name: table_writer(out, name, fmt) for name in TABLE_NAMES}
    refused = Counter(read.refused)
    progress.phase()
    buckets = len(spill.paths)
    keys = 0
    for n in range(buckets):
        rows = replay.rows(spill.bucket(n))
        refused += rows.refused
        keys += len(rows.beliefs)
        writers["beliefs"].add(rows.beliefs)
        writers["evidence"].add(rows.evidence)
        writers["statements"].add(rows.statements)
        progress.show(f"replaying ({keys:,} keys)", n + 1, buckets, "buckets", force=True)
    writers["policies"].add(policy_rows(histories.policy_lines))
    for writer in writers.values():
        writer.close()
    files = [
        {
            "name": w.path.name,
            "table": name,
            "rows": w.rows,
            "bytes": w.path.stat().st_size,
            "sha256": sha256_of(w.path),
        }
        for name, w in writers.items()
    ]
    read_in_all = read.spilled + sum(read.refused.values())
    progress.line(
        f"audit export: {keys:,} keys, {read_in_all:,} records read, "
        f"{read_in_all - sum(refused.values()):,} applied, {sum(refused.values()):,} refused, "
        f"into {out}"
    )
    return unsigned_manifest(
        cut, read.schema_ids, histories.policy_lines, read_in_all, refused, files
    )
