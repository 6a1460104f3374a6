from __future__ import annotations

import pytest

from streams.core.records.policy import Policy, load_policy
from tests.support.builders import REPO


@pytest.fixture(scope="session")
def policy() -> Policy:
    return load_policy(REPO / "examples" / "policy.yaml")
