"""Routing: which worker owns which key, and the query face the web API and health read.

`RoutingAssignor` runs in the group's rebalance: range assignment (partition `p` of every input
topic to one member, so a task's partitions stay together) that also shares every member's web
URL. `Ownership` answers from that assignment and the open tasks: the owner of a key, a key's
state, the open conflicts, the peers, and the live feed of decisions (`subscribe`); the console
and `streams.worker.app` ask it rather than the loop's parts. Modelled on Kafka Streams'
`KafkaStreams.queryMetadataForKey` over `StreamsMetadataState`.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from aiokafka.coordinator.assignors.range import RangePartitionAssignor
from aiokafka.coordinator.protocol import (
    ConsumerProtocolMemberAssignment,
    ConsumerProtocolMemberMetadata,
)

from streams.arbiter.schedule import Schedule
from streams.arbiter.tasks import Tasks
from streams.core.decision.arbitration import Arbitration
from streams.core.keys.state import KeyState
from streams.pipeline.rekey import partition_of
from streams.settings import Settings
from streams.state.task import TaskStore

Observer = Callable[[Arbitration], None]
"""Told of each decision emitted, as decided: its Decision is built only if it reads it."""


def advertised_url(settings: Settings) -> str:
    host = settings.web_host if settings.web_host not in ("0.0.0.0", "::") else socket.getfqdn()
    return f"http://{host}:{settings.web_port}"


class RoutingAssignor(RangePartitionAssignor):  # type: ignore[misc]
    """Range assignment (partition p of every topic to one member: co-partitioned tasks) that
    also shares each member's web URL, so any worker can route a key's API request to its owner."""

    name = "claimstream-range"

    def __init__(self, url: str) -> None:
        self.url = url
        self.owners: dict[int, str] = {}

    def metadata(self, topics: Iterable[str]) -> ConsumerProtocolMemberMetadata:
        return ConsumerProtocolMemberMetadata(self.version, list(topics), self.url.encode())

    def assign(
        self, cluster: Any, members: Mapping[str, ConsumerProtocolMemberMetadata]
    ) -> dict[str, ConsumerProtocolMemberAssignment]:
        assignments = RangePartitionAssignor.assign(cluster, members)
        owners = {
            partition: members[member].user_data.decode()
            for member, assignment in assignments.items()
            for _, partitions in assignment.assignment
            for partition in partitions
        }
        routes = json.dumps(owners).encode()
        return {
            member: ConsumerProtocolMemberAssignment(a.version, a.assignment, routes)
            for member, a in assignments.items()
        }

    def on_assignment(self, assignment: ConsumerProtocolMemberAssignment) -> None:
        routes = json.loads(assignment.user_data or b"{}")
        self.owners = {int(partition): url for partition, url in routes.items()}


@dataclass(frozen=True)
class Owner:
    """Where a key is served: here (its task is open on this worker), or at `url` (None while
    no worker owns it: a rebalance is under way)."""

    here: bool
    url: str | None = None


class Ownership:
    """Which worker serves which key, what this one holds, and the decisions it emits."""

    def __init__(
        self,
        assignor: RoutingAssignor,
        partitions: int,
        tasks: Tasks,
        schedule: Schedule,
        observers: list[Observer],
    ) -> None:
        self._assignor = assignor
        self._partitions = partitions
        self._tasks = tasks
        self._schedule = schedule
        self._observers = observers

    @property
    def url(self) -> str:
        """This worker's web URL, as the group knows it."""
        return self._assignor.url

    def peers(self) -> list[str]:
        """Every other worker named in the current assignment."""
        return sorted(set(self._assignor.owners.values()) - {self.url})

    def owner_of(self, key: bytes) -> Owner:
        partition = partition_of(key, self._partitions)
        if partition in self._tasks.open:
            return Owner(here=True)
        return Owner(here=False, url=self._assignor.owners.get(partition))

    def state_of(self, key: bytes) -> KeyState | None:
        """The key's state, if this worker serves it."""
        task = self._tasks.open.get(partition_of(key, self._partitions))
        return task.states.get(key) if task is not None else None

    def open_keys(self) -> Iterator[tuple[KeyState, datetime]]:
        """The open conflicts this worker serves, with when each opened."""
        for key, (_, since) in list(self._schedule.open_since.items()):
            state = self.state_of(key)
            if state is not None:
                yield state, since

    def task_records(self, key: bytes) -> list[bytes]:
        """The task-level record `key` of each open task that has one."""
        records = (task.states.get_encoded(key) for task in self._tasks.open.values())
        return [record for record in records if record is not None]

    def task_store(self, partition: int) -> TaskStore | None:
        """The key store of the partition's task, if it is open here."""
        task = self._tasks.open.get(partition)
        return task.states if task is not None else None

    def open_tasks(self) -> frozenset[int]:
        """The partitions whose task is open (restored) on this worker."""
        return frozenset(self._tasks.open)

    def subscribe(self, observer: Observer) -> None:
        """Tell `observer` of every decision this worker emits; it must not block."""
        self._observers.append(observer)
