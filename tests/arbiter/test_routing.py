"""The arbiter's partitioning and its co-partitioned assignment with routes: a key lands where
producers put it, every member gets the same partitions of every topic and knows each one's
owner. (Its batches, rebalances and transactions run against real brokers in tests/stream and
tests/reliability.)"""

from __future__ import annotations

from aiokafka.coordinator.protocol import ConsumerProtocolMemberMetadata
from aiokafka.partitioner import DefaultPartitioner
from hypothesis import given
from hypothesis import strategies as st

from streams.arbiter.routing import RoutingAssignor
from streams.pipeline.rekey import partition_of

TOPICS = ["claims.tools", "claims.users", "claimstream-rekeyed", "claims.resolutions"]


class Cluster:
    def __init__(self, partitions: int) -> None:
        self.partitions = partitions

    def partitions_for_topic(self, topic: str) -> set[int]:
        return set(range(self.partitions))


@given(st.binary(min_size=1, max_size=64), st.integers(min_value=1, max_value=64))
def test_a_key_maps_to_the_partition_producers_put_it_on(key: bytes, partitions: int) -> None:
    everything = list(range(partitions))
    assert partition_of(key, partitions) == DefaultPartitioner()(key, everything, everything)


@given(st.integers(min_value=1, max_value=24), st.integers(min_value=1, max_value=5))
def test_every_member_gets_the_same_partitions_of_every_topic_and_everyone_knows_the_owners(
    partitions: int, member_count: int
) -> None:
    urls = {f"member-{n}": f"http://worker-{n}:6066" for n in range(member_count)}
    members = {
        member: ConsumerProtocolMemberMetadata(0, TOPICS, url.encode())
        for member, url in urls.items()
    }
    leader = RoutingAssignor(urls["member-0"])
    assignments = leader.assign(Cluster(partitions), members)

    owned: dict[int, str] = {}
    for member, assignment in assignments.items():
        per_topic = {topic: tuple(ps) for topic, ps in assignment.assignment}
        assert len(set(per_topic.values())) <= 1, "a task's partitions split across members"
        for partition in next(iter(per_topic.values()), ()):
            assert partition not in owned
            owned[partition] = urls[member]
    assert sorted(owned) == list(range(partitions))

    for member, assignment in assignments.items():
        follower = RoutingAssignor(urls[member])
        follower.on_assignment(assignment)
        assert follower.owners == owned
