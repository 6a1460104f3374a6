"""Generated claims for tests, examples and benchmarks: a realistic mix, reproducible by seed.

The mix: many subjects over the example policy's fields, a share of contended keys (several
sources), some stale claims, some conflicts, user assertions, epochs, and a share of bad input
(unknown source, wrong unit, empty value, missing provenance) that must be rejected.
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta
from typing import Any

_FIELDS: dict[str, list[Any]] = {
    "order.payment_status": ["paid", "unpaid", "overdue", "refunded"],
    "account.balance": [{"amount_minor": n, "currency": "USD"} for n in (0, 1250, 99900)],
    "api.latency": [120.0, 120.2, 480.0],
    "contract.seats": [25, 40],
    "customer.email_verified": [True, False],
}
_UNITS = {"api.latency": "ms"}
_SOURCES = ["billing-api", "crm", "reporting-replica", "billing-cache", "search-index", "apm-agent"]


def _bad(claim: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    kind = rng.randrange(5)
    if kind == 0:
        claim["source"] = "unknown-tool-" + str(rng.randrange(3))
    elif kind == 1:
        claim["value"] = None
    elif kind == 2:
        del claim["observed_at"]
    elif kind == 3:
        claim["field"] = "api.latency"
        claim["value"] = 3.0
        claim["unit"] = "kg"
    else:
        claim["status"] = "maybe"
    return claim


def generate_claims(
    count: int,
    now: datetime,
    *,
    seed: int = 7,
    subjects: int = 500,
    contended_share: float = 0.3,
    stale_share: float = 0.05,
    bad_share: float = 0.03,
    epochs: bool = False,
    reused_id_share: float = 0.0,
) -> list[dict[str, Any]]:
    """JSON-ready claim dicts (timestamps as RFC 3339 strings), `count` of them, plus, for
    `reused_id_share` of them, a second claim with the same id at a random position: half a
    redelivery of the same content, half the same id for another value (a conflicting duplicate)."""
    rng = random.Random(seed)
    fields = sorted(_FIELDS)
    claims = []
    for n in range(count):
        subject = f"subj-{rng.randrange(subjects):05d}"
        field = fields[stable_index(subject, len(fields))]
        contended = rng.random() < contended_share
        source = rng.choice(_SOURCES) if contended else "billing-api"
        choices = _FIELDS[field]
        value = (
            rng.choice(choices) if contended else choices[stable_index(subject, len(choices), 1)]
        )
        age = (
            timedelta(hours=2)
            if rng.random() < stale_share
            else timedelta(seconds=rng.randrange(50))
        )
        claim: dict[str, Any] = {
            "claim_id": f"gen-{seed}-{n}",
            "subject": subject,
            "field": field,
            "status": "present",
            "value": value,
            "source": source,
            "observed_at": (now - age).isoformat().replace("+00:00", "Z"),
        }
        if field in _UNITS:
            claim["unit"] = _UNITS[field]
        if rng.random() < 0.05:
            claim["source_class"] = "user"
            claim["source"] = "chat"
        if epochs:
            claim["epoch"] = rng.choice((1, 1, 1, 2))
        if rng.random() < 0.02:
            claim["status"] = rng.choice(("not_found", "unavailable", "forbidden"))
            claim["value"] = None
        if rng.random() < bad_share:
            claim = _bad(claim, rng)
        claims.append(claim)
    for original in rng.sample(claims, int(count * reused_id_share)):
        reused = dict(original)
        if rng.random() < 0.5 and reused.get("value") is not None:
            others = [v for v in _FIELDS.get(reused["field"], []) if v != reused["value"]]
            reused["value"] = rng.choice(others) if others else reused["value"]
        claims.insert(rng.randrange(len(claims) + 1), reused)
    return claims


def stable_index(subject: str, size: int, salt: int = 0) -> int:
    """A stable choice per subject, so uncontended keys keep one value across claims."""
    return (sum(map(ord, subject)) * 31 + salt) % size
