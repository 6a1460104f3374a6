"""The table's shortcuts (`streams/core/shortcuts/`) decide exactly as the table (`RULES`) they
encode a second time: the single pass for plain keys (`fused.py`) names exactly the table's rows
that run on plain keys and decides as the table over generated plain keys, a verdict that did not
change keeping the previous decision's id without hashing it again; one more claim placed by the
incremental path (`incremental.py`) decides as the full engine, claim by claim.

scripts/test.sh runs this module again with ten times the examples (`--examples-scale 10`).
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from datetime import datetime, timedelta
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.core.arbitration import Arbitration
from streams.core.contracts import Claim, Money
from streams.core.engine import RULES, arbitrate, run_rules
from streams.core.intake import AdmittedClaim, admit
from streams.core.keystate import KeyState, add_claim
from streams.core.policy import FieldRules, Policy, parse_policy
from streams.core.rulebook import Rule
from streams.core.shortcuts.fused import applies, arbitrate_plain, check_follows
from tests.conftest import examples
from tests.core.conftest import NOW, REPO
from tests.core.test_properties import POLICY, SOURCES, WIDE, payment_claims

_raw = yaml.safe_load((REPO / "examples" / "policy.yaml").read_text())
# Beside the example policy: independence counted (two claims of one lineage are one
# observation), and a toleranced number field whose conflicts the newest claims break (tolerance
# chains meet recency there).
_raw["fields"]["order.payment_status"]["min_independent_sources"] = 2
_raw["fields"]["customer.email_verified"]["min_independent_sources"] = 3
_raw["fields"]["api.latency"]["on_conflict"] = "most_recent"
_VARIANT: Policy = parse_policy(_raw)

_VALUES: dict[str, list[Any]] = {
    "order.payment_status": ["paid", "unpaid", "PAID"],
    "api.latency": [120.0, 120.4, 120.8, 121.2, 119.6],  # 0.5 apart is agreement: not transitive
    "customer.shipping_address": ["1 Main St", "2 Side Rd"],
    "customer.email_verified": [True, False],
    "account.balance": [
        {"amount_minor": 100, "currency": "USD"},
        {"amount_minor": 5, "currency": "USD"},
    ],
}
_SOURCES = [  # system_of_record thrice as likely: conflicts at the top need two of a rank
    *["billing-api", "ledger-service", "crm", "config-service"] * 3,  # billing, ledger: one lineage
    "billing-cache",
    "deploy-tool",
    "reporting-replica",  # derived, lineage ledger-replica (with search-index)
    "search-index",
    "apm-agent",
    "chat",
]
_STATUSES = ["present"] * 8 + ["not_found", "not_found", "unavailable", "error", "forbidden"]


def _freshness_offsets(rules: FieldRules) -> list[timedelta]:
    """How old a claim is at NOW: fresh, tied, and either side of the freshness boundary."""
    offsets = [timedelta(0), timedelta(seconds=1), timedelta(seconds=2), timedelta(seconds=30)]
    if rules.freshness is not None:
        tick = timedelta(microseconds=1)
        offsets += [rules.freshness - tick, rules.freshness, rules.freshness + tick]
    else:
        offsets.append(timedelta(days=400))
    return offsets


# The generators' strategies, built once: one built inside a draw is validated anew each time,
# which took a third of the fused test's time.
_POLICIES = st.sampled_from([POLICY, _VARIANT])
_FIELDS = st.sampled_from(sorted(_VALUES))
_FIELD_VALUES = {field: st.sampled_from(values) for field, values in _VALUES.items()}
_COUNTS = st.sampled_from([3, 4, 2, 5, 6, 7, 3, 4, 1, 0])
_REUSE = st.integers(0, 4)
_STATUS = st.sampled_from(_STATUSES)
_SOURCE = st.sampled_from(_SOURCES)
_CLASS = st.sampled_from(["observation"] * 8 + ["user", "inference"])
_LINEAGE = st.sampled_from([None, None, None, "l1", "source:crm"])


@st.composite
def plain_keys(draw: st.DrawFn) -> tuple[Policy, FieldRules, list[AdmittedClaim]]:
    """A policy, a field and plain claims about one key: every status, authority and class,
    shared lineages, claim ids reused with the same or other content, redeliveries."""
    policy = draw(_POLICIES)
    field = draw(_FIELDS)
    rules = policy.rules_for(field)
    assert rules is not None
    offsets = st.sampled_from(_freshness_offsets(rules))
    admitted: list[AdmittedClaim] = []
    for n in range(draw(_COUNTS)):
        reused = n > 0 and draw(_REUSE) == 0  # an earlier claim's id, rarely
        status = draw(_STATUS)
        value = draw(_FIELD_VALUES[field]) if status == "present" else None
        said = Claim.model_validate(
            {
                "claim_id": f"c{draw(st.integers(0, n - 1)) if reused else n}",
                "subject": "invoice:42",
                "field": field,
                "status": status,
                "value": value,
                "unit": "ms" if field == "api.latency" and status == "present" else None,
                "source": draw(_SOURCE),
                "source_class": draw(_CLASS),
                "lineage": draw(_LINEAGE),
                "observed_at": NOW - draw(offsets),
            }
        )
        admitted.append(admit(said, policy, NOW))
    if admitted:
        admitted += draw(st.lists(st.sampled_from(admitted), max_size=2))  # redelivered
    return policy, rules, admitted


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
        "import streams.core.shortcuts.fused as fused\n"
        "fused.FOLLOWS = fused.FOLLOWS[:-1]\n"
        "import streams.core.engine\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 1
    assert "RuntimeError: the fused pass (streams/core/shortcuts/fused.py)" in done.stderr


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


# The incremental path's cases: an enum field whose conflicts block; a float field with a
# tolerance (agreement is not transitive there); a field whose conflicts the newest claims break;
# the enum field where independence is counted (two claims of one lineage are one observation).
_MIXED = [*SOURCES, "apm-agent", "synthetic-probe", "config-service", "deploy-tool"]
_KEYS = {  # policy, field, values, sources, how old a claim may be on arrival (s)
    "enum": (POLICY, "order.payment_status", ["paid", "paid", "unpaid"], _MIXED, 70),
    "float": (POLICY, "api.latency", [120.0, 120.0, 120.3, 120.6, 121.5], _MIXED, 700),
    "recent": (POLICY, "customer.shipping_address", ["1 Main St", "2 Side Rd"], _MIXED, 2),
    "counted": (
        _VARIANT,
        "order.payment_status",
        ["paid", "paid", "paid", "unpaid"],
        ["crm", "config-service", "billing-cache"],
        70,
    ),
}

_KEY_KINDS = st.sampled_from(sorted(_KEYS))
_MOMENTS = st.lists(st.integers(0, 200), min_size=1, max_size=10)
_ARRIVING_STATUS = st.sampled_from(["present"] * 8 + ["not_found", "error"])
_SPECIAL = st.sampled_from([{}] * 6 + [{"epoch": 1}, {"scope": "server"}])
_ONE_IN_SIX = st.integers(0, 5)
_ARRIVING_LINEAGE = st.sampled_from([None, None, "l1", "source:crm", "source:config-service"])


@st.composite
def arrivals(draw: st.DrawFn) -> tuple[Policy, list[tuple[int, Claim]]]:
    """A policy and claims about one key arriving one by one at non-decreasing instants
    (seconds after NOW): mostly plain claims the incremental path takes, some stale on arrival,
    some that force the rules to run again."""
    policy, field, values, sources, oldest_s = _KEYS[draw(_KEY_KINDS)]
    value, source, age = st.sampled_from(values), st.sampled_from(sources), st.integers(0, oldest_s)
    moments = sorted(draw(_MOMENTS))
    out = []
    for n, moment in enumerate(moments):
        at = NOW + timedelta(seconds=moment)
        status = draw(_ARRIVING_STATUS)
        special = draw(_SPECIAL)
        out.append(
            (
                moment,
                Claim(
                    claim_id=f"c{n}",
                    subject="invoice:42",
                    field=field,
                    status=status,
                    value=draw(value) if status == "present" else None,
                    unit="ms" if field == "api.latency" and status == "present" else None,
                    source=draw(source),
                    source_class="user" if draw(_ONE_IN_SIX) == 0 else "observation",
                    observed_at=at - timedelta(seconds=draw(age)),
                    lineage=draw(_ARRIVING_LINEAGE),
                    **special,
                ),
            )
        )
    return policy, out


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
