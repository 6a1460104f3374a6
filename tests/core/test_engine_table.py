"""The engine's table says everything a step does: each rule's step writes only the `Context`
fields its rule declares in `sets` (the rest it returns as roles and a verdict)."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.core import engine
from streams.core.contracts import Claim, Resolution
from streams.core.engine import RULES, run_rules
from streams.core.intake import AdmittedClaim, admit, admit_resolution
from streams.core.rulebook import Context, Rule, Step, StepResult
from tests.support.builders import NOW, POLICY, claim
from tests.support.strategies import payment_claims

Snapshot = dict[str, tuple[object, ...]]


def _contents(value: object) -> tuple[object, ...]:
    """What a field holds, by identity, containers item by item (steps append to lists)."""
    if isinstance(value, list):
        return ("list", id(value), *map(id, value))
    if isinstance(value, dict):
        return ("dict", id(value), *((key, id(item)) for key, item in value.items()))
    return ("value", id(value))


def _snapshot(context: Context) -> Snapshot:
    return {f.name: _contents(getattr(context, f.name)) for f in dataclasses.fields(Context)}


def _watched(rule: Rule, written: dict[str, set[str]]) -> Step:
    def step(remaining: list[AdmittedClaim], context: Context) -> StepResult | None:
        before = _snapshot(context)
        result = rule.apply(remaining, context)
        after = _snapshot(context)
        written[rule.name] = {name for name in before if before[name] != after[name]}
        return result

    return step


def _resolution(field: str) -> Resolution:
    said = Resolution.model_validate(
        {
            "resolution_id": "r1",
            "subject": "invoice:42",
            "field": field,
            "status": "present",
            "value": "paid",
            "decided_by": "ann",
            "decided_at": NOW - timedelta(seconds=30),
        }
    )
    return admit_resolution(said, POLICY, NOW)


def _writes(field: str, claims: list[Claim], resolved: bool = False) -> dict[str, set[str]]:
    """Which context fields each rule's step wrote, arbitrating `claims` about `field`."""
    rules = POLICY.rules_for(field)
    assert rules is not None
    admitted = [admit(c.model_copy(update={"field": field}), POLICY, NOW) for c in claims]
    written: dict[str, set[str]] = {}

    def watch(revises: bool) -> tuple[Step, ...]:
        return tuple(_watched(rule, written) for rule in RULES if rule.revises is revises)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(engine, "_DECIDING", watch(False))
        patch.setattr(engine, "_REVISING", watch(True))
        resolutions = (_resolution(field),) if resolved else ()
        run_rules("invoice:42", field, admitted, rules, POLICY.version, NOW, resolutions)
    return written


def _undeclared(written: dict[str, set[str]]) -> dict[str, set[str]]:
    declared = {rule.name: set(rule.sets) for rule in RULES}
    return {
        name: fields - declared[name] for name, fields in written.items() if fields - declared[name]
    }


@settings(max_examples=300, deadline=None)
@given(
    claims=payment_claims(),
    field=st.sampled_from(["order.payment_status", "customer.shipping_address"]),
    resolved=st.booleans(),
)
def test_each_rule_writes_only_the_context_fields_it_declares(
    claims: list[Claim], field: str, resolved: bool
) -> None:
    assert _undeclared(_writes(field, claims, resolved)) == {}


def test_every_field_a_rule_declares_is_one_it_writes() -> None:
    """Cases that reach each declared write: the declarations are exact, not merely safe."""
    payment, address = "order.payment_status", "customer.shipping_address"
    earlier = NOW - timedelta(seconds=2)
    cases = [
        (payment, [claim(1), claim(2, source="crm")]),
        (payment, [claim(1, epoch=1), claim(2, source="chat", source_class="user")]),
        (payment, [claim(1, epoch=1), claim(2, source="crm")]),
        (payment, [claim(1, epoch=1), claim(2, epoch=2, value="unpaid")]),
        (payment, [claim(1), claim(2, source="billing-cache")]),
        (address, [claim(1, value="1 Main St", observed_at=earlier), claim(2, source="crm")]),
    ]
    seen: dict[str, set[str]] = {rule.name: set() for rule in RULES}
    for field, claims in cases:
        written = _writes(field, claims)
        assert _undeclared(written) == {}
        for name, fields in written.items():
            seen[name] |= fields
    assert seen == {rule.name: set(rule.sets) for rule in RULES}
