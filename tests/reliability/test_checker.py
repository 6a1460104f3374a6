"""The checker's own measures, on histories whose answer is known."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from streams.pipeline.outputs import ERROR_HEADER_PREFIX
from tests.reliability.checker import (
    generations,
    max_pause_by_partition,
    max_pause_s,
    repeated_dead_letters,
)


def test_a_pause_runs_from_the_first_waiting_claim_to_the_next_decision() -> None:
    claims = [0, 100, 5_000, 5_100, 9_000]
    decisions = [50, 150, 8_000, 9_050]
    # 5_000 waited until 8_000; the other claims were decided within 50 ms.
    assert max_pause_s(claims, decisions) == 3.0


def test_quiet_without_input_is_no_pause() -> None:
    assert max_pause_s([0, 20_000], [10, 20_010]) == 0.01


@given(st.lists(st.integers(0, 10**6), max_size=50), st.lists(st.integers(0, 10**6), max_size=50))
def test_no_pause_exceeds_the_span_of_the_run(claims: list[int], decisions: list[int]) -> None:
    pause = max_pause_s(claims, decisions)
    everything = claims + decisions
    assert 0 <= pause <= (max(everything) - min(everything)) / 1000 if everything else pause == 0


def test_a_partition_paused_while_the_others_went_on_still_counts() -> None:
    claims = [(0, t) for t in range(0, 10_000, 100)] + [(1, t) for t in range(0, 10_000, 100)]
    decisions = [(0, t + 10) for t in range(0, 10_000, 100)]
    decisions += [(1, t + 10) for t in range(0, 10_000, 100) if not 2_000 <= t < 6_000]
    # Partition 1's claim at 2 000 ms waited until the decision at 6 010 ms.
    assert max_pause_by_partition(claims, decisions) == 4.01
    assert max_pause_s([t for _, t in claims], [t for _, t in decisions]) == 0.01


def test_generations_count_each_stabilized_generation_of_the_group_once(tmp_path: Path) -> None:
    line = (
        "[2026-11-30 15:59:{s}] INFO [GroupCoordinator {node}]: Stabilized group {group} "
        "generation {n} (__consumer_offsets-2) with 2 members (kafka.coordinator.group)\n"
    )
    first, second = tmp_path / "node-1.log", tmp_path / "node-2.log"
    first.write_text(
        line.format(s=1, node=1, group="app-arbiter", n=1)
        + line.format(s=2, node=1, group="app", n=1)
        + line.format(s=3, node=1, group="app-arbiter", n=2)
    )
    # The coordinator moved with its partition's leader, and the new one logs on from there.
    second.write_text(
        line.format(s=4, node=2, group="app-arbiter", n=2)
        + line.format(s=5, node=2, group="app-arbiter", n=3)
    )
    assert generations("app-arbiter", [first, second]) == 3
    assert generations("app", [first, second]) == 1


@dataclass
class Letter:
    headers: list[tuple[str, bytes]]


def _letter(topic: str, partition: int, offset: int, reason: str = "invalid_value") -> Letter:
    where = {"topic": topic, "partition": str(partition), "offset": str(offset), "reason": reason}
    return Letter([(ERROR_HEADER_PREFIX + name, value.encode()) for name, value in where.items()])


def test_a_dead_letter_repeats_when_its_input_record_was_dead_lettered_before() -> None:
    letters = [
        _letter("claims", 0, 7),
        _letter("claims", 1, 7),  # another partition's record at the same offset
        _letter("claims.rekeyed", 0, 7),  # another topic's
        _letter("claims", 0, 7),  # redelivered and rejected again
        Letter([(ERROR_HEADER_PREFIX + "reason", b"invalid_value")]),  # names no record
        Letter([(ERROR_HEADER_PREFIX + "reason", b"invalid_value")]),
    ]
    assert repeated_dead_letters(letters) == 1
    assert repeated_dead_letters(letters[:3]) == 0
