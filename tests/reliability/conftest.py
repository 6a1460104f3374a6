"""The reliability modules' broker: one Apache Kafka per module, so a module's faults (and its
leftover topics) never reach another's."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from streams.devkit.brokers import KafkaBroker


@pytest.fixture(scope="module")
def kafka() -> Iterator[KafkaBroker]:
    with KafkaBroker(partitions=4) as broker:
        yield broker
