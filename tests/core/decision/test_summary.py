"""The decision summary against the pydantic model it was (the reference, kept here): equal
and unequal alike, the same repr and JSON dump, and the forms written before version 3 read
with the same values or refused with the same errors."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict, ValidationError

from streams.core.decision.summary import DecisionSummary
from streams.core.keys.journal import decode_state, encode_state
from streams.core.keys.state import KeyState
from streams.core.keys.stored import EarlierSummary
from streams.core.records.contracts import ConflictKind, Money, Outcome, Value


class ModelSummary(BaseModel):
    """`DecisionSummary` as the pydantic model it was before it became a plain class."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    decision_id: str
    outcome: Outcome
    conflict_kind: ConflictKind | None = None
    value: Value = None
    reason: str
    decided_at: datetime
    supersedes: str | None = None


_TEXT = st.text(max_size=8)
_VALUES: st.SearchStrategy[Value] = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(),
    _TEXT,
    st.builds(Money, amount_minor=st.integers(-(2**63), 2**63 - 1), currency=_TEXT),
)
_FIELDS = st.fixed_dictionaries(
    {
        "decision_id": _TEXT,
        "outcome": st.sampled_from(Outcome),
        "conflict_kind": st.none() | st.sampled_from(ConflictKind),
        "value": _VALUES,
        "reason": _TEXT,
        "decided_at": st.datetimes(timezones=st.just(UTC)),
        "supersedes": st.none() | _TEXT,
    }
)


def _text(fields: dict[str, Any]) -> str:
    return json.dumps(fields, sort_keys=True)


def _both(fields: dict[str, Any]) -> tuple[DecisionSummary, ModelSummary]:
    return DecisionSummary(**fields), ModelSummary(**fields)


@settings(max_examples=200, deadline=None)
@given(first=_FIELDS, second=_FIELDS)
def test_a_summary_compares_shows_and_dumps_as_the_model_did(
    first: dict[str, Any], second: dict[str, Any]
) -> None:
    (summary, model), (other, other_model) = _both(first), _both(second)
    assert summary == DecisionSummary(**first)
    assert (summary == other) == (model == other_model)
    assert repr(summary).removeprefix("DecisionSummary") == repr(model).removeprefix("ModelSummary")
    # As JSON text: a NaN value is never equal to itself, only to the same float object.
    assert _text(summary.as_json()) == _text(model.model_dump(mode="json"))
    if summary == other:
        assert hash(summary) == hash(other)


def test_a_summary_is_equal_whatever_stored_form_it_keeps() -> None:
    fields = {
        "decision_id": "d1",
        "outcome": Outcome.RESOLVED,
        "conflict_kind": None,
        "value": 3,
        "reason": "r",
        "decided_at": datetime(2026, 11, 29, tzinfo=UTC),
        "supersedes": None,
    }
    state = KeyState("s", "f", history=(DecisionSummary(**fields),))
    read = decode_state(encode_state(state))
    assert read.history[0].journaled is not None
    assert read == state
    assert read.history[0] != ModelSummary(**fields)  # another type, as two models differ
    for value in (float("inf"), float("-inf"), Money(amount_minor=1, currency="USD")):
        dumped = ModelSummary(**(fields | {"value": value})).model_dump(mode="json")
        assert DecisionSummary(**(fields | {"value": value})).as_json() == dumped


@settings(max_examples=200, deadline=None)
@given(fields=_FIELDS.filter(lambda f: f["value"] == f["value"]))  # no NaN: unequal to itself
def test_an_earlier_form_reads_back_as_the_model_read_it(fields: dict[str, Any]) -> None:
    dumped = ModelSummary(**fields).model_dump(mode="json", exclude_defaults=True)
    state = {"version": 2, "subject": "s", "field": "f", "history": [dumped]}
    read = decode_state(json.dumps(state).encode()).history[0]
    valid = ModelSummary.model_validate(dumped)
    assert read == DecisionSummary(**dict(valid))


@pytest.mark.parametrize(
    "stored",
    [
        {"decision_id": 1, "outcome": "x", "reason": "r", "decided_at": "nope", "extra": 1},
        {"value": {"amount_minor": 1.5, "currency": "USD"}},
        {"value": [1], "decision_id": "d", "outcome": "resolved", "reason": "r"},
        {"decision_id": "d", "outcome": "resolved", "reason": "r", "decided_at": 1.5e20},
    ],
)
def test_an_earlier_form_is_refused_with_the_errors_the_model_raised(
    stored: dict[str, Any],
) -> None:
    with pytest.raises(ValidationError) as model:
        ModelSummary.model_validate(stored)
    with pytest.raises(ValidationError) as earlier:
        EarlierSummary.model_validate(stored)
    assert earlier.value.title == "DecisionSummary"
    assert earlier.value.errors() == model.value.errors()
    state = {"version": 2, "subject": "s", "field": "f", "history": [stored]}
    with pytest.raises(ValidationError) as read:
        decode_state(json.dumps(state).encode())
    assert read.value.errors() == model.value.errors()
