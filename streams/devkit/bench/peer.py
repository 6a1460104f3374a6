"""The bench's peer (`claimstream bench --peer quixstreams`): a quixstreams pipeline doing the
least a stateful reconciliation needs, on the claims the worker read, on the same broker.

Per record of the claims topic, in one stateful step: decode the Avro claim (the bench's own
`WireCodec`, fastavro's schemaless reader against the packaged Claim schema; a record that does
not decode gets a dead marker and leaves the state alone, as the raw loops' do), read the key's
state (quixstreams' `State`, keyed by the record key, the claim's `subject|field` as the worker
keys it), append the claim's id and value, keep the last `max_claims` (the worker's
`max_claims_per_key`) and write it back, and produce one output record (the claim id and how
many claims the key holds, or the marker) to an output topic under the record's key.

Why that is the least: a reconciliation decides a key from the claims it holds, so it must at
least decode each claim, read what its key kept, bound what it keeps and keep it durably (the
default RocksDB store with its changelog topic, checkpointed every `commit_interval_s` as the
worker commits), and say something per claim downstream. It decides nothing: no policy, no
freshness, no evidence; what the worker does beyond this is its own cost, which the ratio shows.

How it runs: quixstreams' `Application.run()` blocks and installs signal handlers, so the
pipeline runs in a child process (`python -m streams.devkit.bench.peer JOB`) with a consumer
group of its own reading from the start, its state in a temporary folder removed afterwards.
The child times itself from its first processed record to its last (process CPU over all its
threads, and wall time), so that its import, group join and topic set-up fall outside, as the
worker's start does; then it stops itself (the last checkpoint committed) and the parent reads
the output topic's end offsets: one record per claim, or the run fails. A child that overruns is
sent SIGTERM, then SIGKILL. quixstreams is the `bench` extra's: only the child imports it.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from streams.core.records.contracts import Claim
from streams.core.records.errors import ClaimstreamError, RejectedInput
from streams.devkit.bench.scale import offsets
from streams.devkit.bench.workload import CODEC, Throughput, create_topics

PEERS = ("quixstreams",)
"""The pipelines `--peer` may name."""
# The child's time limit: START_S for its import, group join and topic set-up, then the claims
# at SLOWEST_PER_S a second (a small fraction of its measured rate: only a stuck child overruns).
START_S = 60.0
SLOWEST_PER_S = 500.0
STOP_S = 15.0  # after SIGTERM, before SIGKILL


@dataclass(frozen=True)
class PeerFigures:
    """What the peer measured over the claims it read, and how many records it produced."""

    name: str
    version: str
    throughput: Throughput
    outputs: int

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "version": self.version,
            "claims_per_s": round(self.throughput.per_s),
            "cpu_us_per_claim": round(self.throughput.cpu_us, 1),
        }


@dataclass(frozen=True)
class Job:
    """What the child process is told, as one JSON argument."""

    bootstrap: str
    source: str
    sink: str
    claims: int
    group: str
    state_dir: str
    window: str  # where the child writes its timed window
    max_claims: int
    commit_interval_s: float


def peer_version(name: str) -> str:
    """The installed version of peer `name`; a ClaimstreamError naming the extra when absent."""
    if name not in PEERS:
        raise ClaimstreamError(f"no peer {name!r}: the bench knows {', '.join(PEERS)}")
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        raise ClaimstreamError(
            f"the bench's peer needs {name}: pip install 'claimstream[bench]'"
        ) from None


def run_peer(
    bootstrap: str,
    source: str,
    sink: str,
    claims: int,
    partitions: int,
    max_claims: int = 16,  # the worker's defaults: max_claims_per_key, commit_interval_s
    commit_interval_s: float = 1.0,
) -> PeerFigures:
    """The quixstreams peer over the first `claims` records of `source` (every record, bad
    ones included), its output on `sink` (created here with `partitions`)."""
    version = peer_version("quixstreams")
    asyncio.run(create_topics(bootstrap, [sink], partitions))
    folder = Path(tempfile.mkdtemp(prefix="claimstream-peer-"))
    try:
        job = Job(
            bootstrap,
            source,
            sink,
            claims,
            group=f"claimstream-peer-{uuid.uuid4().hex[:8]}",
            state_dir=str(folder / "state"),
            window=str(folder / "window.json"),
            max_claims=max_claims,
            commit_interval_s=commit_interval_s,
        )
        _run_child(job, folder / "peer.log", START_S + claims / SLOWEST_PER_S)
        window = json.loads(Path(job.window).read_text())
        outputs = asyncio.run(offsets(bootstrap, sink))[1]
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if outputs != claims:
        raise RuntimeError(f"the peer produced {outputs} records for {claims} claims")
    counted = window["claims"]
    throughput = Throughput(counted / window["seconds"], window["cpu_s"] / counted * 1e6)
    return PeerFigures("quixstreams", version, throughput, outputs)


def _run_child(job: Job, log: Path, timeout_s: float) -> None:
    """Runs the child on `job` until it stops itself; fails, with its log's tail, when it
    exits otherwise or overruns `timeout_s` (it is then stopped)."""
    command = [sys.executable, "-m", "streams.devkit.bench.peer", json.dumps(asdict(job))]
    with log.open("wb") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    try:
        code = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        code = None
    finally:
        _stop(proc)
    if code != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:])
        said = f"exited with {code}" if code is not None else f"ran past {timeout_s:.0f} s"
        raise RuntimeError(f"the quixstreams peer {said}:\n{tail}")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the child (quixstreams then stops its loop), SIGKILL when it outlives
    `STOP_S`."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=STOP_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class _Window:
    """The child's timed window: from its first processed record to the job's last, by its
    process CPU clock (all its threads, librdkafka's included) and the wall clock; at the last
    it writes the window down and stops the application, which commits its last checkpoint."""

    def __init__(self, job: Job) -> None:
        self.job = job
        self.stop: Callable[[], None] = lambda: None  # the application's, once it exists
        self.seen = 0
        self.began = self.cpu_began = 0.0

    def processed(self, topic: str, partition: int, offset: int) -> None:
        self.seen += 1
        if self.seen == 1:
            self.began, self.cpu_began = time.perf_counter(), time.process_time()
        elif self.seen == self.job.claims:
            window = {
                "claims": self.seen - 1,  # those processed after the first's mark
                "seconds": time.perf_counter() - self.began,
                "cpu_s": time.process_time() - self.cpu_began,
            }
            Path(self.job.window).write_text(json.dumps(window))
            self.stop()


def child(job: Job) -> None:
    """The quixstreams application over `job` (in the child process: `run` blocks until the
    window's last record stops it)."""
    from quixstreams import Application, State  # the bench extra's: only the child needs it

    window = _Window(job)
    app = Application(
        broker_address=job.bootstrap,
        consumer_group=job.group,
        auto_offset_reset="earliest",
        commit_interval=job.commit_interval_s,
        state_dir=job.state_dir,
        loglevel="WARNING",
        on_message_processed=window.processed,
    )
    window.stop = app.stop
    keep = job.max_claims

    def reconcile(value: bytes, state: State[str, list[Any]]) -> dict[str, Any]:
        try:
            claim = CODEC.decode_record(Claim, value)
        except RejectedInput as exc:
            return {"dead": exc.reason.value}
        held: list[Any] = state.get("claims", [])
        held.append((claim["claim_id"], claim["value"]))
        state.set("claims", held[-keep:])
        return {"claim_id": claim["claim_id"], "claims": min(len(held), keep)}

    claims = app.topic(job.source, key_deserializer="bytes", value_deserializer="bytes")
    out = app.topic(job.sink, key_serializer="bytes", value_serializer="json")
    app.dataframe(claims).apply(reconcile, stateful=True).to_topic(out)
    app.run()


if __name__ == "__main__":
    child(Job(**json.loads(sys.argv[1])))
