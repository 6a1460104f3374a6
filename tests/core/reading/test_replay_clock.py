"""Replay with the clock: every decision and escalation the stream emits, at the instants it emits
them, time-driven re-decisions included; and, at `now`, the same belief as the final replay."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from streams.core.reading.replay import replay, replay_with_clock
from streams.core.records.contracts import Outcome
from streams.core.records.policy import load_policy
from streams.core.timeline.rollout import InForce, PolicyHistory
from tests.support.builders import REPO

POLICY = load_policy(REPO / "examples" / "policy.yaml")
T0 = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)


def _line(n: int, at: datetime, **fields: object) -> str:
    data: dict[str, object] = {
        "claim_id": f"c{n}",
        "subject": "invoice:42",
        "field": "order.payment_status",
        "status": "present",
        "value": "paid",
        "source": "billing-api",
        "observed_at": at.isoformat(),
    }
    data.update(fields)
    return json.dumps(data)


def test_a_claim_whose_freshness_runs_out_is_decided_twice() -> None:
    """Resolved when it arrives; insufficient once older than the field's 60 s budget."""
    timed = replay_with_clock([_line(1, T0)], POLICY, T0 + timedelta(minutes=5))
    outcomes = [(e.at - T0, e.decision.outcome, e.escalation) for e in timed.emitted]
    assert outcomes == [
        (timedelta(0), Outcome.RESOLVED, False),
        (timedelta(seconds=60, microseconds=1), Outcome.INSUFFICIENT, False),
    ]


def test_a_fresh_claim_after_expiry_is_decided_again() -> None:
    lines = [_line(1, T0), _line(2, T0 + timedelta(seconds=90))]
    timed = replay_with_clock(lines, POLICY, T0 + timedelta(seconds=100))
    assert [e.decision.outcome for e in timed.emitted] == [
        Outcome.RESOLVED,
        Outcome.INSUFFICIENT,
        Outcome.RESOLVED,
    ]


def test_a_conflict_escalates_after_the_fields_escalate_after() -> None:
    """crm says 12 and order-form 15 (both systems of record): a conflict at once, escalated
    15 minutes later (the policy's default `escalate_after`), and not before `now` reaches it."""
    seats = {"subject": "initech", "field": "contract.seats"}
    lines = [
        _line(1, T0, source="crm", value=12, **seats),
        _line(2, T0 + timedelta(seconds=2), source="order-form", value=15, **seats),
    ]
    early = replay_with_clock(lines, POLICY, T0 + timedelta(minutes=10))
    assert [e.escalation for e in early.emitted] == [False, False]
    timed = replay_with_clock(lines, POLICY, T0 + timedelta(minutes=20))
    escalations = [e for e in timed.emitted if e.escalation]
    assert [e.at - T0 for e in escalations] == [timedelta(minutes=15, seconds=2)]
    assert escalations[0].decision.outcome is Outcome.CONFLICT


def test_a_reused_claim_id_is_refused_as_the_stream_refuses_it() -> None:
    lines = [_line(1, T0), _line(1, T0 + timedelta(seconds=1), value="unpaid")]
    timed = replay_with_clock(lines, POLICY, T0 + timedelta(seconds=2))
    assert [(r.claim_id, r.reason.value) for r in timed.rejections] == [
        ("c1", "conflicting_duplicate")
    ]


_SOURCES = ("billing-api", "ledger-service", "reporting-replica", "billing-cache")
_HISTORY = st.lists(
    st.tuples(
        st.integers(0, 3),  # subject
        st.integers(0, 600),  # seconds after T0
        st.sampled_from(_SOURCES),
        st.sampled_from(("paid", "unpaid", "overdue")),
    ),
    max_size=12,
)


@settings(max_examples=200, deadline=None)
@given(_HISTORY, st.integers(0, 900))
def test_at_now_the_clock_reaches_the_final_replays_belief(
    history: list[tuple[int, int, str, str]], later: int
) -> None:
    """The last decision a key emits up to `now` is the one the final replay gives at `now`."""
    lines = [
        _line(n, T0 + timedelta(seconds=s), subject=f"invoice:{k}", source=source, value=value)
        for n, (k, s, source, value) in enumerate(history)
    ]
    now = T0 + timedelta(seconds=later)
    final = {d.subject: d.decision_id for d in replay(lines, POLICY, now).decisions}
    last = {
        e.decision.subject: e.decision.decision_id
        for e in replay_with_clock(lines, POLICY, now).emitted
        if not e.escalation
    }
    assert last == final


def test_a_policy_history_moves_a_key_and_its_resolution_to_a_new_unit() -> None:
    """api.latency in ms, then from T0 + 60 s in s: two derived sources conflict, a steward
    settles on 120 ms; at the switch the key decides 0.12 s, its resolution moved to seconds
    with its claims (not 120 s)."""
    seconds = POLICY.model_copy(
        update={
            "version": "in-seconds",
            "fields": POLICY.fields
            | {
                "api.latency": POLICY.fields["api.latency"].model_copy(
                    update={"unit": "s", "tolerance": 0.0005}
                )
            },
        }
    )
    history = PolicyHistory([InForce(T0, POLICY), InForce(T0 + timedelta(seconds=60), seconds)])
    latency = {"subject": "checkout", "field": "api.latency", "unit": "ms"}
    lines = [
        _line(1, T0, source="apm-agent", value=120, **latency),
        _line(2, T0, source="synthetic-probe", value=180, **latency),
    ]
    resolution = {
        "resolution_id": "r1",
        "subject": "checkout",
        "field": "api.latency",
        "status": "present",
        "value": 120,
        "unit": "ms",
        "decided_by": "ann",
        "note": "the probe ran cold",
        "decided_at": (T0 + timedelta(seconds=10)).isoformat(),
    }
    timed = replay_with_clock(lines, history, T0 + timedelta(minutes=2), [json.dumps(resolution)])
    decided = [
        (
            e.at - T0,
            e.decision.outcome,
            e.decision.value,
            e.decision.unit,
            e.decision.policy_version,
        )
        for e in timed.emitted
        if not e.escalation
    ]
    assert decided == [
        (timedelta(0), Outcome.RESOLVED, 120.0, "ms", POLICY.version),
        (timedelta(0), Outcome.CONFLICT, None, None, POLICY.version),
        (timedelta(seconds=10), Outcome.RESOLVED, 120.0, "ms", POLICY.version),
        (timedelta(seconds=60), Outcome.RESOLVED, 0.12, "s", "in-seconds"),
    ]
