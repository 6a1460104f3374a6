"""An audit export's rows (audit_rows.py): a belief row says what its decision says, one evidence
row a claim weighed with its role, values as canonical JSON text, a key's stewards' statements
(in force first, then its steward log), the policy publications in the order they took effect,
each until the next; and every row has exactly its table's columns, in order."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from streams.core.admission.intake import admit
from streams.core.keys.state import KeyState
from streams.core.keys.steward_log import Standing
from streams.core.keys.transitions import add_claim, add_resolution
from streams.core.reading.audit_rows import (
    IN_FORCE,
    TABLES,
    Row,
    belief_row,
    evidence_rows,
    policy_rows,
    statement_rows,
    value_text,
)
from streams.core.reading.replay import replay
from streams.core.records.contracts import Decision, Money, Resolution, micros
from streams.core.records.policy import load_policy
from streams.core.timeline.policy_history import history_from_lines, history_line
from tests.support.builders import REPO, claim

POLICY_TEXT = (REPO / "examples" / "policy.yaml").read_text(encoding="utf-8")
POLICY = load_policy(REPO / "examples" / "policy.yaml")
T0 = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
FIELD = "order.payment_status"


def _line(n: int, source: str, value: Any, seconds: int, **fields: Any) -> str:
    data: dict[str, Any] = {
        "claim_id": f"c{n}",
        "subject": "invoice:42",
        "field": FIELD,
        "status": "present",
        "value": value,
        "source": source,
        "observed_at": (T0 + timedelta(seconds=seconds)).isoformat(),
    }
    return json.dumps(data | fields)


def _decided() -> Decision:
    """billing-api and ledger-service say paid (systems of record), billing-cache unpaid."""
    lines = [
        _line(1, "billing-api", "paid", 0, replica="eu-1", valid_from="2026-12-04T11:00:00Z"),
        _line(2, "ledger-service", "paid", 1),
        _line(3, "billing-cache", "unpaid", 2),
    ]
    result = replay(lines, POLICY, T0 + timedelta(seconds=10))
    assert result.rejections == []
    [decision] = result.decisions
    return decision


def _columns(table: str) -> list[str]:
    return [name for name, _ in TABLES[table]]


def test_a_belief_row_says_what_its_decision_says() -> None:
    decision = _decided()
    row = belief_row(decision, claims_held=3)
    assert list(row) == _columns("beliefs")
    assert row == {
        "subject": "invoice:42",
        "field": FIELD,
        "decision_id": decision.decision_id,
        "outcome": "resolved",
        "conflict_kind": None,
        "status": "present",
        "value": '"paid"',
        "unit": None,
        "action": "continue",
        "reason": decision.reason,
        "tiebreak": None,
        "resolution_id": None,
        "policy_version": POLICY.version,
        "decided_at": micros(T0 + timedelta(seconds=10)),
        "supersedes": None,
        "claims_held": 3,
    }
    assert decision.decision_id.startswith("dec_")


def test_a_conflicts_belief_row_names_its_kind_and_no_value() -> None:
    seats = {"subject": "initech", "field": "contract.seats"}
    lines = [_line(1, "crm", 12, 0, **seats), _line(2, "order-form", 15, 2, **seats)]
    [decision] = replay(lines, POLICY, T0 + timedelta(minutes=1)).decisions
    row = belief_row(decision, claims_held=2)
    assert (row["outcome"], row["conflict_kind"], row["action"]) == ("conflict", "value", "block")
    assert (row["status"], row["value"]) == (None, None)
    assert (row["subject"], row["field"]) == ("initech", "contract.seats")


def test_one_evidence_row_a_claim_weighed_with_its_role() -> None:
    decision = _decided()
    rows = evidence_rows(decision)
    assert [list(row) for row in rows] == [_columns("evidence")] * 3
    assert [(r["claim_id"], r["source"], r["role"]) for r in rows] == [
        ("c1", "billing-api", "corroborating"),
        ("c2", "ledger-service", "winner"),
        ("c3", "billing-cache", "contested"),
    ]
    first, _, cached = rows
    assert first["decision_id"] == decision.decision_id
    assert first["replica"] == "eu-1"
    assert first["valid_from"] == micros(datetime(2026, 12, 4, 11, 0, tzinfo=UTC))
    assert first["valid_to"] is None
    assert first["observed_at"] == micros(T0)
    assert first["sent_about"] == "invoice:42"  # None on the evidence: the decision's subject
    assert (cached["authority"], cached["value"], cached["status"]) == (
        "cached",
        '"unpaid"',
        "present",
    )
    assert evidence_rows(decision.model_copy(update={"evidence": ()})) == []


def test_value_text_is_canonical_json() -> None:
    assert value_text(None) is None
    assert value_text("paid") == '"paid"'
    assert value_text("café") == '"café"'  # as written, not escaped
    assert value_text(True) == "true"
    assert value_text(12) == "12"
    assert value_text(1.5) == "1.5"
    money = Money(amount_minor=1250, currency="USD")
    assert value_text(money) == '{"amount_minor":1250,"currency":"USD"}'
    assert value_text({"currency": "USD", "amount_minor": 1250}) == value_text(money)


def test_a_money_belief_is_written_as_canonical_json() -> None:
    line = json.dumps(
        {
            "claim_id": "b1",
            "subject": "acct:1",
            "field": "account.balance",
            "status": "present",
            "value": {"currency": "USD", "amount_minor": 1250},
            "source": "billing-api",
            "observed_at": T0.isoformat(),
        }
    )
    [decision] = replay([line], POLICY, T0 + timedelta(seconds=5)).decisions
    assert belief_row(decision, 1)["value"] == '{"amount_minor":1250,"currency":"USD"}'
    [evidence] = evidence_rows(decision)
    assert evidence["value"] == '{"amount_minor":1250,"currency":"USD"}'


def _said(statement_id: str, by: str, seconds: int, **fields: Any) -> Resolution:
    data: dict[str, Any] = {
        "resolution_id": statement_id,
        "subject": "invoice:42",
        "field": FIELD,
        "decided_by": by,
        "decided_at": T0 + timedelta(seconds=seconds),
    }
    return Resolution.model_validate(data | fields)


def _stewarded() -> KeyState:
    """A conflict resolved by alice (r1), undone by bob (u1), resolved again by carol (r2)."""
    rules = POLICY.rules_for(FIELD)
    assert rules is not None
    state: KeyState | None = None
    observed = T0 - timedelta(seconds=1)
    for c in (
        claim(1, observed_at=observed),
        claim(2, source="billing-export", value="overdue", observed_at=observed),
    ):
        state = add_claim(state, admit(c, POLICY, T0), rules, POLICY.version, T0).state
    assert state is not None
    statements = [
        _said("r1", "alice", 5, value="paid", note="the ledger says paid"),
        _said("u1", "bob", 8, act="undo", target_id="r1"),
        _said("r2", "carol", 9, value="overdue"),
    ]
    for said in statements:
        step = add_resolution(state, said, rules, POLICY.version, said.decided_at)
        assert step.refused is None
        state = step.state
    return state


def test_statement_rows_hold_the_resolutions_in_force_then_the_steward_log() -> None:
    state = _stewarded()
    rows = statement_rows(state)
    assert [list(row) for row in rows] == [_columns("statements")] * 3
    assert [r["resolution_id"] for r in rows[:1]] == [r.resolution_id for r in state.resolutions]
    assert [r["resolution_id"] for r in rows[1:]] == [
        s.statement.resolution_id for s in state.steward_log
    ]
    by_id = {row["resolution_id"]: row for row in rows}
    assert {i: r["standing"] for i, r in by_id.items()} == {
        "r2": IN_FORCE,
        "u1": Standing.APPLIED.value,
        "r1": Standing.UNDONE.value,
    }
    r1, u1, r2 = by_id["r1"], by_id["u1"], by_id["r2"]
    assert (r2["act"], r2["value"], r2["decided_by"]) == ("resolve", '"overdue"', "carol")
    assert r2["decided_at"] == micros(T0 + timedelta(seconds=9))
    assert (r2["needs"], r2["why"], r2["note"]) == (0, None, None)  # "" is written as null
    assert r1["note"] == "the ledger says paid"
    assert (u1["act"], u1["target_id"], u1["value"]) == ("undo", "r1", None)
    assert all(
        (r["subject"], r["field"], r["sent_about"]) == ("invoice:42", FIELD, "invoice:42")
        for r in rows
    )


def test_a_key_with_no_statements_has_no_statement_rows() -> None:
    assert statement_rows(KeyState(subject="invoice:42", field=FIELD)) == []


def _published(version: str) -> str:
    return POLICY_TEXT.replace(f'version: "{POLICY.version}"', f'version: "{version}"')


def test_policy_rows_in_the_order_they_took_effect_each_until_the_next() -> None:
    texts = {v: _published(v) for v in ("v1", "v2", "v3")}
    assert len(set(texts.values())) == 3
    sinces = {
        "v1": datetime(2026, 1, 1, tzinfo=UTC),
        "v2": datetime(2026, 3, 1, 12, 30, 0, 250, tzinfo=UTC),
        "v3": datetime(2026, 6, 1, tzinfo=UTC),
    }
    lines = [history_line(sinces[v], texts[v]) for v in ("v3", "v1", "v2")]
    rows = policy_rows(lines)
    assert [list(row) for row in rows] == [_columns("policies")] * 3
    assert rows == [
        {
            "version": v,
            "since": micros(sinces[v]),
            "until": until,
            "digest": hashlib.sha256(texts[v].encode()).hexdigest(),
        }
        for v, until in (
            ("v1", micros(sinces["v2"])),
            ("v2", micros(sinces["v3"])),
            ("v3", None),
        )
    ]


def test_one_policy_is_in_force_until_the_cut() -> None:
    [row] = policy_rows([history_line(T0, POLICY_TEXT)])
    assert (row["version"], row["since"], row["until"]) == (POLICY.version, micros(T0), None)
    assert row["digest"] == hashlib.sha256(POLICY_TEXT.encode("utf-8")).hexdigest()
    assert policy_rows([]) == []


def test_of_two_lines_taking_effect_at_one_instant_the_later_is_the_one_in_force() -> None:
    """As in the policy history the workers read: the later line at an instant wins, so it is
    the row still in force; the earlier was in force for no time (until its own since)."""
    later = T0 + timedelta(days=30)
    lines = [
        history_line(T0, _published("v1")),
        history_line(later, _published("v9")),
        history_line(later, _published("v2")),
    ]
    assert history_from_lines(lines).in_force(later).version == "v2"
    rows = policy_rows(lines)
    assert [(r["version"], r["since"], r["until"]) for r in rows] == [
        ("v1", micros(T0), micros(later)),
        ("v9", micros(later), micros(later)),
        ("v2", micros(later), None),
    ]


@pytest.mark.parametrize("table", sorted(TABLES))
def test_every_table_names_each_column_once_with_a_known_kind(table: str) -> None:
    names = _columns(table)
    assert len(names) == len(set(names))
    assert {kind for _, kind in TABLES[table]} <= {"string", "int64", "instant"}


def test_every_row_has_exactly_its_tables_columns() -> None:
    decision = _decided()
    made: dict[str, list[Row]] = {
        "beliefs": [belief_row(decision, 3)],
        "evidence": evidence_rows(decision),
        "statements": statement_rows(_stewarded()),
        "policies": policy_rows([history_line(T0, POLICY_TEXT)]),
    }
    assert set(made) == set(TABLES)
    for table, rows in made.items():
        assert rows, table
        assert all(list(row) == _columns(table) for row in rows), table
