"""The rollout sweep: every owned key moved to the policy in force and grouped by the aliases
in force, quiet ones included.

A key moves to a newer policy when anything next applies to it (`core.rollout.catch_up`, before
a claim, a resolution or a tick); a quiet key would wait for its next claim. So when the policy
in force is not the one its keys were last decided under, the sweep walks each open task's keys
and sends a tick to each key still on another policy: its owner moves it, at the instant the
policy took effect, through the same path as any record (its decision, state and offsets commit
together, under either guarantee). An alias taking effect or retracted walks them too, for the
keys whose evidence it moves (`AliasHistory.regroupings`), not yet regrouped at its instant:
the tick regroups them, the evidence it moves goes out with the key's decision. An erasure
taking effect walks them too, for the keys of the subjects it erases: the tick drops them, each
sending its `erased` decision (`KeyClock.erased_by`). The sweep only
looks; the key's state is the truth:

- a key whose tick is lost (a crash, a rebalance) is found again: a task's walk starts over
  whenever it is installed, and a walk that found keys to move is followed by another, until a
  walk finds none;
- a key moved twice is moved once: a tick finding the key on the policy in force is a late
  tick, and does nothing.

It shares the loop with live input: the ticks a turn sends are its own share of the loop's time
(`pacing`: a tenth while input arrives, half when none does, priced at what a tick costs), and
a turn reads at most `SCAN_PER_TURN` keys' policy versions.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime

from streams.core.keys.state import split_key
from streams.core.records.instants import instant, micros
from streams.core.records.policy import Policy
from streams.core.timeline.aliases import AliasHistory
from streams.core.timeline.erasures import ErasureHistory
from streams.state.task import TaskStore

log = logging.getLogger(__name__)

SCAN_PER_TURN = 2000
"""Keys whose policy version one turn reads at most (a memory read each, a small decode on
disk): about a millisecond, so a walk of a million keys costs no turn more than that."""
PASS_PAUSE_S = 2.0
"""Between a pass that sent ticks and the next: time for the ticks to be applied, so that the
next pass finds only keys whose move was lost."""


@dataclass
class _Walk:
    """One pass over a task's keys."""

    keys: Iterator[bytes]
    left: int
    """Keys not yet looked at (an estimate on disk)."""
    found: int = 0
    """Keys this pass sent a tick to."""
    regroups: int = 0
    """Keys this pass found to regroup by an alias change."""
    passes: int = 1
    not_before: float = 0.0
    """The monotonic instant this pass may start."""
    pending: list[bytes] = field(default_factory=list)
    """Keys found to move, their ticks not yet sent (the budget ran out)."""


class RolloutSweep:
    """Walks the open tasks' keys while any is on a policy other than the one in force."""

    def __init__(self) -> None:
        self._stores: dict[int, TaskStore] = {}
        self._walks: dict[int, _Walk] = {}
        self._version: str | None = None  # the policy the walks move keys to
        self._aliases_at: datetime | None = None  # the alias change the walks regroup keys at
        self._erased_at: datetime | None = None  # the last erasure the walks drop keys for

    def attach(self, partition: int, store: TaskStore) -> None:
        """A task installed: its keys are walked (again) from the first."""
        self._stores[partition] = store
        self._walks[partition] = _Walk(iter(store), len(store))

    def detach(self, partition: int) -> None:
        self._stores.pop(partition, None)
        self._walks.pop(partition, None)

    @property
    def remaining(self) -> int:
        """Keys the sweep has yet to look at, or found and not yet sent a tick."""
        return sum(walk.left + len(walk.pending) for walk in self._walks.values())

    @property
    def regroups_pending(self) -> int:
        """Keys the walks under way found to regroup by an alias change."""
        return sum(walk.regroups for walk in self._walks.values())

    def take(
        self,
        policy: Policy,
        aliases: AliasHistory,
        now: datetime,
        budget: int,
        erasures: ErasureHistory | None = None,
    ) -> list[bytes]:
        """Up to `budget` keys to tick, where `policy` (the one in force) decides their field:
        found on another policy, holding evidence an alias change by `now` moves, or of a
        subject erased by `now`. A new version in force, a new alias change or a new erasure
        walks every task again."""
        version, regrouped_at = policy.version, aliases.last_by(now)
        erased_at = erasures.last_by(now) if erasures else None
        if erased_at != self._erased_at:
            self._erased_at = erased_at
            self._version = None  # walk again, below
        if version != self._version or regrouped_at != self._aliases_at:
            if self._version is not None:
                log.info(
                    "policy %s, aliases of %s in force: moving every owned key",
                    version,
                    regrouped_at.isoformat() if regrouped_at else "none",
                )
            self._version, self._aliases_at = version, regrouped_at
            for partition, store in self._stores.items():
                self.attach(partition, store)
        regrouped_us = None if regrouped_at is None else micros(regrouped_at)
        taken: list[bytes] = []
        clock = time.monotonic()
        for partition, walk in list(self._walks.items()):
            if clock < walk.not_before:
                continue
            store, scanned, ended = self._stores[partition], 0, False
            while len(walk.pending) < budget - len(taken) and scanned < SCAN_PER_TURN:
                key = next(walk.keys, None)
                if key is None:
                    ended = True
                    break
                scanned += 1
                walk.left = max(0, walk.left - 1)
                if erased_at is not None and erasures and _erased(store, key, erasures, now):
                    walk.pending.append(key)
                    continue
                policy_version, aliases_us = store.marks_of(key)
                if policy_version == version and (
                    regrouped_us is None or (aliases_us is not None and aliases_us >= regrouped_us)
                ):
                    continue
                subject, field_name = split_key(key.decode())
                if not policy.rules_for(field_name):
                    continue
                if policy_version != version:
                    walk.pending.append(key)
                elif aliases.regroupings(
                    subject, None if aliases_us is None else instant(aliases_us), now
                ):
                    walk.pending.append(key)
                    walk.regroups += 1
            given = walk.pending[: budget - len(taken)]
            del walk.pending[: len(given)]
            walk.found += len(given)
            taken += given
            if ended and not walk.pending:
                self._walked(partition, walk, store)
        return taken

    def _walked(self, partition: int, walk: _Walk, store: TaskStore) -> None:
        """A pass ended: another if it sent ticks (to find any whose move was lost), else done."""
        if walk.found:
            log.info(
                "policy sweep: task %d pass %d sent %d keys to policy %s; checking again",
                partition,
                walk.passes,
                walk.found,
                self._version,
            )
            self._walks[partition] = _Walk(
                iter(store),
                len(store),
                passes=walk.passes + 1,
                not_before=time.monotonic() + PASS_PAUSE_S,
            )
        else:
            log.info("policy sweep: task %d is on policy %s", partition, self._version)
            del self._walks[partition]


def _erased(store: TaskStore, key: bytes, erasures: ErasureHistory, now: datetime) -> bool:
    """Whether an erasure in effect by `now` drops the key (its state read only for the keys of
    an erased subject)."""
    if not erasures.of(split_key(key.decode())[0]):
        return False
    state = store.get(key)
    return state is not None and erasures.dropping(state, now) is not None
