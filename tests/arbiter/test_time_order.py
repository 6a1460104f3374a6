"""A task reads one fetch's records in time order across its input partitions, each partition's
in its own order; a tie goes to the claims topic."""

from __future__ import annotations

from aiokafka.structs import ConsumerRecord, TopicPartition

from streams.arbiter.loop import _by_task, _in_time_order
from streams.topic_names import Topics

TOPICS = Topics()
RANK = {topic: rank for rank, topic in enumerate(TOPICS.inputs())}


def _records(topic: str, partition: int, stamps: list[int]) -> list[ConsumerRecord]:
    return [
        ConsumerRecord(topic, partition, offset, stamp, 0, b"k", b"v", None, 1, 1, ())
        for offset, stamp in enumerate(stamps)
    ]


def test_a_resolution_fetched_beside_the_claims_it_answers_comes_after_them() -> None:
    claims, resolutions = TopicPartition(TOPICS.claims, 2), TopicPartition(TOPICS.resolutions, 2)
    other = TopicPartition(TOPICS.claims, 3)
    fetched = {
        resolutions: _records(TOPICS.resolutions, 2, [41_000, 50_000]),
        claims: _records(TOPICS.claims, 2, [33_000, 41_000, 45_000, 44_000]),
        other: _records(TOPICS.claims, 3, [1_000]),
    }
    by_task = _by_task(fetched, RANK)
    assert sorted(by_task) == [2, 3]
    assert [tp for tp, _ in by_task[2]] == [claims, resolutions]
    merged = [(r.topic, r.timestamp) for r in _in_time_order(by_task[2])]
    assert merged == [
        (TOPICS.claims, 33_000),
        (TOPICS.claims, 41_000),  # a tie: the claim first, as replay orders them
        (TOPICS.resolutions, 41_000),
        (TOPICS.claims, 45_000),
        (TOPICS.claims, 44_000),  # a partition's own order stands, whatever its timestamps
        (TOPICS.resolutions, 50_000),
    ]
    assert list(_in_time_order(by_task[3])) == fetched[other]
