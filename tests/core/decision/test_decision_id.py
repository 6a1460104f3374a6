"""The decision id: the same bytes as the formula it was first defined by, for any verdict.

`arbitration.decision_id` reads each part's text from tables worked out once; this holds it
equal to the f-string of the parts hashed by a new blake2b, over generated verdicts of every
outcome, kind, status, value type and action.
"""

from __future__ import annotations

import hashlib

from hypothesis import given, settings
from hypothesis import strategies as st

from streams.core.decision.arbitration import Verdict, decision_id
from streams.core.records.contracts import Action, ClaimStatus, ConflictKind, Money, Outcome, Value

_TEXT = st.text(max_size=12)
_VALUES: st.SearchStrategy[Value] = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False),
    _TEXT,
    st.sampled_from(list(Outcome) + list(ClaimStatus)).map(str),
    st.builds(Money, amount_minor=st.integers(), currency=st.sampled_from(["USD", "EUR"])),
)


def _formula_id(
    subject: str,
    field: str,
    verdict: Verdict,
    unit: str | None,
    action: Action,
    policy_version: str,
) -> str:
    """The id as first defined: the parts formatted by an f-string, hashed by a new blake2b."""
    value = verdict.value
    hashable = (
        f"money:{value.amount_minor}:{value.currency}" if isinstance(value, Money) else repr(value)
    )
    text = (
        f"{len(subject)}:{subject}\x1f{field}\x1f{verdict.outcome}\x1f{verdict.kind}"
        f"\x1f{verdict.status}\x1f{hashable}\x1f{unit}\x1f{action}"
        f"\x1f{policy_version}\x1f{verdict.reason}\x1f{verdict.tiebreak}"
        f"\x1f{verdict.resolution_id}"
    )
    return f"dec_{hashlib.blake2b(text.encode(), digest_size=12).hexdigest()}"


@settings(max_examples=500, deadline=None)
@given(
    subject=_TEXT,
    field=_TEXT,
    outcome=st.sampled_from(Outcome),
    kind=st.none() | st.sampled_from(ConflictKind),
    status=st.none() | st.sampled_from(ClaimStatus),
    value=_VALUES,
    unit=st.none() | _TEXT,
    action=st.sampled_from(Action),
    policy_version=_TEXT,
    reason=_TEXT,
    tiebreak=st.none() | st.just("most_recent") | _TEXT,
    resolution_id=st.none() | _TEXT,
)
def test_decision_id_is_the_formula_of_its_parts(
    subject: str,
    field: str,
    outcome: Outcome,
    kind: ConflictKind | None,
    status: ClaimStatus | None,
    value: Value,
    unit: str | None,
    action: Action,
    policy_version: str,
    reason: str,
    tiebreak: str | None,
    resolution_id: str | None,
) -> None:
    verdict = Verdict(outcome, reason, kind, status, value, tiebreak, resolution_id)
    parts = (subject, field, verdict, unit, action, policy_version)
    assert decision_id(
        subject=subject,
        field=field,
        verdict=verdict,
        unit=unit,
        action=action,
        policy_version=policy_version,
    ) == _formula_id(*parts)
