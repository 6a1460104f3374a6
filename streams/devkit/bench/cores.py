"""The bench's processes on the machine's cores: the CPU time each spent, and (when asked) which
cores each may run on.

The latency phase runs three processes side by side, the worker under test, the broker and this
bench process (the load generator and the decisions' reader); on a small machine they compete
for the same cores, and what the worker waits for a core is in every latency it measures. Read
from /proc and set with `os.sched_setaffinity` (Linux).
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping
from pathlib import Path

Pinning = Mapping[str, frozenset[int]]  # a process's role -> the cores it may run on


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of process `pid` so far (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pin(pid: int, cores: Collection[int]) -> None:
    """Let every thread of process `pid` run only on `cores` (threads it starts later inherit
    their creator's set): the JVM's and aiokafka's threads exist before the phase."""
    for thread in Path(f"/proc/{pid}/task").iterdir():
        try:
            os.sched_setaffinity(int(thread.name), cores)
        except ProcessLookupError:
            continue  # the thread ended meanwhile


def split_cores(cores: Collection[int]) -> tuple[frozenset[int], frozenset[int]]:
    """The worker's core and the others' (the broker and the load): the lowest core for the
    worker, the rest for the others. Needs at least two."""
    ordered = sorted(cores)
    if len(ordered) < 2:
        raise ValueError(f"pinning needs at least 2 cores, this process may use {ordered}")
    return frozenset(ordered[:1]), frozenset(ordered[1:])
