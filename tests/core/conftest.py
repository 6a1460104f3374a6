from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from streams.core.arbitration import Arbitration
from streams.core.contracts import Claim, Decision, Resolution
from streams.core.engine import arbitrate
from streams.core.intake import AdmittedClaim, admit
from streams.core.policy import Policy, load_policy

REPO = Path(__file__).resolve().parents[2]
NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


@pytest.fixture(scope="session")
def policy() -> Policy:
    return load_policy(REPO / "examples" / "policy.yaml")


def claim(n: int | str, **overrides: Any) -> Claim:
    """A fresh, present claim about invoice:42's payment status, observed a second ago."""
    data: dict[str, Any] = {
        "claim_id": f"c{n}",
        "subject": "invoice:42",
        "field": "order.payment_status",
        "status": "present",
        "value": "paid",
        "source": "billing-api",
        "observed_at": NOW - timedelta(seconds=1),
    }
    data.update(overrides)
    return Claim.model_validate(data)


def claim_with_every_field(n: int | str) -> Claim:
    """A claim on a number field that sets every optional part of the envelope."""
    return claim(
        n,
        field="api.latency",
        value=1,
        unit="s",
        replica="eu-1",
        source_class="observation",
        valid_from=NOW - timedelta(hours=1),
        valid_to=NOW + timedelta(hours=1),
        epoch=3,
        lineage="ledger",
        scope="checkout",
        confidence=0.5,
        trace_id="t-1",
        producer="probe",
        attributes={"region": "eu"},
    )


def decide(
    policy: Policy,
    *claims: Claim,
    now: datetime = NOW,
    resolutions: tuple[Resolution, ...] = (),
) -> Arbitration:
    admitted: list[AdmittedClaim] = [admit(c, policy, now) for c in claims]
    field = claims[0].field if claims else "order.payment_status"
    rules = policy.rules_for(field)
    assert rules is not None
    return arbitrate("invoice:42", field, admitted, rules, policy.version, now, resolutions)


def roles(decision: Decision) -> dict[str, str]:
    return {e.claim_id: e.role.value for e in decision.evidence}
