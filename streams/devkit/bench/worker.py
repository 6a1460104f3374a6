"""The worker under test: a real `claimstream worker` process fed by the bench, read through
its /metrics and /proc (claims processed, CPU, memory, stage times, state keys, stall signals).
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from streams.devkit.bench.cores import cpu_seconds
from streams.ops.metrics import STAGES
from streams.ops.stalls import GENERATIONS, LOOP_LAG_BUCKETS
from streams.settings import Settings


def _metric(text: str, name: str) -> float:
    """The sum of a metric's samples (`name` may carry a full label set)."""
    prefixes = (name + " ",) if name.endswith("}") else (name + "{", name + " ")
    return sum(
        float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(prefixes)
    )


def _buckets(text: str, histogram: str) -> dict[float, float]:
    """A histogram's cumulative counts by bucket upper bound (`+Inf` included)."""
    prefix = f'{histogram}_bucket{{le="'
    counts = {}
    for line in text.splitlines():
        if line.startswith(prefix):
            bound, count = line.removeprefix(prefix).split('"}', 1)
            counts[float(bound)] = float(count)
    return counts


@dataclass(frozen=True)
class StallCounts:
    """The worker's stall signals at one scrape: what `stalls_between` two of them compares."""

    loop_lags: dict[float, float]  # bucket upper bound -> lags at most that long (cumulative)
    loop_lag_max_s: float  # the longest over the last 10 to 20 s
    gc_pause_s: float
    state_cache_misses: float
    gc_pause_s_by_generation: tuple[float, ...] = (0.0, 0.0, 0.0)


def stalls_between(before: StallCounts, after: StallCounts) -> dict[str, float]:
    """What stalled the worker between two scrapes: the longest loop lag (the upper bound of
    its histogram bucket; past the last bucket, at least the worker's recent longest), the
    collector's pauses, the keys decoded from their encoded state."""
    lags = {le: after.loop_lags[le] - before.loop_lags.get(le, 0.0) for le in after.loop_lags}
    every = lags.get(math.inf, 0.0)
    longest = min(le for le, count in lags.items() if count >= every) if every else 0.0
    if longest == math.inf:
        longest = max(LOOP_LAG_BUCKETS[-1], after.loop_lag_max_s)
    return {
        "longest_loop_lag_ms": round(longest * 1000, 1),
        "gc_pause_ms_total": round((after.gc_pause_s - before.gc_pause_s) * 1000, 1),
        "state_cache_misses": round(after.state_cache_misses - before.state_cache_misses),
    }


def gc_pauses_between(before: StallCounts, after: StallCounts) -> dict[str, list[float]]:
    """The collector's pauses between two scrapes by generation (young, middle, full), in ms."""
    pairs = zip(after.gc_pause_s_by_generation, before.gc_pause_s_by_generation, strict=True)
    return {"gc_pause_ms_by_generation": [round((a - b) * 1000, 1) for a, b in pairs]}


def stall_capture(
    before: dict[str, Any], after: dict[str, Any], worker_cpu_s: float
) -> dict[str, Any]:
    """What the worker's stall watch saw between two reports: the stalls counted, the watchdog
    thread's share of the worker's CPU, and the longest stall (`stall_summary`)."""
    longest = after.get("longest") or [{}]
    watch_cpu_s = after.get("watchdog_cpu_s", 0.0) - before.get("watchdog_cpu_s", 0.0)
    return {
        "stalls_over_threshold": after.get("stalls", 0) - before.get("stalls", 0),
        "watchdog_cpu_pct": round(watch_cpu_s / max(worker_cpu_s, 1e-9) * 100, 3),
        "longest_stall": stall_summary(longest[0]),
    }


def stall_summary(stall: dict[str, Any]) -> dict[str, Any]:
    """A stall as `GET /api/stalls` reports it, shortened: how long, the collections that
    overlapped it (generation, pause), and what the loop ran (its most sampled stack's
    innermost frames)."""
    stacks = stall.get("stacks") or [{}]
    return {
        "lag_ms": stall.get("lag_ms", 0.0),
        "samples": stall.get("samples", 0),
        "collections": [
            {k: c[k] for k in ("generation", "pause_ms", "collected")}
            for c in stall.get("collections", [])
        ],
        "frames": stacks[0].get("frames", [])[:8],
    }


