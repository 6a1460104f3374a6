"""Candidate policy edits, read from what settled conflicts say about the sources.

Where it sits: after `dependence.report` (the JSON of `GET /api/sources`), before a person:
`claimstream policy suggest` prints these. Each suggestion names one edit of the policy file and
the evidence for it (counts, example keys); none is ever applied here: authority and lineage stay
the operator's, and `claimstream policy diff` shows what an edit would flip. The same report
gives the same lines, in the same order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MAX_EXAMPLES = 3


@dataclass(frozen=True, slots=True)
class Suggestion:
    kind: str  # "lineage" or "authority"
    field: str
    title: str
    evidence: str
    examples: tuple[str, ...]
    edits: tuple[str, ...]  # policy file paths and their proposed values


def suggest(report: dict[str, Any]) -> list[Suggestion]:
    """The report's findings as policy edits: shared lineages first, then authorities."""
    found = [_lineage(finding) for finding in report.get("lineages", [])]
    found += [_authority(finding) for finding in report.get("authority_reviews", [])]
    return sorted(found, key=lambda s: (s.kind != "lineage", s.field, s.title))


def _source(participant: str) -> str:
    return participant.split("/", 1)[0]


def _lineage(finding: dict[str, Any]) -> Suggestion:
    first, second = _source(finding["first"]), _source(finding["second"])
    shared = min(first, second)
    return Suggestion(
        kind="lineage",
        field=finding["field"],
        title=f"{first} and {second} may share one upstream on {finding['field']}",
        evidence=(
            f"settled together {finding['together']} times: the same statement "
            f"{finding['same']} times where independent sources of their accuracy would make it "
            f"at most {finding['expected_same']:g} times; both wrong the same way "
            f"{finding['same_wrong']} times (p={finding['p_value']:g})"
        ),
        examples=tuple(finding["example_keys"][:MAX_EXAMPLES]),
        edits=(f"sources.{first}.lineage: {shared}", f"sources.{second}.lineage: {shared}"),
    )


def _authority(finding: dict[str, Any]) -> Suggestion:
    field, weaker = finding["field"], _source(finding["weaker"])
    return Suggestion(
        kind="authority",
        field=field,
        title=(
            f"{weaker} ({finding['weaker_authority']}) was right more often than "
            f"{_source(finding['stronger'])} ({finding['stronger_authority']}) on {field}"
        ),
        evidence=(
            f"settled together {finding['together']} times; where they differed, {weaker} "
            f"matched the settled value {finding['weaker_only_agreed']} times and "
            f"{_source(finding['stronger'])} {finding['stronger_only_agreed']} times "
            f"(p={finding['p_value']:g})"
        ),
        examples=tuple(finding["example_keys"][:MAX_EXAMPLES]),
        edits=(f"fields.{field}.authorities.{weaker}: {finding['stronger_authority']}",),
    )


def render(suggestions: list[Suggestion]) -> list[str]:
    lines = []
    for n, found in enumerate(suggestions, 1):
        lines.append(f"{n}. [{found.kind}] {found.title}")
        lines.append(f"   evidence: {found.evidence}")
        if found.examples:
            lines.append(f"   examples: {', '.join(found.examples)}")
        lines += [f"   edit: {edit}" for edit in found.edits]
    return lines
