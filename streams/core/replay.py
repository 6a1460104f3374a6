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


def replay(
    lines: Iterable[str],
    policy: Policy,
    now: datetime,
    resolution_lines: Iterable[str] = (),
) -> ReplayResult:
    rejections: list[ReplayRejection] = []
    admitted_by_id: dict[str, list[tuple[str, AdmittedClaim, Any]]] = defaultdict(list)
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
            fingerprint = json.dumps(claim.model_dump(mode="json"), sort_keys=True)
            admitted_by_id[claim.claim_id].append((fingerprint, admitted, data))

    by_key: dict[tuple[str, str], list[AdmittedClaim]] = defaultdict(list)
    for claim_id, versions in admitted_by_id.items():
        versions.sort(key=lambda version: version[0])
        kept_fingerprint, kept, _ = versions[0]
        by_key[(kept.claim.subject, kept.claim.field)].append(kept)
        for fingerprint, _, data in versions[1:]:
            if fingerprint != kept_fingerprint:
                rejections.append(
                    ReplayRejection(
                        claim_id,
                        RejectReason.CONFLICTING_DUPLICATE,
                        "claim_id reused with a different payload",
                        data,
                    )
                )

    resolutions = _resolutions(resolution_lines, policy)
    decisions = []
    for subject, field in sorted(by_key):
        rules = policy.rules_for(field)
        assert rules is not None  # admit() refused claims for unknown fields
        arbitration = arbitrate(
            subject,
            field,
            by_key[(subject, field)],
            rules,
            policy.version,
            now,
            resolutions.get((subject, field), ()),
        )
        decisions.append(arbitration.decision)
    rejections.sort(key=lambda r: (r.claim_id or "", r.reason.value, r.to_json()))
    return ReplayResult(decisions=decisions, rejections=rejections)


def _resolutions(lines: Iterable[str], policy: Policy) -> dict[tuple[str, str], list[Resolution]]:
    found: dict[tuple[str, str], list[Resolution]] = defaultdict(list)
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            resolution = admit_resolution(Resolution.model_validate_json(line), policy)
        except ValidationError as exc:
            raise ContractError(
                RejectReason.MALFORMED, f"resolution on line {number}: {exc}"
            ) from exc
        found[(resolution.subject, resolution.field)].append(resolution)
    return found
