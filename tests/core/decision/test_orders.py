"""The engine's orderings by recency and by statement: the same claims, in the same order, as
`sorted` and `max`.

`agreement.by_recency`, `agreement.newest_claim` and `agreement.by_statement` compare claims part
by part rather than through the `RECENCY` and statement keys, and a key's handful of claims is
checked for repeated ids and lineages pair by pair; this holds them equal to `sorted`, `max` and
a set over generated claims, ties (one claim twice, one id at one instant, equal values) and long
lists included.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from operator import attrgetter

from hypothesis import given, settings
from hypothesis import strategies as st

from streams.core.admission.intake import AdmittedClaim, admit
from streams.core.decision.agreement import (
    _ID,
    _LINEAGE,
    RECENCY,
    _all_differ,
    by_recency,
    by_statement,
    newest_claim,
)
from streams.core.records.contracts import Claim
from tests.support.builders import NOW, POLICY


def _payment(draw: st.DrawFn) -> Claim:
    return Claim(
        claim_id=f"c{draw(st.integers(min_value=0, max_value=5))}",
        subject="invoice:42",
        field="order.payment_status",
        status="present",
        value=draw(st.sampled_from(["paid", "unpaid"])),
        source=draw(st.sampled_from(["billing-api", "crm"])),
        observed_at=NOW - timedelta(seconds=draw(st.integers(min_value=0, max_value=3))),
    )


def _latency(draw: st.DrawFn) -> Claim:
    """A number or an absence, equal values repeated (so that statements tie part by part)."""
    present = draw(st.integers(0, 3)) > 0
    return Claim(
        claim_id=f"c{draw(st.integers(min_value=0, max_value=5))}",
        subject="svc:api",
        field="api.latency",
        status="present" if present else "not_found",
        value=draw(st.sampled_from([120.0, 120.4, -0.0, 0.0, 7.0])) if present else None,
        unit="ms" if present else None,
        source=draw(st.sampled_from(["apm-agent", "synthetic-probe", "chat"])),
        observed_at=NOW - timedelta(seconds=draw(st.integers(min_value=0, max_value=3))),
    )


@st.composite
def admitted_claims(
    draw: st.DrawFn, said: Callable[[st.DrawFn], Claim] = _payment
) -> list[AdmittedClaim]:
    """Claims with few ids and instants (so that recency ties), some admitted twice, up to past
    the insertion sorts' length."""
    count = draw(st.integers(min_value=1, max_value=24))
    made: list[AdmittedClaim] = []
    for _ in range(count):
        if made and draw(st.booleans()) and draw(st.booleans()):
            made.append(draw(st.sampled_from(made)))  # the same object again
            continue
        made.append(admit(said(draw), POLICY, NOW))
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


@settings(max_examples=400, deadline=None)
@given(claims=admitted_claims(_latency))
def test_by_statement_orders_as_sorted_by_the_statement_key(claims: list[AdmittedClaim]) -> None:
    ordered = by_statement(claims)
    expected = sorted(claims, key=attrgetter("statement"))
    assert [id(a) for a in ordered] == [id(a) for a in expected]


@settings(max_examples=400, deadline=None)
@given(claims=st.one_of(admitted_claims(), admitted_claims(_latency)))
def test_repeats_are_found_pair_by_pair_as_by_a_set(claims: list[AdmittedClaim]) -> None:
    """`distinct` and `newest_in_lineages` skip their work where no id, or no lineage, repeats."""
    ids, lineages = {a.claim_id for a in claims}, {a.lineage for a in claims}
    assert _all_differ(claims, _ID) is (len(ids) == len(claims))
    assert _all_differ(claims, _LINEAGE) is (len(lineages) == len(claims))
