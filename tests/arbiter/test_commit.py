"""At least once, the order of a batch's commit: outputs, then (once they are all acknowledged)
the changelog, then the input offsets; the loop waits for none of it until `IN_FLIGHT` batches
are on their way.

Driven on stand-ins for the tasks, the producer's acknowledgements and the group's offsets, so
that a single output can be refused while the rest are taken: the same failure against a real
broker is in tests/stream/test_emit_failures.py."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from types import SimpleNamespace
from typing import Any

from aiokafka.structs import TopicPartition

from streams.arbiter.commit import IN_FLIGHT, AtLeastOnce, TaskBatch
from streams.ops.metrics import StageClock
from streams.pipeline import Outgoing
from tests.support.fakes import Collector

CHANGELOG = "changelog"


class Journal:
    """A task's store as the commit sees it: the batch's changed key, journaled once."""

    def __init__(self) -> None:
        self.changed: dict[bytes, bytes] = {}
        self.durable = 0
        self.ends: list[int | None] = []  # as each batch was noted durable

    def journal(self) -> dict[bytes, bytes]:
        changed, self.changed = self.changed, {}
        return changed


class Parts:
    def __init__(self, partitions: int, commit_interval_s: float = 0.0) -> None:
        self.journals = {p: Journal() for p in range(partitions)}
        self.committed: list[dict[TopicPartition, int]] = []
        self.commits_running: list[asyncio.Future[None]] = []  # held only if `hold_commits`
        self.hold_commits = False
        self.collector = Collector(CHANGELOG)
        tasks = SimpleNamespace(
            changelog=CHANGELOG,
            open={p: SimpleNamespace(states=j) for p, j in self.journals.items()},
            durable=self._durable,
        )
        positions = SimpleNamespace(commit=self._commit)
        metrics = SimpleNamespace(commit_failures=SimpleNamespace(inc=lambda: None))
        self.commits = AtLeastOnce(
            tasks,  # type: ignore[arg-type]
            self.collector,  # type: ignore[arg-type]
            positions,
            metrics,
            StageClock(),
            commit_interval_s=commit_interval_s,
        )

    def _durable(self, partition: int, end: int | None) -> None:
        self.journals[partition].durable += 1
        self.journals[partition].ends.append(end)

    def _commit(self, offsets: dict[TopicPartition, int]) -> asyncio.Future[None]:
        self.committed.append(dict(offsets))
        done = asyncio.get_running_loop().create_future()
        if self.hold_commits:
            self.commits_running.append(done)
        else:
            done.set_result(None)
        return done

    def batch(self, n: int, partitions: list[int]) -> dict[int, TaskBatch]:
        """Batch `n`: per task, one decision (`d<n>.<p>`) and one changed key (`s<n>.<p>`)."""
        work = {}
        for p in partitions:
            self.journals[p].changed = {f"s{n}.{p}".encode(): b"state"}
            work[p] = TaskBatch(
                outputs=[Outgoing("decisions", f"d{n}.{p}".encode(), b"", partition=p)],
                offsets={TopicPartition("claims", p): n},
            )
        return work


def settled(scenario: Coroutine[Any, Any, None]) -> Coroutine[Any, Any, None]:
    """A hang guard: what the scenario waits for is settled by the test itself, or never."""
    return asyncio.wait_for(scenario, 10)


async def turn() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def settle_outputs(parts: Parts, n: int, partitions: list[int]) -> None:
    """Send batch `n` on `partitions` and acknowledge its outputs."""
    await parts.commits.commit(parts.batch(n, partitions))
    parts.collector.ack(*(f"d{n}.{p}".encode() for p in partitions))
    await turn()


async def settle(parts: Parts, n: int, partition: int) -> None:
    """Send batch `n` on one task and acknowledge its output and then its changelog."""
    await settle_outputs(parts, n, [partition])
    parts.collector.ack(f"s{n}.{partition}".encode())
    await turn()


def test_a_batch_is_journaled_only_once_its_outputs_are_acknowledged_and_committed_after() -> None:
    async def scenario() -> None:
        parts = Parts(2)
        collector = parts.collector
        assert not (await parts.commits.commit(parts.batch(1, [0, 1]))).rewind
        await turn()
        assert collector.sent == [b"d1.0", b"d1.1"]
        collector.ack(b"d1.0")
        await turn()
        assert collector.sent == [b"d1.0", b"d1.1"], "journaled before all outputs were acked"
        collector.ack(b"d1.1")
        await turn()
        assert collector.sent[2:] == [b"s1.0", b"s1.1"]
        assert parts.committed == []
        collector.ack(b"s1.0", b"s1.1")
        await turn()
        assert not (await parts.commits.flush()).rewind
        assert parts.committed == [{TopicPartition("claims", 0): 1, TopicPartition("claims", 1): 1}]
        assert [j.durable for j in parts.journals.values()] == [1, 1]

    asyncio.run(settled(scenario()))


def test_a_settled_batch_is_committed_at_the_next_look_without_waiting_for_the_others() -> None:
    async def scenario() -> None:
        parts = Parts(1)
        collector = parts.collector
        await parts.commits.commit(parts.batch(1, [0]))
        await parts.commits.commit(parts.batch(2, [0]))
        assert parts.committed == [], "committed before anything was journaled"
        collector.ack(b"d2.0")
        await turn()
        # The first batch's changelog waits for its outputs, and the second's for the first's.
        assert collector.sent == [b"d1.0", b"d2.0"]
        collector.ack(b"d1.0")
        await turn()
        assert collector.sent[2:] == [b"s1.0", b"s2.0"], "ready together, sent together"
        await parts.commits.commit(parts.batch(3, [0]))
        collector.ack(b"d3.0")
        await turn()
        # One changelog send at a time: a later one never lands before an earlier that fails.
        assert collector.sent[4:] == [b"d3.0"]
        fourth = asyncio.ensure_future(parts.commits.commit(parts.batch(4, [0])))
        await turn()
        assert fourth.done(), "the loop waited for a batch in flight"
        assert not fourth.result().rewind
        assert parts.committed == []
        collector.ack(b"s1.0", b"s2.0")
        await turn()
        assert collector.sent[5:] == [b"d4.0", b"s3.0"]
        assert not (await parts.commits.idle()).rewind
        assert parts.committed == [{TopicPartition("claims", 0): 2}]
        assert parts.journals[0].ends == [None, 1], "the send's end is its last batch's to note"

    asyncio.run(settled(scenario()))


def test_batches_ready_while_a_changelog_is_on_its_way_send_each_key_once_in_the_next() -> None:
    async def scenario() -> None:
        parts = Parts(2)
        collector = parts.collector
        await settle_outputs(parts, 1, [0])
        assert collector.sent[1:] == [b"s1.0"]
        for n, partitions in ((2, [0, 1]), (3, [0])):
            work = parts.batch(n, partitions)
            parts.journals[0].changed = {b"k": f"state {n}".encode()}
            await parts.commits.commit(work)
            collector.ack(*(f"d{n}.{p}".encode() for p in partitions))
        await turn()
        assert collector.sent[1:] == [b"s1.0", b"d2.0", b"d2.1", b"d3.0"]
        collector.ack(b"s1.0")
        await turn()
        assert collector.sent[5:] == [b"k", b"s2.1"]
        assert collector.values[b"k"] == b"state 3", "the key's latest record"
        collector.ack(b"k", b"s2.1")
        assert not (await parts.commits.flush()).rewind
        assert parts.journals[0].ends == [1, None, 1]
        assert parts.journals[1].ends == [1]
        assert parts.committed == [{TopicPartition("claims", 0): 3, TopicPartition("claims", 1): 2}]

    asyncio.run(settled(scenario()))


def test_the_loop_waits_for_the_oldest_batch_only_past_the_window() -> None:
    async def scenario() -> None:
        parts = Parts(1)
        collector = parts.collector
        for n in range(1, IN_FLIGHT + 1):
            await parts.commits.commit(parts.batch(n, [0]))
        over = asyncio.ensure_future(parts.commits.commit(parts.batch(IN_FLIGHT + 1, [0])))
        await turn()
        assert not over.done(), "more than IN_FLIGHT batches on their way"
        collector.ack(b"d1.0")
        await turn()
        collector.ack(b"s1.0")
        await turn()
        assert over.done()
        assert parts.committed == [{TopicPartition("claims", 0): 1}]

    asyncio.run(settled(scenario()))


def test_offsets_settled_while_a_commit_runs_go_out_together_in_the_next() -> None:
    async def scenario() -> None:
        parts = Parts(2)
        parts.hold_commits = True
        await settle(parts, 1, 0)
        await parts.commits.idle()
        assert parts.committed == [{TopicPartition("claims", 0): 1}]
        for n, partition in ((2, 1), (3, 0)):
            await settle(parts, n, partition)
        await parts.commits.idle()
        assert len(parts.committed) == 1, "a commit went out before the one before it was done"
        parts.commits_running[0].set_exception(RuntimeError("coordinator moved"))
        flushing = asyncio.ensure_future(parts.commits.flush())
        await turn()
        assert parts.committed[1:] == [
            {TopicPartition("claims", 1): 2, TopicPartition("claims", 0): 3}
        ]
        parts.commits_running[1].set_result(None)
        assert not (await flushing).rewind

    asyncio.run(settled(scenario()))


def test_a_refused_output_journals_nothing_of_its_batch_or_the_next_and_rewinds_both() -> None:
    async def scenario() -> None:
        parts = Parts(3)
        collector = parts.collector
        await parts.commits.commit(parts.batch(1, [0, 1]))
        await parts.commits.commit(parts.batch(2, [2]))
        collector.ack(b"d1.0", b"d2.2")
        collector.ack(b"d1.1", error=ValueError("record too large"))
        failed = await parts.commits.flush()
        await turn()
        assert failed.rewind == {0, 1, 2}
        assert [key for key in collector.sent if key.startswith(b"s")] == []
        assert parts.committed == []
        assert [j.durable for j in parts.journals.values()] == [0, 0, 0]

    asyncio.run(settled(scenario()))


def test_settled_offsets_wait_for_the_commit_interval_unless_flushed() -> None:
    async def scenario() -> None:
        parts = Parts(1, commit_interval_s=3600)
        await settle(parts, 1, 0)
        await parts.commits.idle()
        assert parts.committed == [{TopicPartition("claims", 0): 1}], "the first waits for none"
        for n in (2, 3):
            await settle(parts, n, 0)
            await parts.commits.idle()
        assert len(parts.committed) == 1, "committed before the interval was over"
        assert parts.journals[0].durable == 3, "settling waits for no commit"
        assert not (await parts.commits.flush()).rewind
        assert parts.committed[1:] == [{TopicPartition("claims", 0): 3}]

    asyncio.run(settled(scenario()))


def test_a_failed_changelog_sends_none_of_the_later_batches_changelog_and_rewinds_them() -> None:
    async def scenario() -> None:
        parts = Parts(3)
        collector = parts.collector
        await settle_outputs(parts, 1, [0])
        await settle_outputs(parts, 2, [1])
        assert collector.sent == [b"d1.0", b"s1.0", b"d2.1"]
        collector.ack(b"s1.0", error=RuntimeError("not leader for partition"))
        await turn()
        # Batch 3 was decided before the loop saw the failure: it is rewound with the others.
        assert (await parts.commits.commit(parts.batch(3, [2]))).rewind == {0, 1, 2}
        collector.ack(b"d3.2")
        await turn()
        assert collector.sent[3:] == [b"d3.2"], "a changelog went out after a failed one"
        assert parts.committed == []
        assert [j.durable for j in parts.journals.values()] == [0, 0, 0]
        await settle(parts, 4, 0)
        assert not (await parts.commits.flush()).rewind, "the rewound batches are written again"
        assert parts.committed == [{TopicPartition("claims", 0): 4}]

    asyncio.run(settled(scenario()))
