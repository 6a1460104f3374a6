"""The engine compares instants as integer microseconds since the epoch (the admitted claim's,
now's, the field's budgets): held equal to the same comparisons made on the datetimes, at the
boundaries where the two could part (equal instants, a microsecond either side, `now` in
another time zone, budgets of 0 and none), on both of the engine's paths (the single pass for
plain claims, the rules for claims with a period), the shortcut and the key's upkeep."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta, timezone

import yaml
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from streams.core.admission.intake import admit
from streams.core.keys.transitions import add_claim
from streams.core.keys.upkeep import expiry, next_check
from streams.core.records.contracts import EvidenceRole, micros
from streams.core.records.policy import FieldRules, Policy, parse_policy
from streams.core.rules.engine import arbitrate
from tests.support.builders import NOW, REPO, claim

_FIELD = "order.payment_status"
_RAW = yaml.safe_load((REPO / "examples" / "policy.yaml").read_text())


def _with_freshness(freshness: str) -> Policy:
    raw = copy.deepcopy(_RAW)
    raw["fields"][_FIELD]["freshness"] = freshness
    return parse_policy(raw)


_POLICIES = [_with_freshness(budget) for budget in ("0s", "1s", "60s", "none")]
_TICK = timedelta(microseconds=1)
_ZONES = [UTC, timezone(timedelta(hours=5, minutes=30)), timezone(-timedelta(hours=8))]
_NEAR = [timedelta(0), _TICK, -_TICK, timedelta(seconds=1), -timedelta(seconds=1)]


def _rules(policy: Policy) -> FieldRules:
    rules = policy.rules_for(_FIELD)
    assert rules is not None
    return rules


@st.composite
def boundaries(
    draw: st.DrawFn,
) -> tuple[Policy, datetime, datetime, datetime | None, datetime | None]:
    """A policy, a `now` in some time zone, and a claim's instants on and either side of each
    boundary the engine judges: the freshness budget's, now itself for a period's ends."""
    policy = draw(st.sampled_from(_POLICIES))
    freshness = _rules(policy).freshness
    now = (NOW + draw(st.sampled_from([timedelta(0), _TICK]))).astimezone(
        draw(st.sampled_from(_ZONES))
    )
    ages = [timedelta(0), _TICK, -_TICK, timedelta(seconds=30)]
    if freshness is not None:
        ages += [freshness - _TICK, freshness, freshness + _TICK]
    observed = now - draw(st.sampled_from(ages))
    start = draw(st.sampled_from([None, *_NEAR]))
    end = draw(st.sampled_from([None, *_NEAR]))
    valid_from = None if start is None else now + start
    valid_to = None if end is None else now + end
    assume(valid_from is None or valid_to is None or valid_to > valid_from)
    return policy, now, observed, valid_from, valid_to


def _stale(rules: FieldRules, now: datetime, observed: datetime, valid_to: datetime | None) -> bool:
    """The freshness rule as datetimes say it."""
    too_old = rules.freshness is not None and observed < now - rules.freshness
    return too_old or (valid_to is not None and valid_to <= now)


@settings(max_examples=600, deadline=None)
@given(case=boundaries())
def test_a_claim_is_excluded_stale_or_live_as_its_datetimes_say(
    case: tuple[Policy, datetime, datetime, datetime | None, datetime | None],
) -> None:
    policy, now, observed, valid_from, valid_to = case
    rules = _rules(policy)
    said = claim(1, observed_at=observed, valid_from=valid_from, valid_to=valid_to)
    admitted = admit(said, policy, now)
    role = arbitrate("invoice:42", _FIELD, [admitted], rules, policy.version, now).roles["c1"]
    if valid_from is not None and valid_from > now:
        assert role is EvidenceRole.EXCLUDED
    elif _stale(rules, now, observed, valid_to):
        assert role is EvidenceRole.STALE
    else:
        assert role not in (EvidenceRole.EXCLUDED, EvidenceRole.STALE)


@settings(max_examples=300, deadline=None)
@given(case=boundaries())
def test_the_shortcut_finds_a_claim_stale_as_its_datetimes_say(
    case: tuple[Policy, datetime, datetime, datetime | None, datetime | None],
) -> None:
    """A weaker plain claim after a fresh one: the shortcut places it, stale or not."""
    policy, now, observed, _, _ = case
    rules = _rules(policy)
    first = admit(claim(1, observed_at=now), policy, now)
    state = add_claim(None, first, rules, policy.version, now).state
    weaker = admit(claim(2, source="billing-cache", observed_at=observed), policy, now)
    step = add_claim(state, weaker, rules, policy.version, now)
    assert step.arbitration is step.state.arbitration  # placed, not decided by the rules
    stale = _stale(rules, now, observed, None)
    assert (step.arbitration.roles["c2"] is EvidenceRole.STALE) == stale


@settings(max_examples=600, deadline=None)
@given(case=boundaries(), open_since=st.sampled_from([None, *_NEAR]), escalated=st.booleans())
def test_expiry_and_the_next_check_fall_where_datetimes_put_them(
    case: tuple[Policy, datetime, datetime, datetime | None, datetime | None],
    open_since: timedelta | None,
    escalated: bool,
) -> None:
    policy, now, observed, valid_from, valid_to = case
    rules = _rules(policy)
    admitted = admit(
        claim(1, observed_at=observed, valid_from=valid_from, valid_to=valid_to), policy, now
    )
    expires = None if rules.freshness is None else observed + rules.freshness + _TICK
    assert expiry(admitted, rules) == (None if expires is None else micros(expires))
    conflict_since = None if open_since is None else now - rules.escalate_after + open_since
    moments = [m for m in (expires, valid_from, valid_to) if m is not None]
    if conflict_since is not None and not escalated:
        moments.append(conflict_since + rules.escalate_after)
    expected = min((m for m in moments if m > now), default=None)
    found = next_check((admitted,), conflict_since, escalated, rules, micros(now))
    assert found == expected
    assert found is None or found.utcoffset() == timedelta(0)
