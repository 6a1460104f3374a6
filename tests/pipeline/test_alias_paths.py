"""An alias change reaches the evidence already held, through the records the stream sends: the
alias key's evidence leaves for the canonical key's owner (the rekeyed topic), is decided there
once with what that key holds, and the alias key says where it went; a retraction sends back
what was sent about the alias's spelling. Every path ends as replay with the alias history ends,
key by key, whatever order the records and the sweep's ticks arrive in.

The records run through `Processor`s as a worker's tasks would, their rekeyed records read back
in as the rekeyed topic delivers them (no broker: the Kafka tests hold the same on one)."""

from __future__ import annotations

from collections import deque
from datetime import UTC, datetime, timedelta

from hypothesis import event, given, settings
from hypothesis import strategies as st

from streams.core.keys.state import KeyState, split_key, state_key
from streams.core.reading.replay import replay_with_clock
from streams.core.records.contracts import Claim, Decision
from streams.core.records.policy import load_policy
from streams.core.timeline.aliases import AliasChange, AliasHistory
from streams.ops.metrics import Metrics
from streams.packaged import example_path
from streams.pipeline import Incoming, Processor
from streams.pipeline.rekey import HEADER_KIND, KIND_MOVED, partition_of
from streams.settings import Settings
from streams.wire.registry import FolderRegistry, WireCodec

SETTINGS = Settings()
CODEC = WireCodec(FolderRegistry())
POLICY = load_policy(example_path("policy.yaml"))
T0 = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
SEATS = "contract.seats"
ALIAS, CANONICAL = "Acme Corp 0", "acme-0"


def claim(n: int, subject: str, source: str, value: int, at: datetime) -> Claim:
    return Claim(
        claim_id=f"c{n}",
        subject=subject,
        field=SEATS,
        status="present",
        value=value,
        source=source,
        observed_at=at,
    )


class Cluster:
    """The workers' tasks as one: each record decided by the owner of its key, the rekeyed
    records it sends queued and read back in; the last decision each key sent."""

    def __init__(self, aliases: AliasHistory) -> None:
        self.aliases = aliases
        self.states: dict[bytes, KeyState] = {}
        self.last: dict[tuple[str, str], Decision] = {}
        self.sent: list[Decision] = []
        self.rekeyed: deque[Incoming] = deque()
        self.moves = 0
        self._offset = 0

    def processor(self, wall: datetime) -> Processor:
        processor = Processor(SETTINGS, POLICY, CODEC, Metrics(POLICY), wall_clock=wall.timestamp)
        processor.adopt_aliases(self.aliases)
        return processor

    def publish(self, said: Claim) -> None:
        """A producer's record, keyed by the subject it names (an alias's spelling, maybe)."""
        key = state_key(said.subject, said.field).encode()
        value = CODEC.encode(SETTINGS.topics.claims, said)
        at = said.observed_at
        partition = partition_of(key, SETTINGS.partitions)
        topic = SETTINGS.topics.claims
        self.handle(Incoming(topic, partition, self._next(), key, value, (), at.timestamp()), at)

    def tick(self, key: bytes, due: datetime) -> None:
        """What the sweep sends a key whose evidence an alias change moves."""
        tick = self.processor(due).tick(key, due)
        self.handle(self._read(tick.key, tick.value, tick.headers, None, None), due)

    def drain(self, wall: datetime) -> None:
        while self.rekeyed:
            self.handle(self.rekeyed.popleft(), wall)

    def handle(self, record: Incoming, wall: datetime) -> None:
        handled = self.processor(wall).process(record, self.states.get)
        if handled.key is not None and handled.state is not None:
            self.states[handled.key] = handled.state
        for out in handled.outputs:
            if out.topic == SETTINGS.topics.decisions:
                decision = CODEC.decode(Decision, out.value)
                self.sent.append(decision)
                self.last[(decision.subject, decision.field)] = decision
            elif out.topic == SETTINGS.topics.rekeyed:
                assert out.partition == partition_of(out.key or b"", SETTINGS.partitions)
                self.moves += dict(out.headers).get(HEADER_KIND) == KIND_MOVED
                stamped = out.timestamp_ms / 1000 if out.timestamp_ms else wall.timestamp()
                self.rekeyed.append(
                    self._read(out.key, out.value, out.headers, out.partition, stamped)
                )
            else:
                assert out.topic != SETTINGS.topics.dead_letters, out.headers

    def _read(
        self,
        key: bytes | None,
        value: bytes | None,
        headers: tuple[tuple[str, bytes], ...],
        partition: int | None,
        timestamp: float | None,
    ) -> Incoming:
        partition = (
            partition_of(key or b"", SETTINGS.partitions) if partition is None else partition
        )
        topic = SETTINGS.topics.rekeyed
        return Incoming(topic, partition, self._next(), key, value, headers, timestamp)

    def _next(self) -> int:
        self._offset += 1
        return self._offset

    def sweep(self, now: datetime) -> None:
        """As the sweep walks: a tick to every key (it sends one to each it finds to regroup;
        one it need not is a late tick, which does nothing), the rekeyed topic read to its end;
        again while a walk moved evidence, as a key it moved evidence to may have more to
        regroup."""
        moved = -1
        while moved != self.moves:
            moved = self.moves
            for key in sorted(self.states):
                self.tick(key, now)
            self.drain(now)