class BenchWorker:
    def __init__(self, settings: Settings, env: dict[str, str], log: Path | None = None) -> None:
        """`log`: a file the worker's output is appended to (none: discarded)."""
        self.settings = settings
        self.log = log
        output = subprocess.DEVNULL if log is None else log.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "streams.cli", "worker"],
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        if not isinstance(output, int):
            output.close()  # the worker holds its own

    def metrics(self) -> str:
        return self._get("/metrics")

    def stall_report(self, since: float) -> dict[str, Any]:
        """The worker's stall watch (`GET /api/stalls`): its longest stalls that began after
        `since` (seconds since the epoch), how many in all, the watchdog thread's CPU time."""
        text = self._get(f"/api/stalls?since={since}")
        return dict(json.loads(text)) if text else {}

    def decision(self, key: str) -> dict[str, Any] | None:
        """The worker's current decision for `key` (`subject|field`), as `GET
        /api/decisions/{key}` answers (a subject that is an alias: its canonical key's), None
        when it answers nothing."""
        text = self._get("/api/decisions/" + urllib.parse.quote(key, safe=""))
        return dict(json.loads(text)["decision"]) if text else None

    def _get(self, path: str) -> str:
        try:
            url = f"http://127.0.0.1:{self.settings.web_port}{path}"
            with urllib.request.urlopen(url, timeout=10) as response:
                return str(response.read().decode())
        except OSError:
            return ""

    def processed(self) -> float:
        text = self.metrics()
        return _metric(text, "claimstream_claims_accepted_total") + _metric(
            text, "claimstream_claims_rejected_total"
        )

    def cpu_seconds(self) -> float:
        """User and system CPU time of the worker process so far (all its threads)."""
        return cpu_seconds(self.proc.pid)

    def peak_rss(self) -> int:
        return self._status_bytes("VmHWM:")

    def rss(self) -> int:
        return self._status_bytes("VmRSS:")

    def stage_seconds(self) -> dict[str, float]:
        text = self.metrics()
        return {
            stage: _metric(text, f'claimstream_stage_seconds_total{{stage="{stage}"}}')
            for stage in STAGES
        }

    def state_keys(self) -> int:
        return int(_metric(self.metrics(), "claimstream_state_keys"))

    def expiry_ticks(self) -> int:
        """Re-decisions by time alone the worker has started (ticks sent)."""
        return int(_metric(self.metrics(), "claimstream_expiry_ticks_total"))

    def timers_due(self) -> int:
        """Timers due not yet ticked (`claimstream_timers_due`, counted up to a bound a task)."""
        return int(_metric(self.metrics(), "claimstream_timers_due"))

    def sweep_remaining(self) -> int | None:
        """Keys the rollout sweep has yet to look at (`claimstream_policy_sweep_remaining`),
        None when /metrics does not show it."""
        return self.gauge("claimstream_policy_sweep_remaining")

    def alias_regroups_pending(self) -> int | None:
        """Keys the sweep's walks under way found to regroup by an alias change
        (`claimstream_alias_regroups_pending`), None when /metrics does not show it."""
        return self.gauge("claimstream_alias_regroups_pending")

    def alias_moves(self) -> int:
        """Evidence sent from one key to another because an alias took effect or was retracted
        (`claimstream_alias_moves_total`: one per key it went to)."""
        return int(_metric(self.metrics(), "claimstream_alias_moves_total"))

    def gauge(self, name: str) -> int | None:
        """A gauge's first sample, None when /metrics does not show it."""
        for line in self.metrics().splitlines():
            if line.startswith((name + " ", name + "{")):
                return int(float(line.rsplit(" ", 1)[1]))
        return None

    def restore_seconds(self) -> float:
        """The worker's own time restoring its tasks since it started, rebalances summed."""
        return _metric(self.metrics(), "claimstream_restore_seconds_sum")

    def restore_records_remaining(self) -> int:
        return int(_metric(self.metrics(), "claimstream_restore_records_remaining"))

    def stall_counts(self) -> StallCounts:
        text = self.metrics()
        return StallCounts(
            _buckets(text, "claimstream_loop_lag_seconds"),
            _metric(text, "claimstream_loop_lag_max_seconds"),
            _metric(text, "claimstream_gc_pause_seconds_total"),
            _metric(text, "claimstream_state_cache_misses_total"),
            tuple(
                _metric(text, f'claimstream_gc_pause_seconds_total{{generation="{g}"}}')
                for g in GENERATIONS
            ),
        )

    def _status_bytes(self, field: str) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith(field):
                return int(line.split()[1]) * 1024
        return 0

    def ready(self) -> bool:
        """Whether /readyz answers 200 (every assigned partition's task restored)."""
        try:
            url = f"http://127.0.0.1:{self.settings.web_port}/readyz"
            with urllib.request.urlopen(url, timeout=10) as response:
                return bool(response.status == 200)
        except OSError:  # a 503 (restoring) too: HTTPError is an OSError
            return False

    def alive(self, what: str) -> None:
        """Fails, with the tail of its log, if the worker exited before `what`."""
        if self.proc.poll() is not None:
            log = self.log
            tail = (
                log.read_text(errors="replace").splitlines()[-20:] if log and log.exists() else []
            )
            raise RuntimeError(
                f"the bench's worker exited with {self.proc.returncode} before {what}: "
                + "\n".join(tail)
            )

    def pause(self) -> None:
        """SIGSTOP: the worker's clock of CPU stands still and it reads nothing until `resume`
        (its input can be filled meanwhile, to be read as a backlog)."""
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.proc.send_signal(signal.SIGCONT)

    def kill(self) -> None:
        """SIGKILL: no shutdown, no last commit, nothing flushed."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@dataclass(frozen=True)
class Signs:
    """What a worker shows at one instant of a phase: compared with a later one, what stalled
    it, what it ran, and the CPU it, the load (and the broker) took."""

    at: float
    stalls: StallCounts
    ticks: int
    staged: dict[str, float]
    cpu: dict[str, tuple[int, float]]  # role -> (pid, CPU seconds)

    @classmethod
    def of(cls, worker: BenchWorker, pids: Mapping[str, int]) -> Signs:
        cpu = {role: (pid, cpu_seconds(pid)) for role, pid in pids.items()}
        ticks, staged = worker.expiry_ticks(), worker.stage_seconds()
        return cls(time.perf_counter(), worker.stall_counts(), ticks, staged, cpu)

    def since(self, worker: BenchWorker) -> dict[str, Any]:
        """The figures from this instant to now: the longest loop lag, the collector's pauses,
        the keys decoded, the timers' ticks (a sweep's own not counted), the worker's loop by
        stage (ms a second) and each process's CPU (% of a core)."""
        later = Signs.of(worker, {role: pid for role, (pid, _) in self.cpu.items()})
        wall = max(later.at - self.at, 1e-6)
        staged = {s: (v - self.staged.get(s, 0.0)) / wall * 1000 for s, v in later.staged.items()}
        cpu = {role: (s - self.cpu[role][1]) / wall * 100 for role, (_, s) in later.cpu.items()}
        return {
            **stalls_between(self.stalls, later.stalls),
            **gc_pauses_between(self.stalls, later.stalls),
            "expiry_ticks": later.ticks - self.ticks,
            "stage_ms_per_s": {stage: round(ms, 1) for stage, ms in staged.items()},
            "cpu_pct": {role: round(pct, 1) for role, pct in cpu.items()},
        }


