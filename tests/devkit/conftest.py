"""One Apache Kafka broker for the bench phases' tests (the rollout and the merge)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from streams.devkit.brokers import KafkaBroker


@pytest.fixture(scope="package")
def bench_kafka() -> Iterator[KafkaBroker]:
    with KafkaBroker(partitions=2) as broker:
        yield broker
