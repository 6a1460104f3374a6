"""The engine's table says everything a step does: each rule's step writes only the `Context`
fields its rule declares in `sets` (the rest it returns as roles and a verdict), and a rule
declared `plain=False` has nothing to do on plain keys, where `run_rules` skips it."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.core.admission.intake import AdmittedClaim, admit, admit_resolution
from streams.core.records.contracts import Claim, Resolution
from streams.core.records.policy import FieldRules, Policy
from streams.core.rules import engine
from streams.core.rules.engine import RULES, run_rules
from streams.core.rules.rulebook import Context, Rule, StepResult
from tests.support.builders import NOW, POLICY, claim
from tests.support.strategies import payment_claims, plain_keys

Snapshot = dict[str, tuple[object, ...]]


@dataclasses.dataclass
class Watch:
    """What each rule's step did in one run of the table."""

    written: dict[str, set[str]] = dataclasses.field(default_factory=dict)
    """The `Context` fields each step that ran wrote."""
    acted: set[str] = dataclasses.field(default_factory=set)
    """The rules whose step returned a result (roles, remaining claims or a verdict)."""


def _contents(value: object) -> tuple[object, ...]:
    """What a field holds, by identity, containers item by item (steps append to lists)."""
    if isinstance(value, list):
        return ("list", id(value), *map(id, value))
    if isinstance(value, dict):
        return ("dict", id(value), *((key, id(item)) for key, item in value.items()))
    return ("value", id(value))


def _snapshot(context: Context) -> Snapshot:
    return {f.name: _contents(getattr(context, f.name)) for f in dataclasses.fields(Context)}


def _watched(rule: Rule, watch: Watch, everywhere: bool) -> Rule:
    """`rule` with its step watched; `everywhere`: run even where its row says to skip it."""

    def step(remaining: list[AdmittedClaim], context: Context) -> StepResult | None:
        before = _snapshot(context)
        result = rule.apply(remaining, context)
        after = _snapshot(context)
        watch.written[rule.name] = {name for name in before if before[name] != after[name]}
        if result is not None:
            watch.acted.add(rule.name)
        return result

    return dataclasses.replace(rule, apply=step, plain=rule.plain or everywhere)


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


def _watch(
    policy: Policy,
    rules: FieldRules,
    admitted: list[AdmittedClaim],
    resolved: bool,
    everywhere: bool = False,
) -> Watch:
    """What each rule's step did, arbitrating `admitted` (with a resolution where `resolved`);
    `everywhere`: the rows declared `plain=False` run on plain keys too."""
    watch = Watch()

    def watched(revises: bool) -> tuple[Rule, ...]:
        return tuple(_watched(rule, watch, everywhere) for rule in RULES if rule.revises is revises)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(engine, "_DECIDING", watched(False))
        patch.setattr(engine, "_REVISING", watched(True))
        resolutions = (_resolution(rules.name),) if resolved else ()
        run_rules("invoice:42", rules.name, admitted, rules, policy.version, NOW, resolutions)
    return watch


def _writes(field: str, claims: list[Claim], resolved: bool = False) -> dict[str, set[str]]:
    """Which context fields each rule's step wrote, arbitrating `claims` about `field`."""
    rules = POLICY.rules_for(field)
    assert rules is not None
    admitted = [admit(c.model_copy(update={"field": field}), POLICY, NOW) for c in claims]
    return _watch(POLICY, rules, admitted, resolved).written


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


@settings(max_examples=300, deadline=None)
@given(key=plain_keys(), data=st.data())
def test_a_rule_skipped_on_plain_keys_has_nothing_to_do_there(
    key: tuple[Policy, FieldRules, list[AdmittedClaim]], data: st.DataObject
) -> None:
    """Run anyway on plain keys (with a resolution in play or not), each rule declared
    `plain=False` returns nothing and writes nothing: skipping it there changes no decision."""
    policy, rules, admitted = key
    assert all(a.plain for a in admitted)
    resolved = rules.name == "order.payment_status" and data.draw(st.booleans())
    watch = _watch(policy, rules, admitted, resolved, everywhere=True)
    skipped = {rule.name for rule in RULES if not rule.plain}
    assert watch.acted & skipped == set()
    assert {name: watch.written[name] for name in skipped if watch.written.get(name)} == {}


def test_every_rule_that_runs_on_plain_keys_has_something_to_do_there() -> None:
    """Plain cases that reach each rule declared to run on plain keys: the flags are exact, not
    merely safe."""
    rules = POLICY.rules_for("order.payment_status")
    assert rules is not None
    before_the_resolution = NOW - timedelta(seconds=40)
    cases = [
        ([claim(1), claim(2, status="error", value=None)], False),  # no_evidence
        ([claim(1), claim(2, observed_at=NOW - timedelta(minutes=2))], False),  # freshness
        ([claim(1), claim(2, source="billing-cache")], False),  # authority
        ([claim(1), claim(2, source="ledger-service", observed_at=NOW)], False),  # lineage
        ([claim(1), claim(2, source="crm", status="not_found", value=None)], False),  # existence
        (
            [
                claim(1, observed_at=before_the_resolution),
                claim(2, source="crm", value="unpaid", observed_at=before_the_resolution),
            ],
            True,  # value's conflict, closed by the resolution
        ),
    ]
    acted: set[str] = set()
    for claims, resolved in cases:
        admitted = [admit(c, POLICY, NOW) for c in claims]
        assert all(a.plain for a in admitted)
        acted |= _watch(POLICY, rules, admitted, resolved).acted
    assert acted == {rule.name for rule in RULES if rule.plain}
