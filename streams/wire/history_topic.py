"""A history topic read whole: the policy and aliases topics, which every worker reads from
their start on every partition, with no consumer group (each worker needs every record), to
their end, then again as they grow. `HistoryTopic.take` says what a record adds."""

from __future__ import annotations

from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from streams.settings import Settings
from streams.wire.kafka import client_options, topic_partitions


class HistoryTopic:
    """A topic read from its start on every partition; each record read goes to `take`."""

    def __init__(self, settings: Settings, topic: str) -> None:
        self.settings = settings
        self.topic = topic
        self._consumer: AIOKafkaConsumer | None = None
        self._partitions: list[TopicPartition] = []

    def take(self, record: Any) -> bool:
        """What a record adds to the history: whether it holds (one that does not is logged
        and passed over)."""
        raise NotImplementedError

    async def start(self) -> None:
        found = (await topic_partitions(self.settings, [self.topic])).get(self.topic) or [0]
        consumer = AIOKafkaConsumer(**client_options(self.settings), enable_auto_commit=False)
        try:
            await consumer.start()
            self._partitions = [TopicPartition(self.topic, p) for p in found]
            consumer.assign(self._partitions)
            await consumer.seek_to_beginning(*self._partitions)
        except BaseException:
            await consumer.stop()
            raise
        self._consumer = consumer

    async def stop(self) -> None:
        if self._consumer is not None:
            await self._consumer.stop()
            self._consumer = None

    async def read(self) -> bool:
        """Read on to the topic's end; whether a new record holds."""
        consumer = self._consumer
        assert consumer is not None, "start() first"
        ends = await consumer.end_offsets(self._partitions)
        grew = False
        for partition in self._partitions:
            while await consumer.position(partition) < ends[partition]:
                fetched = await consumer.getmany(partition, timeout_ms=1000)
                for record in fetched.get(partition, []):
                    grew = self.take(record) or grew
        return grew
