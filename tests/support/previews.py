"""Keys and policies that previews are tested with: the example policy with the edits an
operator makes (contract.seats' authorities swapped, a source dropped so its claims are refused, a
field no longer decided, a field's `on_conflict` changed, a freshness shortened, a unit changed),
and keys grown as a worker grows them under the first of them.

Shared by the core's preview tests (tests/core/reading/test_policy_preview.py) and the cluster's
(tests/console/test_cluster_preview.py).
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from functools import cache
from typing import Any

import yaml

from streams.core.admission.intake import admit
from streams.core.keys.state import KeyState, Limits, state_key
from streams.core.keys.transitions import add_claim
from streams.core.records.contracts import Claim
from streams.core.records.policy import Policy, parse_policy
from streams.core.timeline.rollout import PolicyHistory, catch_up
from tests.support.builders import REPO, WIDE

T0 = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
_RAW = yaml.safe_load((REPO / "examples" / "policy.yaml").read_text())
SEATS, LATENCY, STATUS = "contract.seats", "api.latency", "order.payment_status"


def _swap(raw: dict[str, Any]) -> None:
    raw["fields"][SEATS]["authorities"] = {"crm": "cached", "order-form": "system_of_record"}


def _drop(raw: dict[str, Any]) -> None:
    del raw["sources"]["chat"]


def _forget(raw: dict[str, Any]) -> None:
    del raw["fields"][LATENCY]


def _most_recent(raw: dict[str, Any]) -> None:
    raw["fields"][STATUS]["on_conflict"] = "most_recent"


def _fresher(raw: dict[str, Any]) -> None:
    raw["fields"][STATUS]["freshness"] = "20s"


def _seconds(raw: dict[str, Any]) -> None:
    raw["fields"][LATENCY].update(unit="s", tolerance=0.0005)


EDITS = {  # made in this order (the one removing a field last)
    "swap": _swap,
    "drop": _drop,
    "most_recent": _most_recent,
    "fresher": _fresher,
    "seconds": _seconds,
    "forget": _forget,
}


def raw_variant(edits: frozenset[str]) -> dict[str, Any]:
    """The example policy (seats believed from crm) with `edits` made, its version naming them,
    as its YAML reads."""
    raw = copy.deepcopy(_RAW)
    raw["version"] = "edited:" + "+".join(sorted(edits)) if edits else "A"
    raw["fields"][SEATS]["authorities"] = {"crm": "system_of_record", "order-form": "cached"}
    for name, edit in EDITS.items():
        if name in edits:
            edit(raw)
    return raw


@cache
def variant(edits: frozenset[str]) -> Policy:
    return parse_policy(raw_variant(edits))


B_EDITS = frozenset({"swap", "drop", "forget"})
A, B = variant(frozenset()), variant(B_EDITS)


def preview_claim(n: int, subject: str, field: str, value: Any, source: str, **more: Any) -> Claim:
    return Claim.model_validate(
        {
            "claim_id": f"c{n}",
            "subject": subject,
            "field": field,
            "status": "present",
            "value": value,
            "source": source,
            "observed_at": T0 + timedelta(seconds=n),
            **more,
        }
    )


def grown(history: PolicyHistory, claims: list[Claim], limits: Limits = WIDE) -> KeyState:
    """A key as a worker grows it: caught up, then each claim applied at its instant."""
    state: KeyState | None = None
    for claim in claims:
        at = claim.observed_at
        for _, step in catch_up(state, history, at, limits):
            state = step.state
        policy = history.in_force(at)
        rules = policy.rules_for(claim.field)
        assert rules is not None
        state = add_claim(state, admit(claim, policy, at), rules, policy.version, at, limits).state
    assert state is not None
    return state


def preview_keys() -> list[tuple[str, KeyState]]:
    """Ten seat counts crm and the order form disagree on, two crm and chat agree on, one only
    chat gives, two latencies, and two payment statuses B leaves as they are."""
    found: list[list[Claim]] = []
    for n in range(10):
        found.append(
            [
                preview_claim(1, f"contract:{n}", SEATS, 12, "crm"),
                preview_claim(2, f"contract:{n}", SEATS, 15, "order-form"),
            ]
        )
    for n in range(2):
        found.append(
            [
                preview_claim(1, f"contract:chat{n}", SEATS, 12, "crm"),
                preview_claim(2, f"contract:chat{n}", SEATS, 12, "chat"),
            ]
        )
    found.append([preview_claim(1, "contract:onlychat", SEATS, 7, "chat")])
    for n in range(2):
        found.append([preview_claim(1, f"service:{n}", LATENCY, 120, "apm-agent", unit="ms")])
        found.append([preview_claim(1, f"invoice:{n}", STATUS, "paid", "billing-api")])
    history = PolicyHistory.of(A, T0)
    states = [grown(history, claims) for claims in found]
    return [(state_key(s.subject, s.field), s) for s in states]


NOW = T0 + timedelta(seconds=30)
