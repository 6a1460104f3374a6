"""Hypothesis strategies more than one test module draws from.

Each keeps the distribution its tests were written against: the claims about one payment key
(`payment_claims`), plain keys of every field kind the fused pass takes (`plain_keys`), a key's
claims arriving over time (`arrivals`), and key states of any shape (`key_states`). The other
modules' strategies stay beside their tests: each draws what its own property needs (Avro dicts,
contract claims, fuzz), and no two are the same distribution.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import yaml
from hypothesis import strategies as st

from streams.core.admission.intake import AdmittedClaim, admit
from streams.core.decision.summary import DecisionSummary
from streams.core.keys.state import KeyState
from streams.core.records.contracts import (
    Authority,
    Claim,
    ClaimStatus,
    ConflictKind,
    Money,
    Outcome,
    Resolution,
    SourceClass,
    Value,
)
from streams.core.records.policy import FieldRules, Policy, parse_policy
from tests.support.builders import NOW, POLICY, REPO

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
"""Any Avro long."""
DATETIMES = st.datetimes(
    min_value=datetime(1900, 1, 1), max_value=datetime(2200, 1, 1), timezones=st.just(UTC)
)
"""Any instant from 1900 to 2200, in UTC."""

# -- claims about one key --------------------------------------------------------------------------

SOURCES = ["billing-api", "crm", "ledger-service", "reporting-replica", "billing-cache", "chat"]


@st.composite
def payment_claims(draw: st.DrawFn) -> list[Claim]:
    """Claims of every kind the rules treat apart: statuses, classes, epochs, scopes spelled
    differently, validity periods, and claim ids reused with the same or other content."""
    count = draw(st.integers(min_value=1, max_value=7))
    claims = []
    for n in range(count):
        status = draw(st.sampled_from(["present"] * 6 + ["not_found", "unavailable", "error"]))
        period = draw(st.sampled_from([None, None, (-3, None), (-2, -1), (-2, None), (-1, 2)]))
        claims.append(
            Claim(
                claim_id=f"c{draw(st.integers(min_value=0, max_value=n))}",
                subject="invoice:42",
                field="order.payment_status",
                status=status,
                value=draw(st.sampled_from(["paid", "unpaid", "overdue", "PAID"]))
                if status == "present"
                else None,
                source=draw(st.sampled_from(SOURCES)),
                source_class="user" if draw(st.booleans()) and n == 0 else "observation",
                observed_at=NOW - timedelta(seconds=draw(st.integers(min_value=0, max_value=90))),
                valid_from=None if period is None else NOW + timedelta(minutes=period[0]),
                valid_to=None
                if period is None or period[1] is None
                else NOW + timedelta(minutes=period[1]),
                epoch=draw(st.sampled_from([None, 1, 2])),
                scope=draw(st.sampled_from([None, None, None, "server", " Server"])),
            )
        )
    return claims


_variant_raw = yaml.safe_load((REPO / "examples" / "policy.yaml").read_text())
# Beside the example policy: independence counted (two claims of one lineage are one
# observation), and a toleranced number field whose conflicts the newest claims break (tolerance
# chains meet recency there).
_variant_raw["fields"]["order.payment_status"]["min_independent_sources"] = 2
_variant_raw["fields"]["customer.email_verified"]["min_independent_sources"] = 3
_variant_raw["fields"]["api.latency"]["on_conflict"] = "most_recent"
_VARIANT: Policy = parse_policy(_variant_raw)

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


# -- key states of any shape, for the journal ------------------------------------------------------

_TEXT = st.text(max_size=12)  # any script, controls, DEL, astral characters
_SHORT = st.text(max_size=4) | st.sampled_from(["paid", "billing-api", "ms", ""])
_FLOATS = st.floats(allow_nan=False, allow_infinity=False)
_VALUES: st.SearchStrategy[Value] = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    _FLOATS,
    _SHORT,
    st.builds(Money, amount_minor=INT64, currency=_SHORT),
)


def _maybe(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.none() | strategy


@st.composite
def _admitted(draw: st.DrawFn, subject: str, field: str) -> AdmittedClaim:
    said = draw(_VALUES)
    claim = Claim(
        claim_id=draw(_SHORT),
        subject=subject,
        field=field,
        status=draw(st.sampled_from(ClaimStatus)),
        value=said,
        unit=draw(_maybe(_SHORT)),
        source=draw(_SHORT),
        replica=draw(_maybe(_TEXT)),
        source_class=draw(st.sampled_from(SourceClass)),
        observed_at=draw(DATETIMES),
        valid_from=draw(_maybe(DATETIMES)),
        valid_to=draw(_maybe(DATETIMES)),
        epoch=draw(_maybe(st.integers(-(2**40), 2**40))),
        lineage=draw(_maybe(_SHORT)),
        scope=draw(_maybe(_TEXT)),
        confidence=draw(_maybe(_FLOATS)),
        trace_id=draw(_maybe(_TEXT)),
        producer=draw(_maybe(_TEXT)),
        attributes=draw(st.dictionaries(_SHORT, _TEXT, max_size=3)),
    )
    value = draw(st.just(said) | _VALUES)  # normalized: mostly as said, or anything else
    lineage = draw(st.just(claim.lineage or f"source:{claim.source}") | _SHORT)
    return AdmittedClaim(claim, draw(st.sampled_from(Authority)), value, lineage)


@st.composite
def _resolution(draw: st.DrawFn, subject: str, field: str) -> Resolution:
    return Resolution(
        resolution_id=draw(_SHORT),
        subject=subject,
        field=field,
        status=draw(st.sampled_from(ClaimStatus)),
        value=draw(_VALUES),
        unit=draw(_maybe(_SHORT)),
        decided_by=draw(_TEXT),
        note=draw(_TEXT),
        decided_at=draw(DATETIMES),
        resolves_decision_id=draw(_maybe(_SHORT)),
    )


_SUMMARIES = st.builds(
    DecisionSummary,
    decision_id=_SHORT,
    outcome=st.sampled_from(Outcome),
    conflict_kind=_maybe(st.sampled_from(ConflictKind)),
    value=_VALUES,
    reason=_TEXT,
    decided_at=DATETIMES,
    supersedes=_maybe(_SHORT),
)


@st.composite
def key_states(draw: st.DrawFn) -> KeyState:
    """Key states of every shape the journal must hold: claims with every field, money, floats
    and integers of any magnitude, text in any script, epochs, periods, scopes, resolutions,
    decision histories, disputed ids (not states the engine would reach)."""
    subject, field = draw(_TEXT), draw(_SHORT)
    return KeyState(
        subject=subject,
        field=field,
        claims=tuple(draw(st.lists(_admitted(subject, field), max_size=4))),
        resolutions=tuple(draw(st.lists(_resolution(subject, field), max_size=2))),
        history=tuple(draw(st.lists(_SUMMARIES, max_size=3))),
        conflict_since=draw(_maybe(DATETIMES)),
        escalated=draw(st.booleans()),
        next_check_at=draw(_maybe(DATETIMES)),
        disputed=tuple(draw(st.lists(_SHORT, max_size=3))),
    )
