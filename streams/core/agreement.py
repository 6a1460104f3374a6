"""When claims say the same thing, and how many independent observations they are.

The comparisons the rules (`engine.py`) and their incremental shortcut (`incremental.py`) share:
agreement by the field's tolerance, grouping into statements in an order that does not depend on
arrival, and the count of independent observers. Values arrive here normalized (`normalize.py`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from operator import attrgetter

from streams.core.intake import AdmittedClaim
from streams.core.normalize import values_agree

RECENCY = attrgetter("recency")
"""Sort key: oldest first, then by claim_id, so that the order does not depend on arrival."""
_STATEMENT = attrgetter("statement")


def distinct(claims: Iterable[AdmittedClaim]) -> tuple[list[AdmittedClaim], set[str]]:
    """The claims once each (oldest first), and the ids used for claims that say different
    things: no version of those counts as evidence, whichever arrived first."""
    claims = claims if isinstance(claims, list) else list(claims)
    if len({a.claim.claim_id for a in claims}) == len(claims):
        return sorted(claims, key=RECENCY), set()
    by_id: dict[str, AdmittedClaim] = {}
    disputed: set[str] = set()
    for admitted in claims:
        claim_id = admitted.claim.claim_id
        seen = by_id.get(claim_id)
        if seen is None:
            by_id[claim_id] = admitted
        elif seen is not admitted and not seen.same_content(admitted):
            disputed.add(claim_id)
    kept = [a for claim_id, a in by_id.items() if claim_id not in disputed]
    kept.sort(key=RECENCY)
    return kept, disputed


def agrees(a: AdmittedClaim, b: AdmittedClaim, tolerance: float) -> bool:
    return a.claim.status == b.claim.status and values_agree(a.value, b.value, tolerance)


def clusters(claims: Sequence[AdmittedClaim], tolerance: float) -> list[list[AdmittedClaim]]:
    """Group claims by status and value; floats within `tolerance` of a group's smallest member
    join it. Sorting first makes the grouping independent of arrival order."""
    groups: list[list[AdmittedClaim]] = []
    for admitted in sorted(claims, key=_STATEMENT):
        if groups and agrees(groups[-1][0], admitted, tolerance):
            groups[-1].append(admitted)
        else:
            groups.append([admitted])
    return groups


def newest_in_lineages(
    claims: Sequence[AdmittedClaim], tolerance: float
) -> tuple[list[AdmittedClaim], list[AdmittedClaim]] | None:
    """Within one lineage a newer observation replaces an older one that says otherwise: the
    claims kept and the ones superseded, or None where each claim is a lineage of its own."""
    lineages: dict[str, list[AdmittedClaim]] = {}
    for admitted in claims:
        lineages.setdefault(admitted.lineage, []).append(admitted)
    if len(lineages) == len(claims):
        return None
    kept, superseded = [], []
    for members in lineages.values():
        if len(members) == 1:
            kept.append(members[0])
            continue
        latest = max(a.observed_us for a in members)
        newest = [a for a in members if a.observed_us == latest]
        for admitted in members:
            if admitted.observed_us == latest or any(
                agrees(admitted, n, tolerance) for n in newest
            ):
                kept.append(admitted)
            else:
                superseded.append(admitted)
    return kept, superseded


def newest_group(groups: Sequence[list[AdmittedClaim]]) -> list[AdmittedClaim] | None:
    """The one group of `clusters` holding the newest observations, None where several do:
    how a field that breaks ties by recency settles a conflict."""
    latest = max(a.observed_us for group in groups for a in group)
    holding = [g for g in groups if any(a.observed_us == latest for a in g)]
    return holding[0] if len(holding) == 1 else None


def confirmed(current: list[AdmittedClaim], tolerance: float) -> bool:
    """A change is confirmed when the new epoch's observations all agree and were made twice: at
    two instants, or by two independent observers. Assertions never confirm."""
    observed = [a for a in current if a.observes]
    if len(clusters(current, tolerance)) != 1 or len(observed) < 2:
        return False
    return len({a.observed_us for a in observed}) >= 2 or independent(observed) >= 2


def independent(claims: Sequence[AdmittedClaim]) -> int:
    """How many independent observations: claims sharing a lineage or a source are one;
    assertions and inferences count for none."""
    parent: dict[str, str] = {}

    def root(node: str) -> str:
        while parent.setdefault(node, node) != node:
            node = parent[node]
        return node

    for admitted in claims:
        if admitted.observes:
            parent[root("lineage:" + admitted.lineage)] = root("source:" + admitted.claim.source)
    return len({root(node) for node in parent if node.startswith("source:")})


def same_statements(
    current: Sequence[AdmittedClaim], before: Sequence[AdmittedClaim], tolerance: float
) -> bool:
    """Whether two groups of claims say the same things, by the field's own equality."""
    mine, theirs = clusters(current, tolerance), clusters(before, tolerance)
    return len(mine) == len(theirs) and all(
        agrees(a[0], b[0], tolerance) for a, b in zip(mine, theirs, strict=True)
    )
