"""The export's buckets (buckets.py): every spelling an alias ever linked falls into one family
(through chains, and still after a retraction), matched as aliases match spellings, and
unrelated subjects stay apart; the bucket count follows from the cut's size; a spill gives each
bucket's records back in the order written, then forgets the file."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from streams.audit.buckets import (
    RECORDS_PER_BUCKET,
    Families,
    Spill,
    Spilled,
    bucket_count,
)
from streams.core.timeline.aliases import AliasChange, AliasHistory, alias_key

T0 = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)


def _at(hours: int) -> datetime:
    return T0 + timedelta(hours=hours)


def test_a_chain_of_aliases_is_one_family() -> None:
    history = AliasHistory(
        [
            AliasChange("ACME-2231", "Acme Corp", _at(0)),
            AliasChange("Acme Corp", "acme", _at(1)),
        ]
    )
    families = Families(history)
    assert {families.of(s) for s in ("ACME-2231", "Acme Corp", "acme")} == {"acme"}
    assert families.of("initech") == "initech"
    assert families.of("globex") != families.of("acme")


def test_a_retracted_alias_still_links_its_spellings() -> None:
    """Evidence moved while the alias held: the spellings still need each other's records."""
    history = AliasHistory(
        [
            AliasChange("Acme Corp", "acme", _at(0)),
            AliasChange("Acme Corp", None, _at(1)),
        ]
    )
    assert history.canonical("Acme Corp", _at(2)) == "Acme Corp"
    families = Families(history)
    assert families.of("Acme Corp") == families.of("acme") == "acme"


def test_a_spelling_moved_from_one_subject_to_another_links_all_three() -> None:
    history = AliasHistory(
        [
            AliasChange("ACME", "acme-old", _at(0)),
            AliasChange("ACME", "acme-new", _at(1)),
        ]
    )
    families = Families(history)
    assert families.of("acme-old") == families.of("acme-new") == families.of("ACME")


def test_spellings_match_regardless_of_case_and_spaces() -> None:
    families = Families(AliasHistory([AliasChange("Acme  Corp", "ACME", _at(0))]))
    assert alias_key("  ACME   corp ") == "acme corp"
    for spelling in ("acme corp", "ACME CORP", "  acme   Corp ", "Acme", "acme"):
        assert families.of(spelling) == "acme", spelling
    assert families.of("Initech") == "initech"  # matched as aliases match it, linked to none


def test_without_aliases_every_subject_is_its_own_family() -> None:
    families = Families(AliasHistory())
    assert families.of("Acme Corp") == "Acme Corp"
    assert families.of("acme") == "acme"


def test_unrelated_links_make_separate_families() -> None:
    history = AliasHistory(
        [
            AliasChange("a1", "a", _at(0)),
            AliasChange("b1", "b", _at(0)),
            AliasChange("b2", "b1", _at(1)),
        ]
    )
    families = Families(history)
    assert {families.of(s) for s in ("a", "a1")} == {"a"}
    assert {families.of(s) for s in ("b", "b1", "b2")} == {"b"}


_SPELLINGS = st.text(alphabet="abcAB ", min_size=1, max_size=6).filter(lambda s: s.strip() != "")


@settings(max_examples=150, deadline=None)
@given(
    linked=st.lists(_SPELLINGS, min_size=2, max_size=8, unique_by=alias_key),
    others=st.lists(_SPELLINGS.map(lambda s: "x" + s), max_size=4, unique_by=alias_key),
    order=st.randoms(use_true_random=False),
    retract=st.booleans(),
)
def test_every_spelling_of_a_linked_set_is_in_one_family(
    linked: list[str], others: list[str], order: random.Random, retract: bool
) -> None:
    """Each spelling is linked to a random earlier one (a tree of aliases, so no cycle), in a
    random order of instants; other subjects are linked among themselves only."""
    changes = []
    for n, spelling in enumerate(linked[1:], start=1):
        changes.append((spelling, linked[order.randrange(n)]))
    order.shuffle(changes)
    history = AliasHistory(
        [AliasChange(a, c, _at(h)) for h, (a, c) in enumerate(changes)]
        + ([AliasChange(changes[0][0], None, _at(len(changes)))] if retract else [])
    )
    families = Families(history)
    names = {families.of(s) for s in linked}
    assert len(names) == 1
    assert names <= {alias_key(s) for s in linked}  # the family is one of its spellings
    assert all(families.of(other) not in names for other in others)


def test_bucket_count_follows_the_cuts_size() -> None:
    assert bucket_count(0) == 1
    assert bucket_count(1) == 1
    assert bucket_count(RECORDS_PER_BUCKET) == 1
    assert bucket_count(RECORDS_PER_BUCKET + 1) == 2
    assert bucket_count(10 * RECORDS_PER_BUCKET) == 10


def test_a_spill_gives_each_buckets_records_back_in_the_order_written(tmp_path: Path) -> None:
    spill = Spill(tmp_path / "spill", 3)
    assert [p.name for p in spill.paths] == [
        "bucket-00000.bin",
        "bucket-00001.bin",
        "bucket-00002.bin",
    ]
    written: list[tuple[str, Spilled]] = []
    for seq in range(60):
        family = f"family-{seq % 7}"
        record = Spilled(1_780_000_000_000_000 + seq * 7, seq, seq % 3, b"\x00v" * (seq % 5))
        spill.add(family, record)
        written.append((family, record))
    spill.add("family-0", Spilled(-5, 60, 2, b""))  # before the epoch, no value
    written.append(("family-0", Spilled(-5, 60, 2, b"")))
    spill.close()

    read = [list(spill.bucket(n)) for n in range(3)]

    def place(record: Spilled) -> int:
        return record.seq

    assert sorted((r for bucket in read for r in bucket), key=place) == [r for _, r in written]
    assert sum(1 for bucket in read if bucket) >= 2  # the families do spread over buckets
    for bucket in read:
        assert [r.seq for r in bucket] == sorted(r.seq for r in bucket)  # order written
    where = {r.seq: n for n, bucket in enumerate(read) for r in bucket}
    for family in {f for f, _ in written}:  # a family is never split between buckets
        assert len({where[r.seq] for f, r in written if f == family}) == 1
    assert not any(p.exists() for p in spill.paths)  # each file removed once read


def test_a_bucket_with_nothing_spilled_reads_empty(tmp_path: Path) -> None:
    spill = Spill(tmp_path, 2)
    spill.add("acme", Spilled(1, 0, 0, b"x"))
    spill.close()
    assert sum(len(list(spill.bucket(n))) for n in range(2)) == 1
    assert list(tmp_path.iterdir()) == []
