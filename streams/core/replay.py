"""Offline replay: the engine over recorded claims, as a policy owner tries a policy change.

Pure: takes lines of JSON and returns final decisions and rejections, both in a canonical order so
the output is byte-identical whatever order the input lines came in.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from streams.core.agreement import distinct
from streams.core.contracts import Decision, RejectReason, Resolution
from streams.core.engine import arbitrate
from streams.core.errors import ContractError
from streams.core.intake import AdmittedClaim, admit, admit_resolution, parse_claim
from streams.core.policy import Policy


@dataclass(frozen=True, slots=True)
class ReplayRejection:
    claim_id: str | None
    reason: RejectReason
    detail: str
    claim: Any

    def to_json(self) -> str:
        return json.dumps(
            {
                "claim_id": self.claim_id,
                "reason": self.reason.value,
                "detail": self.detail,
                "claim": self.claim,
            },
            sort_keys=True,
            ensure_ascii=False,
        )


@dataclass(frozen=True, slots=True)
class ReplayResult:
    decisions: list[Decision]
    rejections: list[ReplayRejection]
    rejected_resolutions: list[str]
    """One line per unusable resolution: where it is (file:line), the reason and the problem."""


def replay(
    lines: Iterable[str],
    policy: Policy,
    now: datetime,
    resolution_lines: Iterable[str] = (),
    resolutions_origin: str = "resolutions",
) -> ReplayResult:
    """Final decisions for recorded claims and resolutions at `now`, as a worker would reach.

    A claim_id identifies a claim within its subject and field, as in the stream: a key's
    versions of one id that say different things are all rejected (`conflicting_duplicate`), and
    none of them counts. A resolution line that cannot be used is rejected on its own, naming
    `resolutions_origin` and its line number."""
    rejections: list[ReplayRejection] = []
    by_key: dict[tuple[str, str], list[tuple[AdmittedClaim, Any]]] = defaultdict(list)
    for line in lines:
        if not line.strip():
            continue
        data: Any = line
        try:
            data = json.loads(line)
            claim = parse_claim(data)
            admitted = admit(claim, policy, now)
        except json.JSONDecodeError as exc:
            rejections.append(
                ReplayRejection(None, RejectReason.MALFORMED, f"not JSON: {exc.msg}", line)
            )
        except ContractError as exc:
            claim_id = data.get("claim_id") if isinstance(data, dict) else None
            rejections.append(
                ReplayRejection(
                    claim_id if isinstance(claim_id, str) else None, exc.reason, exc.detail, data
                )
            )
        else:
            by_key[(claim.subject, claim.field)].append((admitted, data))

    resolutions, refused = _resolutions(resolution_lines, policy, now, resolutions_origin)
    decisions = []
    for subject, field in sorted(by_key):
        received = by_key[(subject, field)]
        kept, disputed = distinct(admitted for admitted, _ in received)
        rejections += (
            ReplayRejection(
                admitted.claim.claim_id,
                RejectReason.CONFLICTING_DUPLICATE,
                "claim_id used for claims that say different things; no version counts",
                data,
            )
            for admitted, data in received
            if admitted.claim.claim_id in disputed
        )
        rules = policy.rules_for(field)
        assert rules is not None  # admit() refused claims for unknown fields
        arbitration = arbitrate(
            subject,
            field,
            kept,
            rules,
            policy.version,
            now,
            resolutions.get((subject, field), ()),
        )
        decisions.append(arbitration.decision)
    rejections.sort(key=lambda r: (r.claim_id or "", r.reason.value, r.to_json()))
    return ReplayResult(decisions=decisions, rejections=rejections, rejected_resolutions=refused)


def _resolutions(
    lines: Iterable[str], policy: Policy, now: datetime, origin: str
) -> tuple[dict[tuple[str, str], list[Resolution]], list[str]]:
    found: dict[tuple[str, str], list[Resolution]] = defaultdict(list)
    refused: list[str] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            resolution = admit_resolution(Resolution.model_validate_json(line), policy, now)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or '(resolution)'}: {e['msg']}"
                for e in exc.errors()
            )
            refused.append(f"{origin}:{number}: {RejectReason.MALFORMED.value}: {problems}")
        except ContractError as exc:
            refused.append(f"{origin}:{number}: {exc.reason.value}: {exc.detail}")
        else:
            found[(resolution.subject, resolution.field)].append(resolution)
    return found, refused
