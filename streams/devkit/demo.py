"""The seeds' scenarios as claims, relative to a moment: the example file and the `dev` feed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

MARCH_12 = "2026-03-12T00:00:00Z"


def _at(now: datetime, seconds_ago: float) -> str:
    return (now - timedelta(seconds=seconds_ago)).astimezone(UTC).isoformat().replace("+00:00", "Z")


def scenario_claims(now: datetime, round_no: int = 0) -> list[dict[str, Any]]:
    """One round of the demo. Round 0 sets every scenario up; later rounds refresh the live ones
    (so freshness keeps them decided) and round 1 re-observes the timeout in its new epoch."""

    def c(
        n: str, subject: str, field: str, value: Any, source: str, ago: float, **extra: Any
    ) -> dict[str, Any]:
        claim = {
            "claim_id": f"demo-{round_no}-{n}",
            "subject": subject,
            "field": field,
            "status": "present",
            "value": value,
            "source": source,
            "observed_at": _at(now, ago),
        }
        claim.update(extra)
        return claim

    pay = "order.payment_status"
    seats = "contract.seats"
    # Each round brings new invoices (41, 141, 241...), so decisions keep flowing.
    inv = [f"invoice:{n + 100 * round_no}" for n in (41, 42, 43)]
    live = [
        # A stale replica: the ledger owns payment status; the replica's "overdue" is contested.
        c("inv41-a", inv[0], pay, "paid", "billing-api", 5, replica="eu-1"),
        c("inv41-b", inv[0], pay, "overdue", "reporting-replica", 8),
        # Two systems of record split: a conflict that blocks, never a fall-through.
        c("inv42-a", inv[1], pay, "paid", "billing-api", 4),
        c("inv42-b", inv[1], pay, "overdue", "billing-export", 3),
        # A user says they paid; the ledger says unpaid. The assertion stays as evidence.
        c("inv43-a", inv[2], pay, "unpaid", "billing-api", 6),
        c("inv43-b", inv[2], pay, "paid", "chat", 2, source_class="user"),
    ]
    if round_no == 1:
        # The timeout observed again in epoch 7 confirms the change: the quarantine lifts.
        live.append(
            c(
                "rt-c",
                "svc:checkout",
                "service.retry_timeout",
                5,
                "deploy-tool",
                1,
                unit="s",
                epoch=7,
            )
        )
    if round_no > 0:
        return live
    return [
        *live,
        # A deploy changed a timeout: epoch 4 said 30 s, epoch 7 says 5 s. Quarantined.
        c(
            "rt-a",
            "svc:checkout",
            "service.retry_timeout",
            30,
            "config-service",
            3600,
            unit="s",
            epoch=4,
        ),
        c(
            "rt-b",
            "svc:checkout",
            "service.retry_timeout",
            5000,
            "deploy-tool",
            10,
            unit="ms",
            epoch=7,
        ),
        # A renewal whose seat count changed (a later period): 25 supersedes 40.
        c("acme-a", "acme", seats, 40, "crm", 86400 * 200, valid_from="2025-03-12T00:00:00Z"),
        c("acme-b", "acme", seats, 25, "crm", 86400, valid_from=MARCH_12),
        # A renewal whose sources disagree about the same period: a conflict a person resolves.
        c("globex-a", "globex", seats, 40, "order-form", 7200, valid_from=MARCH_12),
        c("globex-b", "globex", seats, 25, "billing-export", 3600, valid_from=MARCH_12),
        # Two agents measured different things under one name: a semantic conflict.
        c(
            "lat-a",
            "api:checkout",
            "api.latency",
            200,
            "apm-agent",
            30,
            unit="ms",
            scope="end_to_end",
        ),
        c(
            "lat-b",
            "api:checkout",
            "api.latency",
            0.035,
            "synthetic-probe",
            20,
            unit="s",
            scope="server",
        ),
        # Money with an explicit currency; a claim in another currency is rejected.
        c(
            "bal-a",
            "account:7",
            "account.balance",
            {"amount_minor": 1250, "currency": "USD"},
            "billing-api",
            5,
        ),
        c(
            "bal-b",
            "account:7",
            "account.balance",
            {"amount_minor": 1150, "currency": "EUR"},
            "billing-cache",
            5,
        ),
        # A tool error disguised as an empty result is rejected, not arbitrated.
        c("inv44-a", "invoice:44", pay, "", "billing-api", 1),
    ]


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
