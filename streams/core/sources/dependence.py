"""What the settled outcomes say about the sources: accuracy, shared lineage, authority to review.

Where it sits: read-only, over a `settlement.Ledger` (a task's, or the cluster's merged), for the
console's `GET /api/sources` and `claimstream policy suggest`. Three readings, each exact and
deterministic for the same ledger:

- per source and field: how often its claims matched the settled value;
- candidate shared lineages: two sources that made the same statement far more often than two
  independent sources of their accuracy would (a one-sided binomial test), with at least
  `MIN_SHARED_ERRORS` settlements where both said the same wrong thing, the copying signal of
  Dong, Berti-Equille and Srivastava ("Integrating conflicting data: the role of source
  dependence", VLDB 2009);
- authorities to review: a weaker source that matched the settled value significantly more often
  than a stronger one when the two disagreed (a sign test).

Nothing here changes a decision: a finding is a suggestion for a person's policy change.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from math import comb
from typing import Any

from streams.core.records.contracts import Authority
from streams.core.sources.settlement import (
    KEPT_DISAGREEMENTS,
    Counts,
    Ledger,
    PairCounts,
    PairKey,
    RowKey,
)

ALPHA = 0.001
"""The largest chance that independence (or equal accuracy) explains a finding."""
MIN_TOGETHER = 5
MIN_SHARED_ERRORS = 2
MIN_DISCORDANT = 3
WRONG_COINCIDENCE = 0.5
"""The assumed chance that two independent sources, both wrong, are wrong the same way: an
upper bound for most fields (an enum of three or more values, any free value)."""
KEPT_PAIRS = 200
"""Pairs a report lists, most settled together first; findings are over every pair."""


def binomial_tail(successes: int, trials: int, p: float) -> float:
    """P(X >= successes) for X ~ Binomial(trials, p), summed exactly."""
    if successes <= 0:
        return 1.0
    if p >= 1.0:
        return 1.0
    return min(
        1.0,
        sum(comb(trials, k) * p**k * (1 - p) ** (trials - k) for k in range(successes, trials + 1)),
    )


@dataclass(frozen=True, slots=True)
class Totals:
    rows: dict[RowKey, Counts]
    pairs: dict[PairKey, PairCounts]
    untracked: int


def totals(ledger: Ledger) -> Totals:
    rows: dict[RowKey, Counts] = {}
    pairs: dict[PairKey, PairCounts] = {}
    untracked = 0
    for day in ledger.days.values():
        for row_key, counts in day.rows.items():
            row = rows.setdefault(row_key, Counts())
            row.settled += counts.settled
            row.agreed += counts.agreed
        for pair_key, pair in day.pairs.items():
            total = pairs.setdefault(pair_key, PairCounts())
            total.together += pair.together
            total.same += pair.same
            total.first_agreed += pair.first_agreed
            total.second_agreed += pair.second_agreed
            total.both_agreed += pair.both_agreed
            total.same_wrong += pair.same_wrong
        untracked += day.untracked
    return Totals(rows, pairs, untracked)


def report(
    ledger: Ledger,
    authorities: Mapping[tuple[str, str], Authority],
    lineages: Mapping[str, str],
) -> dict[str, Any]:
    """The JSON of `GET /api/sources`. `authorities`: (field, source) -> the policy's authority;
    `lineages`: source -> its declared lineage (pairs already sharing one are not suggested)."""
    found = totals(ledger)
    return {
        "rows": _rows(ledger, found, authorities),
        "pairs": [
            _pair_json(key, pair)
            for key, pair in sorted(found.pairs.items(), key=lambda kv: (-kv[1].together, kv[0]))[
                :KEPT_PAIRS
            ]
        ],
        "lineages": _lineages(ledger, found, lineages),
        "authority_reviews": _reviews(ledger, found, authorities),
        "untracked": found.untracked,
    }


def _rows(
    ledger: Ledger, found: Totals, authorities: Mapping[tuple[str, str], Authority]
) -> list[dict[str, Any]]:
    """A row per source and field (its replicas summed, and listed)."""
    grouped: dict[tuple[str, str], list[RowKey]] = {}
    for row_key in sorted(found.rows):
        source, _, field = row_key
        grouped.setdefault((source, field), []).append(row_key)
    rows = []
    for (source, field), keys in grouped.items():
        settled = sum(found.rows[k].settled for k in keys)
        agreed = sum(found.rows[k].agreed for k in keys)
        disagreements = {d for k in keys for d in ledger.disagreements.get(k, ())}
        latest = sorted(disagreements, reverse=True)[:KEPT_DISAGREEMENTS]
        authority = authorities.get((field, source))
        rows.append(
            {
                "source": source,
                "field": field,
                "authority": authority.value if authority else None,
                "settled": settled,
                "agreed": agreed,
                "disagreed": settled - agreed,
                "share": round(agreed / settled, 6) if settled else None,
                "last_settled": max((ledger.last_settled.get(k, "") for k in keys), default="")
                or None,
                "latest_disagreements": [
                    {"key": d.key, "decision_id": d.decision_id, "settled_at": d.settled_at}
                    for d in latest
                ],
                "replicas": [
                    {
                        "replica": k[1],
                        "settled": found.rows[k].settled,
                        "agreed": found.rows[k].agreed,
                        "disagreed": found.rows[k].disagreed,
                    }
                    for k in keys
                    if k[1]
                ],
            }
        )
    return rows


def _pair_json(key: PairKey, pair: PairCounts) -> dict[str, Any]:
    field, first, second = key
    return {
        "field": field,
        "first": first,
        "second": second,
        "together": pair.together,
        "same": pair.same,
        "first_agreed": pair.first_agreed,
        "second_agreed": pair.second_agreed,
        "both_agreed": pair.both_agreed,
        "same_wrong": pair.same_wrong,
    }


def _source(participant: str) -> str:
    return participant.split("/", 1)[0]


def _shared_keys(ledger: Ledger, field: str, first: str, second: str) -> list[str]:
    """Keys both got wrong, among each one's latest disagreements: examples for a person."""

    def keys(participant: str) -> set[str]:
        source, _, replica = participant.partition("/")
        return {d.key for d in ledger.disagreements.get((source, replica, field), ())}

    return sorted(keys(first) & keys(second))