def beliefs_of_replay(
    claims: list[Claim], aliases: AliasHistory, now: datetime
) -> dict[tuple[str, str], tuple[str, object, str | None]]:
    replayed = replay_with_clock(
        [c.model_dump_json() for c in claims], POLICY, now, aliases=aliases
    )
    last: dict[tuple[str, str], Decision] = {}
    for emitted in replayed.emitted:
        if not emitted.escalation:
            last[(emitted.decision.subject, emitted.decision.field)] = emitted.decision
    return {key: belief(d) for key, d in last.items() if holds_evidence(d)}


def holds_evidence(decision: Decision) -> bool:
    """Whether a key believes anything. One left with nothing after an alias change says where
    its evidence went; replay also decides keys that held evidence only in passing, between
    two changes the stream applied to a quiet key in one step (its evidence went straight to
    where the later one sends it): both hold nothing, and believe nothing."""
    return bool(decision.evidence) or decision.outcome.value != "insufficient"


def belief(decision: Decision) -> tuple[str, object, str | None]:
    kind = decision.conflict_kind.value if decision.conflict_kind else None
    return decision.outcome.value, decision.value, kind


def beliefs(cluster: Cluster) -> dict[tuple[str, str], tuple[str, object, str | None]]:
    return {key: belief(d) for key, d in cluster.last.items() if holds_evidence(d)}


def test_an_alias_merges_the_evidence_held_under_both_spellings_and_a_retraction_splits_it() -> (
    None
):
    said = [
        claim(1, ALIAS, "crm", 40, T0),
        claim(2, CANONICAL, "order-form", 25, T0 + timedelta(seconds=1)),
    ]
    merged_at, split_at = T0 + timedelta(seconds=10), T0 + timedelta(seconds=20)
    merged = AliasHistory([AliasChange(ALIAS, CANONICAL, merged_at, "ana")])
    cluster = Cluster(merged)
    for each in said:
        cluster.publish(each)
    before = beliefs(cluster)
    assert before == {
        (ALIAS, SEATS): ("resolved", 40, None),
        (CANONICAL, SEATS): ("resolved", 25, None),
    }
    cluster.sweep(merged_at + timedelta(seconds=1))
    assert cluster.moves == 1
    gone = cluster.last[(ALIAS, SEATS)]
    assert gone.outcome.value == "insufficient"
    assert f"merged into {CANONICAL!r}" in gone.reason
    conflict = cluster.last[(CANONICAL, SEATS)]
    assert conflict.outcome.value == "conflict"
    assert {e.claim_id: e.sent_about for e in conflict.evidence} == {"c1": ALIAS, "c2": None}
    assert cluster.states[state_key(ALIAS, SEATS).encode()].claims == ()
    assert beliefs(cluster) == beliefs_of_replay(said, merged, merged_at + timedelta(seconds=1))

    # A claim sent about the alias after the merge counts on the canonical key, and goes back
    # with the others when the alias is retracted.
    later = claim(3, ALIAS, "crm", 40, T0 + timedelta(seconds=12))
    cluster.publish(later)
    cluster.drain(later.observed_at)
    held = cluster.states[state_key(CANONICAL, SEATS).encode()].claims
    assert {a.claim.claim_id: a.claim.subject for a in held} == {
        "c1": ALIAS,
        "c2": CANONICAL,
        "c3": ALIAS,
    }
    split = AliasHistory([*merged.changes, AliasChange(ALIAS, None, split_at, "ana")])
    cluster.aliases = split
    cluster.sweep(split_at + timedelta(seconds=1))
    after = beliefs(cluster)
    assert after == before
    assert {a.claim.claim_id for a in cluster.states[state_key(ALIAS, SEATS).encode()].claims} == {
        "c1",
        "c3",
    }
    assert after == beliefs_of_replay([*said, later], split, split_at + timedelta(seconds=1))


