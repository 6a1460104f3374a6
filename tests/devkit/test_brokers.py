"""Real brokers start, carry records, and go away cleanly; Kafka keeps data across a restart."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from streams.devkit.brokers import KafkaBroker, TansuBroker, port_is_free, start_broker

pytestmark = pytest.mark.integration

VALUES = [b"claim-1", b"claim-2", b"claim-3"]


async def _create_topic(bootstrap: str, topic: str, partitions: int = 2) -> None:
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        await admin.close()


async def _produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for v in values:
            # Same key keeps them on one partition, so the consumed order is the produced order.
            await producer.send_and_wait(topic, v, key=b"k")
    finally:
        await producer.stop()


async def _consume(bootstrap: str, topic: str, n: int, timeout: float = 30.0) -> list[bytes]:
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", group_id=None
    )
    await consumer.start()
    got: list[bytes] = []
    try:
        deadline = time.monotonic() + timeout
        while len(got) < n and time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=500)
            got += [r.value for recs in batches.values() for r in recs if r.value is not None]
    finally:
        await consumer.stop()
    return got


def _assert_gone(pid: int, port: int) -> None:
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # signal 0 only checks existence; the child was reaped by stop()
    assert port_is_free(port)


@pytest.mark.parametrize("kind", ["kafka", "tansu"])
def test_produce_consume_then_stop(kind: str, tmp_path: Path) -> None:
    broker = start_broker(kind, data_dir=tmp_path / kind)
    try:
        assert broker.bootstrap == f"127.0.0.1:{broker.port}"
        pid = broker.pid
        assert pid is not None
        asyncio.run(_create_topic(broker.bootstrap, "claims"))
        asyncio.run(_produce(broker.bootstrap, "claims", VALUES))
        assert asyncio.run(_consume(broker.bootstrap, "claims", 3)) == VALUES
    finally:
        broker.stop()
    assert broker.pid is None
    _assert_gone(pid, broker.port)


def test_context_manager_removes_its_temp_dir() -> None:
    with TansuBroker() as broker:
        data_dir, pid = broker.data_dir, broker.pid
        assert data_dir.is_dir()
        assert pid is not None
    assert not data_dir.exists()
    _assert_gone(pid, broker.port)


def test_kafka_restart_keeps_data(tmp_path: Path) -> None:
    with KafkaBroker(data_dir=tmp_path / "kafka") as broker:
        port = broker.port
        asyncio.run(_create_topic(broker.bootstrap, "durable"))
        asyncio.run(_produce(broker.bootstrap, "durable", VALUES))
        old_pid = broker.pid
        broker.restart()
        assert broker.pid != old_pid
        assert broker.port == port
        assert asyncio.run(_consume(broker.bootstrap, "durable", 3)) == VALUES
    assert (tmp_path / "kafka").is_dir()  # a caller-supplied data dir is never deleted


def test_unknown_kind() -> None:
    with pytest.raises(ValueError, match="unknown broker kind"):
        start_broker("zookeeper")


def test_refuses_a_busy_port() -> None:
    with TansuBroker() as first, pytest.raises(RuntimeError, match="already in use"):
        TansuBroker(port=first.port).start()
