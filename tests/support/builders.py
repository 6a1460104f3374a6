"""Claims, decisions and key states built the same way by any test that needs one, from the pure
core alone (the core's own tests import this)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from streams.core.admission.intake import AdmittedClaim, admit
from streams.core.decision.arbitration import Arbitration
from streams.core.keys.state import KeyState, Limits
from streams.core.keys.transitions import add_claim
from streams.core.records.contracts import Claim, Decision, Resolution
from streams.core.records.policy import Policy, load_policy
from streams.core.rules.engine import arbitrate

REPO = Path(__file__).resolve().parents[2]
NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
WIDE = Limits(max_claims=64)  # no eviction: replay keeps every claim
POLICY: Policy = load_policy(REPO / "examples" / "policy.yaml")
"""The example policy (the packaged one is the same file)."""


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


def state_of(subject: str, values: list[str]) -> KeyState:
    """The payment status of `subject` as billing-api said `values`, a second apart, the last a
    second before NOW."""
    field = "order.payment_status"
    rules = POLICY.rules_for(field)
    assert rules is not None
    state = None
    for n, value in enumerate(values):
        said = Claim(
            claim_id=f"{subject}-{n}",
            subject=subject,
            field=field,
            status="present",
            value=value,
            source="billing-api",
            observed_at=NOW - timedelta(seconds=len(values) - n),
        )
        step = add_claim(state, admit(said, POLICY, NOW), rules, POLICY.version, NOW, Limits())
        state = step.state
    assert state is not None
    return state
