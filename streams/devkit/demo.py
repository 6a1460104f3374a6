"""The demo's disagreements as claims, relative to a moment: the example file and the `dev` feed.

The scenarios are the disagreements the product exists for: a stale replica behind its primary, two
systems of record that split, a user who remembers paying, a deploy that changed a timeout, a
renewal whose seat count changed and one whose sources disagree, two agents that measure different
things. Each scenario is a few rows of data (`Row`: which source says what about which key, and how
long ago); `scenario_claims` turns a round's rows into claim dicts. Round 0 sets every scenario up;
later rounds refresh the live ones on new invoices, and round 1 re-observes the timeout.
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

MARCH_12 = "2026-03-12T00:00:00Z"
PAY, SEATS = "order.payment_status", "contract.seats"
RETRY, LATENCY, BALANCE = "service.retry_timeout", "api.latency", "account.balance"


class Row(NamedTuple):
    """One claim of a scenario: `source` says `value` of `subject`'s `field`, `ago` seconds
    before the round's moment; `extra` holds the claim's other fields."""

    name: str
    subject: str
    field: str
    value: Any
    source: str
    ago: float
    extra: dict[str, Any] | None = None


def _live(round_no: int) -> list[Row]:
    """The scenarios every round refreshes (so freshness keeps them decided), each round on new
    invoices (41, 141, 241...), so decisions keep flowing."""
    inv41, inv42, inv43 = (f"invoice:{n + 100 * round_no}" for n in (41, 42, 43))
    return [
        # A stale replica: the ledger owns payment status; the replica's "overdue" is contested.
        Row("inv41-a", inv41, PAY, "paid", "billing-api", 5, {"replica": "eu-1"}),
        Row("inv41-b", inv41, PAY, "overdue", "reporting-replica", 8),
        # Two systems of record split: a conflict that blocks, never a fall-through.
        Row("inv42-a", inv42, PAY, "paid", "billing-api", 4),
        Row("inv42-b", inv42, PAY, "overdue", "billing-export", 3),
        # A user says they paid; the ledger says unpaid. The assertion stays as evidence.
        Row("inv43-a", inv43, PAY, "unpaid", "billing-api", 6),
        Row("inv43-b", inv43, PAY, "paid", "chat", 2, {"source_class": "user"}),
    ]


# The timeout observed again in epoch 7 confirms the change: the quarantine lifts (round 1).
REOBSERVED = Row("rt-c", "svc:checkout", RETRY, 5, "deploy-tool", 1, {"unit": "s", "epoch": 7})

END_TO_END_MS = {"unit": "ms", "scope": "end_to_end"}
SERVER_S = {"unit": "s", "scope": "server"}
USD_12_50 = {"amount_minor": 1250, "currency": "USD"}
EUR_11_50 = {"amount_minor": 1150, "currency": "EUR"}

# The scenarios round 0 sets up once.
SETUP = [
    # A deploy changed a timeout: epoch 4 said 30 s, epoch 7 says 5 s. Quarantined.
    Row("rt-a", "svc:checkout", RETRY, 30, "config-service", 3600, {"unit": "s", "epoch": 4}),
    Row("rt-b", "svc:checkout", RETRY, 5000, "deploy-tool", 10, {"unit": "ms", "epoch": 7}),
    # A renewal whose seat count changed (a later period): 25 supersedes 40.
    Row("acme-a", "acme", SEATS, 40, "crm", 86400 * 200, {"valid_from": "2025-03-12T00:00:00Z"}),
    Row("acme-b", "acme", SEATS, 25, "crm", 86400, {"valid_from": MARCH_12}),
    # A renewal whose sources disagree about the same period: a conflict a person resolves.
    Row("globex-a", "globex", SEATS, 40, "order-form", 7200, {"valid_from": MARCH_12}),
    Row("globex-b", "globex", SEATS, 25, "billing-export", 3600, {"valid_from": MARCH_12}),
    # Two agents measured different things under one name: a semantic conflict.
    Row("lat-a", "api:checkout", LATENCY, 200, "apm-agent", 30, END_TO_END_MS),
    Row("lat-b", "api:checkout", LATENCY, 0.035, "synthetic-probe", 20, SERVER_S),
    # Money with an explicit currency; a claim in another currency is rejected.
    Row("bal-a", "account:7", BALANCE, USD_12_50, "billing-api", 5),
    Row("bal-b", "account:7", BALANCE, EUR_11_50, "billing-cache", 5),
    # A tool error disguised as an empty result is rejected, not arbitrated.
    Row("inv44-a", "invoice:44", PAY, "", "billing-api", 1),
]


def _at(now: datetime, seconds_ago: float) -> str:
    return (now - timedelta(seconds=seconds_ago)).astimezone(UTC).isoformat().replace("+00:00", "Z")


def scenario_claims(now: datetime, round_no: int = 0) -> list[dict[str, Any]]:
    """One round of the demo as claim dicts (JSON-ready), relative to `now`."""
    rows = _live(round_no)
    if round_no == 1:
        rows.append(REOBSERVED)
    if round_no == 0:
        rows += SETUP
    return [_claim(row, now, round_no) for row in rows]


def _claim(row: Row, now: datetime, round_no: int) -> dict[str, Any]:
    claim = {
        "claim_id": f"demo-{round_no}-{row.name}",
        "subject": row.subject,
        "field": row.field,
        "status": "present",
        "value": row.value,
        "source": row.source,
        "observed_at": _at(now, row.ago),
        **(row.extra or {}),
    }
    return copy.deepcopy(claim)  # callers may edit a claim; the table's dicts stay as written


def scenario_resolutions(now: datetime, round_no: int = 0) -> list[dict[str, Any]]:
    return [
        {
            "resolution_id": f"demo-{round_no}-globex-seats",
            "subject": "globex",
            "field": "contract.seats",
            "status": "present",
            "value": 40,
            "decided_by": "renewals-team",
            "note": "the signed order form is authoritative for the renewal period",
            "decided_at": _at(now, 60),
        }
    ]
