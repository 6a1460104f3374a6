"""When claims say the same thing, and how many independent observations they are.

The comparisons the rules (`engine.py`) and their shortcuts (`shortcuts/`) share:
agreement by the field's tolerance, grouping into statements in an order that does not depend on
arrival, and the count of independent observers. Values arrive here normalized (`normalize.py`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from operator import attrgetter
from typing import Final

from streams.core.admission.intake import AdmittedClaim
from streams.core.admission.normalize import values_agree

RECENCY: Final = attrgetter("recency")
"""Sort key: oldest first, then by claim_id, so that the order does not depend on arrival."""
_STATEMENT: Final = attrgetter("statement")


def distinct(claims: Iterable[AdmittedClaim]) -> tuple[list[AdmittedClaim], frozenset[str]]:
    """The claims once each (oldest first), and the ids used for claims that say different
    things: no version of those counts as evidence, whichever arrived first."""
    claims = claims if isinstance(claims, list) else list(claims)
    if _all_differ(claims, _ID):
        return by_recency(claims), _NONE_DISPUTED
    by_id: dict[str, AdmittedClaim] = {}
    disputed: set[str] = set()
    for admitted in claims:
        claim_id = admitted.claim_id
        seen = by_id.get(claim_id)
        if seen is None:
            by_id[claim_id] = admitted
        elif seen is not admitted and not seen.same_content(admitted):
            disputed.add(claim_id)
    kept = [a for claim_id, a in by_id.items() if claim_id not in disputed]
    return by_recency(kept), frozenset(disputed)


_NONE_DISPUTED: Final[frozenset[str]] = frozenset()
"""What `distinct` finds disputed where every id is used once: one empty set, not a new one
per arbitration."""


_SHORT: Final = 16
"""Up to this many claims (a key's usual count) are sorted by insertion, compared attribute by
attribute in compiled code: `sorted` with a key calls the key getter once per claim (which boxes
the attribute's tuple) and its keyword argument is parsed per call, which for a handful of
claims costs more than the sort. Likewise they are checked for repeats pair by pair, not through
a set."""

_ID: Final = 0
_LINEAGE: Final = 1


def _all_differ(claims: list[AdmittedClaim], part: int) -> bool:
    """Whether no two claims share a claim_id (`part` `_ID`) or a lineage (`_LINEAGE`)."""
    count = len(claims)
    if count > _SHORT:
        seen = {a.claim_id if part == _ID else a.lineage for a in claims}
        return len(seen) == count
    for i in range(1, count):
        mine = claims[i].claim_id if part == _ID else claims[i].lineage
        for j in range(i):
            if (claims[j].claim_id if part == _ID else claims[j].lineage) == mine:
                return False
    return True


def by_recency(claims: list[AdmittedClaim]) -> list[AdmittedClaim]:
    """`sorted(claims, key=RECENCY)`: oldest first, then by claim_id (stable, as `sorted`)."""
    return _sorted(claims, _BY_RECENCY)


def by_statement(claims: list[AdmittedClaim]) -> list[AdmittedClaim]:
    """`sorted(claims, key=_STATEMENT)`: by status and value in `statement_order`, then by
    claim_id (stable, as `sorted`)."""
    return _sorted(claims, _BY_STATEMENT)


_BY_RECENCY: Final = 0
_BY_STATEMENT: Final = 1


def _sorted(claims: list[AdmittedClaim], order: int) -> list[AdmittedClaim]:
    """`claims` by recency (`order` `_BY_RECENCY`) or by statement (`_BY_STATEMENT`): a short
    list by insertion, its comparisons chosen by a flag (a comparison passed as a function
    would be called as a Python object), a long one by `sorted`."""
    if len(claims) > _SHORT:
        return sorted(claims, key=RECENCY if order == _BY_RECENCY else _STATEMENT)
    ordered = list(claims)
    for i in range(1, len(ordered)):
        admitted = ordered[i]
        j = i
        while j > 0 and (
            _earlier(admitted, ordered[j - 1])
            if order == _BY_RECENCY
            else _said_before(admitted, ordered[j - 1])
        ):
            ordered[j] = ordered[j - 1]
            j -= 1
        ordered[j] = admitted
    return ordered


def newest_claim(claims: list[AdmittedClaim]) -> AdmittedClaim:
    """`max(claims, key=RECENCY)`: the latest observation, ties broken by claim_id (the first of
    equals, as `max`)."""
    latest = claims[0]
    for i in range(1, len(claims)):
        admitted = claims[i]
        if _earlier(latest, admitted):
            latest = admitted
    return latest


def _earlier(a: AdmittedClaim, b: AdmittedClaim) -> bool:
    """`a.recency < b.recency`, by its parts: the instants as integers, then the claim ids (the
    tuples themselves would be boxed to be compared)."""
    a_us, b_us = a.observed_us, b.observed_us
    return a_us < b_us or (a_us == b_us and a.claim_id < b.claim_id)


def _said_before(a: AdmittedClaim, b: AdmittedClaim) -> bool:
    """`a.statement < b.statement`, part by part (as `_earlier`). A part that is equal by `==`
    passes on to the next, as in a tuple's comparison; a number's part is never NaN (normalize
    refuses it), so `==` and `<` order the floats as the tuples would."""
    mine, theirs = a.statement, b.statement
    said, other = mine[0], theirs[0]
    if said[0] != other[0]:
        return said[0] < other[0]
    if said[1] != other[1]:
        return said[1] < other[1]
    if said[2] != other[2]:
        return said[2] < other[2]
    if said[3] != other[3]:
        return said[3] < other[3]
    return mine[1] < theirs[1]


def agrees(a: AdmittedClaim, b: AdmittedClaim, tolerance: float) -> bool:
    return a.status == b.status and values_agree(a.value, b.value, tolerance)


def clusters(claims: list[AdmittedClaim], tolerance: float) -> list[list[AdmittedClaim]]:
    """Group claims by status and value; floats within `tolerance` of a group's smallest member
    join it. Sorting first makes the grouping independent of arrival order."""
    groups: list[list[AdmittedClaim]] = []
    for admitted in by_statement(claims):
        if groups and agrees(groups[-1][0], admitted, tolerance):
            groups[-1].append(admitted)
        else:
            groups.append([admitted])
    return groups


def newest_in_lineages(
    claims: list[AdmittedClaim], tolerance: float
) -> tuple[list[AdmittedClaim], list[AdmittedClaim]] | None:
    """Within one lineage a newer observation replaces an older one that says otherwise: the
    claims kept and the ones superseded, or None where each claim is a lineage of its own."""
    if _all_differ(claims, _LINEAGE):
        return None
    lineages: dict[str, list[AdmittedClaim]] = {}
    for admitted in claims:
        lineages.setdefault(admitted.lineage, []).append(admitted)
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


def independent(claims: list[AdmittedClaim]) -> int:
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
    current: list[AdmittedClaim], before: list[AdmittedClaim], tolerance: float
) -> bool:
    """Whether two groups of claims say the same things, by the field's own equality."""
    mine, theirs = clusters(current, tolerance), clusters(before, tolerance)
    return len(mine) == len(theirs) and all(
        agrees(a[0], b[0], tolerance) for a, b in zip(mine, theirs, strict=True)
    )
