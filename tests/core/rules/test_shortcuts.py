"""The table's shortcuts (`streams/core/rules/shortcuts/`) decide exactly as the table (`RULES`)
they encode a second time: the single pass for plain keys (`fused.py`) names exactly the table's
rows that run on plain keys and decides as the table over generated plain keys, a verdict that did
not change keeping the previous decision's id without hashing it again; one more claim placed by the
incremental path (`incremental.py`) decides as the full engine, claim by claim.

scripts/test.sh runs this module again with ten times the examples (`--examples-scale 10`).
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from datetime import datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.core.admission.intake import AdmittedClaim, admit
from streams.core.decision.arbitration import Arbitration
from streams.core.keys.state import KeyState
from streams.core.keys.transitions import add_claim
from streams.core.records.contracts import Claim, Money
from streams.core.records.policy import FieldRules, Policy
from streams.core.rules.engine import RULES, arbitrate, run_rules
from streams.core.rules.rulebook import Rule
from streams.core.rules.shortcuts.fused import applies, arbitrate_plain, check_follows
from tests.support.builders import NOW, POLICY, REPO, WIDE
from tests.support.examples import examples
from tests.support.strategies import arrivals, payment_claims, plain_keys


def _same(fused: Arbitration, table: Arbitration) -> None:
    assert fused.decision_id == table.decision_id
    assert fused.verdict == table.verdict
    assert fused.roles == table.roles
    assert [id(a) for a in fused.claims] == [id(a) for a in table.claims]
    assert (fused.action, fused.unit, fused.outcome) == (table.action, table.unit, table.outcome)
    if table.belief is None:
        assert fused.belief is None
    else:
        assert fused.belief is not None
        assert fused.belief.winner is table.belief.winner
        assert (fused.belief.rank, fused.belief.rules, fused.belief.policy_version) == (
            table.belief.rank,
            table.belief.rules,
            table.belief.policy_version,
        )
    assert fused.decision == table.decision


def test_the_fused_pass_names_the_rows_that_run_on_plain_keys() -> None:
    """The table as it is passes the check the engine makes at import; a row added, one more
    row run on plain keys, or the rows reordered, do not."""
    check_follows(RULES)
    added = Rule("another", lambda remaining, context: None)
    changed_tables = [
        (*RULES[:-1], added, RULES[-1]),
        tuple(dataclasses.replace(rule, plain=True) for rule in RULES),
        tuple(reversed(RULES)),
    ]
    for table in changed_tables:
        with pytest.raises(RuntimeError, match=r"fused\.py\) encodes the rows"):
            check_follows(table)


def test_a_table_the_fused_pass_does_not_follow_fails_at_import() -> None:
    """The engine checks as it is imported (here against a pass that lost its last row)."""
    code = (
        "import streams.core.rules.shortcuts.fused as fused\n"
        "fused.FOLLOWS = fused.FOLLOWS[:-1]\n"
        "import streams.core.rules.engine\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 1
    assert "RuntimeError: the fused pass (streams/core/rules/shortcuts/fused.py)" in done.stderr


@settings(max_examples=examples(1500), deadline=None)
@given(key=plain_keys(), later=st.sampled_from([timedelta(0), timedelta(microseconds=1)]))
def test_the_fused_pass_decides_plain_keys_as_the_table(
    key: tuple[Policy, FieldRules, list[AdmittedClaim]], later: timedelta
) -> None:
    policy, rules, claims = key
    assert applies(claims, ())
    now = NOW + later
    args = ("invoice:42", rules.name, claims, rules, policy.version, now)
    _same(arbitrate_plain(*args, supersedes="dec_x"), run_rules(*args, supersedes="dec_x"))


@settings(max_examples=examples(300), deadline=None)
@given(claims=payment_claims())
def test_arbitrate_decides_as_the_table_whatever_the_claims(claims: list[Claim]) -> None:
    rules = POLICY.rules_for("order.payment_status")
    assert rules is not None
    admitted = [admit(c, POLICY, NOW) for c in claims]
    args = ("invoice:42", rules.name, admitted, rules, POLICY.version, NOW)
    _same(arbitrate(*args), run_rules(*args))


@settings(max_examples=examples(500), deadline=None)
@given(key=plain_keys(), earlier=plain_keys(), data=st.data())
def test_an_unchanged_verdict_takes_the_previous_id_and_a_changed_one_its_own(
    key: tuple[Policy, FieldRules, list[AdmittedClaim]],
    earlier: tuple[Policy, FieldRules, list[AdmittedClaim]],
    data: st.DataObject,
) -> None:
    """The previous arbitration: of a part of the key's claims, or of another key entirely
    (another field, subject, or rules equal in another policy object of the same version): its
    id is taken exactly when it is the one to hash under the very same rules."""
    policy, rules, claims = key
    if data.draw(st.booleans()):
        previous_policy, previous_rules = policy, rules
        previous_claims = claims[: data.draw(st.integers(0, len(claims)))]
    else:
        previous_policy, previous_rules, previous_claims = earlier
    subject = data.draw(st.sampled_from(["invoice:42", "invoice:43"]))
    previous = run_rules(
        subject,
        previous_rules.name,
        previous_claims,
        previous_rules,
        previous_policy.version,
        NOW - timedelta(seconds=1),
    )
    args = ("invoice:42", rules.name, claims, rules, policy.version, NOW)
    expected = run_rules(*args).decision_id
    taken = expected == previous.decision_id and previous_rules is rules
    for decided in (arbitrate(*args, previous=previous), run_rules(*args, previous=previous)):
        assert decided.decision_id == expected
        assert (decided.decision_id is previous.decision_id) == taken


def test_a_money_value_is_compared_as_hashed() -> None:
    """Equal amounts in two Money objects are one verdict: the id is taken, not hashed again."""
    rules = POLICY.rules_for("account.balance")
    assert rules is not None

    def decided(amount: int, previous: Arbitration | None = None) -> Arbitration:
        said = Claim.model_validate(
            {
                "claim_id": "m1",
                "subject": "acct:1",
                "field": "account.balance",
                "status": "present",
                "value": {"amount_minor": amount, "currency": "USD"},
                "source": "billing-api",
                "observed_at": NOW - timedelta(seconds=1),
            }
        )
        admitted = [admit(said, POLICY, NOW)]
        return arbitrate(
            "acct:1", rules.name, admitted, rules, POLICY.version, NOW, (), None, previous
        )

    first = decided(100)
    assert isinstance(first.verdict.value, Money)
    again = decided(100, first)
    assert again.verdict.value is not first.verdict.value
    assert again.decision_id is first.decision_id
    assert decided(5, first).decision_id != first.decision_id


@settings(max_examples=examples(600), deadline=None)
@given(key=arrivals())
def test_incremental_arbitration_equals_the_full_engine_at_every_step(
    key: tuple[Policy, list[tuple[int, Claim]]],
) -> None:
    """Every step of a key, whether the incremental path placed the claim or the rules ran,
    decides and assigns roles exactly as the full engine over the key's claims at that instant."""
    policy, claims = key
    rules = policy.rules_for(claims[0][1].field)
    assert rules is not None
    state: KeyState | None = None
    for moment, c in claims:
        at = NOW + timedelta(seconds=moment)
        step = add_claim(state, admit(c, policy, at), rules, policy.version, at, WIDE)
        state = step.state
        full = arbitrate("invoice:42", rules.name, state.claims, rules, policy.version, at)
        assert step.arbitration.decision_id == full.decision_id
        assert step.arbitration.decision.evidence == full.decision.evidence
        assert state.current is not None
        assert state.current.decision_id == full.decision_id
        assert state.next_check_at == _next_moment(state, rules, at)


def _next_moment(state: KeyState, rules: FieldRules, now: datetime) -> datetime | None:
    """When time alone could next change the key, from its claims (as the full path computes)."""
    moments = [
        a.claim.observed_at + rules.freshness + timedelta(microseconds=1)
        for a in state.claims
        if rules.freshness is not None
    ]
    if state.conflict_since is not None and not state.escalated:
        moments.append(state.conflict_since + rules.escalate_after)
    moments += [m for a in state.claims for m in (a.claim.valid_from, a.claim.valid_to) if m]
    return min((m for m in moments if m > now), default=None)