def test_claims_about_an_alias_count_by_their_instant_and_the_sweep_moves_the_earlier() -> None:
    merged_at = T0 + timedelta(seconds=10)
    cluster = Cluster(AliasHistory([AliasChange(ALIAS, CANONICAL, merged_at)]))
    cluster.publish(claim(1, ALIAS, "crm", 40, T0))
    cluster.drain(T0)
    assert set(cluster.last) == {(ALIAS, SEATS)}
    # After the instant, a claim about the alias counts on the canonical key at once...
    after = merged_at + timedelta(seconds=1)
    cluster.publish(claim(2, ALIAS.upper(), "order-form", 25, after))
    cluster.drain(after)
    assert cluster.last[(CANONICAL, SEATS)].value == 25
    assert cluster.last[(ALIAS, SEATS)].value == 40
    # ...and the quiet alias key's evidence joins it when the sweep ticks it.
    cluster.sweep(after)
    assert "merged into" in cluster.last[(ALIAS, SEATS)].reason
    assert cluster.last[(CANONICAL, SEATS)].outcome.value == "conflict"
    assert {e.claim_id: e.sent_about for e in cluster.last[(CANONICAL, SEATS)].evidence} == {
        "c1": ALIAS,
        "c2": ALIAS.upper(),
    }


SPELLINGS = ["acme", "Acme Corp", "ACME-2231"]
SOURCES = ["crm", "order-form", "billing-cache"]

changes = st.lists(
    st.tuples(
        st.integers(0, 40),
        st.sampled_from(SPELLINGS),
        st.sampled_from([*SPELLINGS, None]),
    ),
    min_size=1,
    max_size=4,
)
said_claims = st.lists(
    st.tuples(st.integers(0, 40), st.sampled_from(SPELLINGS), st.sampled_from(SOURCES)),
    min_size=1,
    max_size=8,
)


@settings(max_examples=300, deadline=None)
@given(changes=changes, said=said_claims, sweeps=st.lists(st.integers(0, 45), max_size=3))
def test_any_order_of_claims_aliases_and_sweeps_ends_as_replay_with_the_alias_history(
    changes: list[tuple[int, str, str | None]],
    said: list[tuple[int, str, str]],
    sweeps: list[int],
) -> None:
    history, _ = AliasHistory.accepting(
        AliasChange(alias, None if canonical == alias else canonical, T0 + timedelta(seconds=at))
        for at, alias, canonical in sorted(changes, key=lambda c: c[0])
    )
    claims = [
        claim(n, subject, source, 10 + n, T0 + timedelta(seconds=at, milliseconds=n))
        for n, (at, subject, source) in enumerate(said)
    ]
    cluster = Cluster(history)
    pending = sorted(claims, key=lambda c: c.observed_at)
    for second in sorted(sweeps):
        now = T0 + timedelta(seconds=second, milliseconds=500)
        while pending and pending[0].observed_at <= now:
            cluster.publish(pending.pop(0))
        cluster.drain(now)
        cluster.sweep(now)
    for each in pending:
        cluster.publish(each)
    end = T0 + timedelta(seconds=60)
    cluster.drain(end)
    cluster.sweep(end)
    replayed = beliefs_of_replay(claims, history, end)
    event("evidence moved" if cluster.moves else "nothing moved")
    assert beliefs(cluster) == replayed
    for key, state in cluster.states.items():
        subject, _ = split_key(key.decode())
        assert all(history.canonical(a.claim.subject, end) == subject for a in state.claims)
