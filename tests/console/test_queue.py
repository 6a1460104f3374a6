"""The queue: filters, ages from an injected instant, merging workers and naming the silent ones."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from streams.console.queue import QueueFilter, local_rows, merge
from streams.core.admission.intake import admit
from streams.core.keys.state import KeyState
from streams.core.keys.transitions import add_claim, add_resolution
from streams.core.records.contracts import Resolution
from streams.core.records.policy import Policy, load_policy
from tests.support.builders import REPO, claim

POLICY: Policy = load_policy(REPO / "examples" / "policy.yaml")
NOW = datetime(2026, 11, 30, 9, 14, tzinfo=UTC)
RULES = POLICY.rules_for


def conflict(subject: str) -> KeyState:
    rules = POLICY.rules_for("order.payment_status")
    assert rules is not None
    state = None
    for n, (source, value) in enumerate([("billing-api", "paid"), ("billing-export", "overdue")]):
        c = claim(f"{subject}-{n}", subject=subject, source=source, value=value, observed_at=NOW)
        state = add_claim(state, admit(c, POLICY, NOW), rules, POLICY.version, NOW).state
    assert state is not None
    assert state.current is not None
    assert state.current.outcome.value == "conflict"
    return state


def test_rows_are_filtered_by_kind_source_and_age() -> None:
    opened = [(conflict("invoice:1"), NOW - timedelta(minutes=20)), (conflict("invoice:2"), NOW)]
    rows = local_rows(opened, NOW, QueueFilter(), "http://w1", RULES)
    assert [(r["subject"], r["age_s"], r["conflict_kind"]) for r in rows] == [
        ("invoice:1", 1200.0, "value"),
        ("invoice:2", 0.0, "value"),
    ]
    assert rows[0]["sources"] == ["billing-api", "billing-export"]
    assert (
        local_rows(opened, NOW, QueueFilter(min_age_s=600), "w", RULES)[0]["subject"] == "invoice:1"
    )
    assert local_rows(opened, NOW, QueueFilter(kind="semantic"), "w", RULES) == []
    assert local_rows(opened, NOW, QueueFilter(source="crm"), "w", RULES) == []
    assert len(local_rows(opened, NOW, QueueFilter(source="billing-export"), "w", RULES)) == 2


def test_rows_are_tasks_filtered_by_who_holds_them_and_whether_they_are_overdue() -> None:
    rules = RULES("order.payment_status")
    assert rules is not None
    held = conflict("invoice:1")
    taken = Resolution.model_validate(
        {
            "resolution_id": "t1",
            "subject": "invoice:1",
            "field": "order.payment_status",
            "decided_by": "alice",
            "decided_at": NOW,
            "act": "assign",
            "assignee": "alice",
        }
    )
    held = add_resolution(held, taken, rules, POLICY.version, NOW).state
    late = NOW - rules.escalate_after - timedelta(seconds=1)
    opened = [(held, NOW), (conflict("invoice:2"), late)]

    def subjects(wanted: QueueFilter) -> list[str]:
        return [r["subject"] for r in local_rows(opened, NOW, wanted, "w", RULES)]

    assert subjects(QueueFilter(assignee="alice")) == ["invoice:1"]
    assert subjects(QueueFilter(unassigned=True)) == ["invoice:2"]
    assert subjects(QueueFilter(overdue=True)) == ["invoice:2"]
    row = local_rows(opened, NOW, QueueFilter(), "w", RULES)[0]
    assert row["assignee"] == "alice"
    assert row["lease_until"] == (NOW + rules.review.lease).isoformat()
    assert row["due_at"] == (NOW + rules.escalate_after).isoformat()
    assert row["overdue"] is False
    lapsed = NOW + rules.review.lease
    assert local_rows(opened, lapsed, QueueFilter(unassigned=True), "w", RULES)[0]["key"] == (
        "invoice:1|order.payment_status"
    )
    assert QueueFilter.from_query({"overdue": "1", "assignee": "bob"}).query() == {
        "assignee": "bob",
        "overdue": "1",
    }
    with pytest.raises(ValueError, match="unassigned must be 1 or 0"):
        QueueFilter.from_query({"unassigned": "maybe"})


def test_merge_sorts_by_age_counts_every_field_and_names_workers_that_did_not_answer() -> None:
    def row(key: str, field: str, age: float) -> dict[str, object]:
        return {"key": key, "field": field, "age_s": age}

    answers = [
        ("http://w1", [row("a|order.payment_status", "order.payment_status", 5.0)]),
        ("http://w2", None),
        (
            "http://w3",
            [row("b|api.latency", "api.latency", 50.0), row("c|api.latency", "api.latency", 9.0)],
        ),
    ]
    merged = merge(answers, QueueFilter(), NOW)  # type: ignore[arg-type]
    assert [r["key"] for r in merged["open_conflicts"]] == [
        "b|api.latency",
        "c|api.latency",
        "a|order.payment_status",
    ]
    assert merged["unanswered"] == ["http://w2"]
    assert merged["counts_per_field"] == {"api.latency": 2, "order.payment_status": 1}
    only = merge(answers, QueueFilter(field="order.payment_status"), NOW)  # type: ignore[arg-type]
    assert [r["key"] for r in only["open_conflicts"]] == ["a|order.payment_status"]
    assert only["counts_per_field"] == merged["counts_per_field"]


def test_query_parameters_round_trip_and_bad_ages_are_refused() -> None:
    wanted = QueueFilter.from_query({"field": "api.latency", "kind": "semantic", "min_age_s": "60"})
    assert wanted.query() == {"kind": "semantic", "min_age_s": "60.0"}
    assert QueueFilter.from_query(wanted.query()) == QueueFilter(kind="semantic", min_age_s=60.0)
    with pytest.raises(ValueError, match="min_age_s"):
        QueueFilter.from_query({"min_age_s": "soon"})
