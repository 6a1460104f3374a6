"""A record the broker refuses for good is found and dead-lettered, never retried for ever.

A task whose commit fails with an error no retry can fix (a record larger than its topic's
`max.message.bytes`, one the broker finds corrupt: `commit.REFUSED`) is rewound as any failed commit
is, and then *isolated*: its records are read again one at a time, each committed alone, so
that a commit failing again names its one record. That record is dead-lettered
`processing_failed` with the broker's error when it is read again (`Processor.refuse`), and the
task reads on, one record at a time, until it has committed past where it stood when it first
failed; then in full batches again. Only the isolated task goes one record at a time, and its
records are committed apart from the other tasks' batches, whose commits a failure of its own
no longer rewinds. Where even the dead letter is refused, the task stays stuck, and says so
(`ops.health`: `/readyz`, `claimstream_task_stalled_seconds`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from aiokafka.structs import ConsumerRecord, TopicPartition

from streams.arbiter.commit import Commits, Failed, TaskBatch
from streams.arbiter.tasks import InputPositions
from streams.pipeline import Processor

log = logging.getLogger(__name__)

Parts = list[tuple[TopicPartition, list[ConsumerRecord]]]


class Isolation:
    """The tasks being read one record at a time, and where each may go back to batches."""

    def __init__(self, positions: InputPositions, processor: Processor) -> None:
        self.positions = positions
        self.processor = processor
        self._until: dict[int, dict[TopicPartition, int]] = {}  # task -> offsets to pass
        self._trying: dict[int, ConsumerRecord] = {}  # the record each is committing alone

    @property
    def tasks(self) -> frozenset[int]:
        return frozenset(self._until)

    def failed(self, partitions: frozenset[int], cause: str, refused: bool) -> None:
        """These tasks' commit failed (they rewind). `refused`: for good (`commit.REFUSED`)."""
        for partition in partitions:
            trying = self._trying.pop(partition, None)
            if not refused:
                continue
            if trying is not None:
                log.warning(
                    "arbiter: task %d: the broker refuses the records of %s[%d]@%d for good "
                    "(%s); it is dead-lettered when read again",
                    partition,
                    trying.topic,
                    trying.partition,
                    trying.offset,
                    cause,
                )
                self.processor.refuse(trying.topic, trying.partition, trying.offset, cause)
            elif partition not in self._until:
                reached = self.positions.reached
                self._until[partition] = {
                    tp: offset for tp, offset in reached.items() if tp.partition == partition
                }
                log.warning(
                    "arbiter: task %d: a record is refused for good (%s); reading its records "
                    "one at a time to find it",
                    partition,
                    cause,
                )

    def limit(self, partition: int, parts: Parts, first: ConsumerRecord) -> Parts:
        """The task's records to process: all of `parts`, or while it is isolated, `first`
        alone (the earliest in time), the rest read again."""
        if partition not in self._until:
            return parts
        self._trying[partition] = first
        for tp, messages in parts:
            unread = first.offset + 1 if tp.topic == first.topic else messages[0].offset
            self.positions.read_again(tp, unread)
        return [(TopicPartition(first.topic, first.partition), [first])]

    async def commit_alone(self, commits: Commits, alone: Mapping[int, TaskBatch]) -> Failed:
        """Commit each isolated task's record apart: what is in flight first, then each alone
        and settled, so that a failure names its task and its record only."""
        failed = await commits.flush()
        for partition, batch in alone.items():
            done = await commits.commit({partition: batch}) | await commits.flush()
            if partition not in done.rewind:
                self.committed(frozenset({partition}))
            failed |= done
        return failed

    def committed(self, partitions: frozenset[int]) -> None:
        """These isolated tasks committed their record: back to batches once past the failure."""
        reached = self.positions.reached
        for partition in partitions:
            self._trying.pop(partition, None)
            until = self._until.get(partition)
            if until is not None and all(reached.get(tp, 0) >= o for tp, o in until.items()):
                del self._until[partition]
                log.info("arbiter: task %d reads in batches again", partition)