POLL_S = 0.2
"""Between two reads of a worker's progress while its rate is not known yet."""
CLOSEST_POLL_S = 0.02
"""The shortest wait, as a mark comes near: how late the bench may see that it was passed."""


STALL_S = 180.0  # a worker that processes nothing for this long has failed the phase


def next_look_s(done: float, since: tuple[float, float] | None, now: float, mark: float) -> float:
    """How long to wait before reading a worker's progress again, at `done` processed claims of
    `mark`, given (when, done) at the first read that showed progress. Each read is a /metrics
    scrape, 3.3-3.5 ms of the worker's CPU on the bench's workload, so a read every `POLL_S`
    would cost it 1.7% of a core in the phase measured: waits are half the time the rate says
    the mark is away, down to `CLOSEST_POLL_S`."""
    if since is None or now <= since[0] or done <= since[1]:
        return POLL_S
    per_s = (done - since[1]) / (now - since[0])
    return max(CLOSEST_POLL_S, min((mark - done) / per_s / 2, 5.0))


@dataclass(frozen=True)
class Marks:
    """When a worker's processed claims first reached each mark, and its CPU time then."""

    first: float  # when the first processed claim showed
    at: list[float]
    cpu_first: float
    cpu_at: list[float]


def processed_marks(worker: BenchWorker, marks: list[int]) -> Marks:
    """Watch the worker's processed claims up to the last mark; fails when it exits or
    processes nothing for `STALL_S`."""
    times: list[float] = []
    cpus: list[float] = []
    first, reached, cpu_first = 0.0, 0.0, 0.0
    done, progressed = 0.0, time.monotonic()
    while len(times) < len(marks):
        if worker.proc.poll() is not None:
            raise RuntimeError(f"the worker exited with {worker.proc.returncode}")
        now, latest = time.perf_counter(), worker.processed()
        if latest > done:
            done, progressed = latest, time.monotonic()
        elif time.monotonic() - progressed > STALL_S:
            raise TimeoutError(f"the worker is stuck at {done:.0f} processed claims")
        if not first and done > 0:
            first, reached, cpu_first = now, done, worker.cpu_seconds()
        while len(times) < len(marks) and done >= marks[len(times)]:
            times.append(now)
            cpus.append(worker.cpu_seconds())
        if len(times) < len(marks):
            time.sleep(
                next_look_s(done, (first, reached) if first else None, now, marks[len(times)])
            )
    return Marks(first, times, cpu_first, cpus)


def worker_env(settings: Settings) -> dict[str, str]:
    """This process's environment with `settings` as the worker's CLAIMSTREAM_* variables."""
    env = dict(os.environ)
    env.update({f"CLAIMSTREAM_{k.upper()}": str(v) for k, v in env_settings(settings).items()})
    topics = settings.topics.model_dump().items()
    env.update({f"CLAIMSTREAM_TOPIC_{k.upper()}": v for k, v in topics})
    return env


def env_settings(settings: Settings) -> dict[str, object]:
    chosen: dict[str, object] = {
        "app_id": settings.app_id,
        "broker": settings.broker,
        "partitions": settings.partitions,
        "web_port": settings.web_port,
        "store": settings.store,
        "data_dir": settings.data_dir,
        "log_level": settings.log_level,
        "processing_guarantee": settings.processing_guarantee.value,
    }
    if settings.instance_id is not None:
        chosen["instance_id"] = settings.instance_id
    return chosen
