"""The engine's orderings by recency: the same claims, in the same order, as `sorted` and `max`.

`agreement.by_recency` and `agreement.newest_claim` compare claims part by part rather than
through the `RECENCY` key; this holds them equal to `sorted(key=RECENCY)` and `max(key=RECENCY)`
over generated claims, ties (one claim twice, one id at one instant) and long lists included.
"""

from __future__ import annotations

from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from streams.core.agreement import RECENCY, by_recency, newest_claim
from streams.core.contracts import Claim
from streams.core.intake import AdmittedClaim, admit
from tests.core.conftest import NOW
from tests.core.test_properties import POLICY


@st.composite
def admitted_claims(draw: st.DrawFn) -> list[AdmittedClaim]:
    """Claims with few ids and instants (so that recency ties), some admitted twice."""
    count = draw(st.integers(min_value=1, max_value=24))
    made: list[AdmittedClaim] = []
    for _ in range(count):
        if made and draw(st.booleans()) and draw(st.booleans()):
            made.append(draw(st.sampled_from(made)))  # the same object again
            continue
        claim = Claim(
            claim_id=f"c{draw(st.integers(min_value=0, max_value=5))}",
            subject="invoice:42",
            field="order.payment_status",
            status="present",
            value=draw(st.sampled_from(["paid", "unpaid"])),
            source=draw(st.sampled_from(["billing-api", "crm"])),
            observed_at=NOW - timedelta(seconds=draw(st.integers(min_value=0, max_value=3))),
        )
        made.append(admit(claim, POLICY, NOW))
    return made


@settings(max_examples=400, deadline=None)
@given(claims=admitted_claims())
def test_by_recency_orders_as_sorted_by_the_recency_key(claims: list[AdmittedClaim]) -> None:
    ordered = by_recency(claims)
    expected = sorted(claims, key=RECENCY)
    assert [id(a) for a in ordered] == [id(a) for a in expected]


@settings(max_examples=400, deadline=None)
@given(claims=admitted_claims())
def test_newest_claim_is_the_max_by_the_recency_key(claims: list[AdmittedClaim]) -> None:
    assert newest_claim(claims) is max(claims, key=RECENCY)