def _lineages(ledger: Ledger, found: Totals, lineages: Mapping[str, str]) -> list[dict[str, Any]]:
    findings = []
    for key, pair in sorted(found.pairs.items()):
        field, first, second = key
        declared = lineages.get(_source(first))
        if declared is not None and declared == lineages.get(_source(second)):
            continue
        n = pair.together
        if n < MIN_TOGETHER or pair.same_wrong < MIN_SHARED_ERRORS:
            continue
        p_first, p_second = pair.first_agreed / n, pair.second_agreed / n
        expected = p_first * p_second + (1 - p_first) * (1 - p_second) * WRONG_COINCIDENCE
        p_value = binomial_tail(pair.same, n, expected)
        if p_value > ALPHA:
            continue
        findings.append(
            {
                **_pair_json(key, pair),
                "expected_same": round(expected * n, 3),
                "p_value": float(f"{p_value:.3g}"),
                "example_keys": _shared_keys(ledger, field, first, second),
            }
        )
    return findings


def _reviews(
    ledger: Ledger, found: Totals, authorities: Mapping[tuple[str, str], Authority]
) -> list[dict[str, Any]]:
    findings = []
    for key, pair in sorted(found.pairs.items()):
        field, first, second = key
        a, b = authorities.get((field, _source(first))), authorities.get((field, _source(second)))
        if a is None or b is None or a.rank == b.rank:
            continue
        weaker, stronger = (first, second) if a.rank > b.rank else (second, first)
        weaker_only = pair.first_agreed - pair.both_agreed
        stronger_only = pair.second_agreed - pair.both_agreed
        if weaker == second:
            weaker_only, stronger_only = stronger_only, weaker_only
        discordant = weaker_only + stronger_only
        if weaker_only < MIN_DISCORDANT or weaker_only <= stronger_only:
            continue
        p_value = binomial_tail(weaker_only, discordant, 0.5)
        if p_value > ALPHA:
            continue
        weaker_authority = authorities[(field, _source(weaker))]
        stronger_authority = authorities[(field, _source(stronger))]
        findings.append(
            {
                "field": field,
                "weaker": weaker,
                "weaker_authority": weaker_authority.value,
                "stronger": stronger,
                "stronger_authority": stronger_authority.value,
                "together": pair.together,
                "weaker_only_agreed": weaker_only,
                "stronger_only_agreed": stronger_only,
                "p_value": float(f"{p_value:.3g}"),
                "example_keys": sorted(
                    {
                        d.key
                        for d in ledger.disagreements.get(
                            (_source(stronger), stronger.partition("/")[2], field), ()
                        )
                    }
                ),
            }
        )
    return findings
