"""Conflicts on one payment key, opened and settled: by a steward's resolution, or over many
keys whose sources are right as often as the test says (`synthetic`)."""

from __future__ import annotations

import random
from datetime import timedelta
from typing import Any

from streams.core.admission.intake import admit
from streams.core.keys.state import KeyState
from streams.core.keys.transitions import add_claim, add_resolution
from streams.core.records.contracts import Claim, Resolution
from streams.core.sources.settlement import Settlement, settlement_of
from tests.support.builders import NOW, POLICY, claim

FIELD = "order.payment_status"
_rules = POLICY.rules_for(FIELD)
assert _rules is not None
RULES = _rules
VALUES = ("paid", "unpaid", "overdue", "refunded")


def opened(claims: list[Claim]) -> KeyState:
    state: KeyState | None = None
    for c in claims:
        state = add_claim(state, admit(c, POLICY, NOW), RULES, POLICY.version, NOW).state
    assert state is not None
    return state


def resolved(state: KeyState, value: str, n: int = 1, **overrides: Any) -> Settlement | None:
    resolution = Resolution.model_validate(
        {
            "resolution_id": f"r{n}",
            "subject": state.subject,
            "field": FIELD,
            "value": value,
            "decided_by": "steward",
            "decided_at": NOW + timedelta(seconds=5),
            **overrides,
        }
    )
    step = add_resolution(state, resolution, RULES, POLICY.version, NOW + timedelta(seconds=5))
    assert step.emitted is not None
    return settlement_of(state, step.emitted.decision, RULES.tolerance)


def synthetic(seed: int, subjects: int) -> list[Settlement]:
    """Two sources (order-form, billing-export) copy one upstream that is right half the time;
    crm and billing-api observe on their own, right 70% of the time. A steward settles every
    key that opened on the truth."""
    rng = random.Random(seed)
    settled = []
    for n in range(subjects):
        truth = rng.choice(VALUES)

        def observed(accuracy: float, truth: str = truth) -> str:
            if rng.random() < accuracy:
                return truth
            return rng.choice([v for v in VALUES if v != truth])

        upstream = observed(0.5)
        said = {
            "order-form": upstream,
            "billing-export": upstream,
            "crm": observed(0.7),
            "billing-api": observed(0.7),
        }
        subject = f"order:{n}"
        state = opened(
            [
                claim(f"{n}-{source}", subject=subject, source=source, value=value)
                for source, value in said.items()
            ]
        )
        assert state.current is not None
        if state.current.outcome != "conflict":
            continue
        settlement = resolved(state, truth, n, subject=subject)
        assert settlement is not None
        settled.append(settlement)
    return settled


AUTHORITIES = {
    (FIELD, s): POLICY.sources[s].authority
    for s in ("order-form", "billing-export", "crm", "billing-api")
}
