from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from streams.devkit.brokers import KafkaBroker, TansuBroker
from tests.stream.support import Deployment, write_policy

pytestmark = pytest.mark.integration


@pytest.fixture(scope="session")
def kafka() -> Iterator[KafkaBroker]:
    with KafkaBroker(partitions=4) as broker:
        yield broker


@pytest.fixture(scope="session")
def tansu() -> Iterator[TansuBroker]:
    with TansuBroker() as broker:
        yield broker


@pytest.fixture
def deployment_factory(tmp_path: Path):  # type: ignore[no-untyped-def]
    def make(bootstrap: str, policy: Path | None = None, **options: object) -> Deployment:
        policy = policy or write_policy(
            tmp_path / "policy.yaml",
            **{
                "order.payment_status": {"freshness": "10m"},
                "account.balance": {"freshness": "10m"},
            },
        )
        return Deployment(bootstrap=bootstrap, workdir=tmp_path, policy=policy, **options)  # type: ignore[arg-type]

    return make
