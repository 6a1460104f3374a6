"""The audit export at scale: how long `claimstream audit export` takes over a million keys, in
how much memory, into files how large.

`python -m streams.devkit.bench.audit --keys 1000000 --claims-per-key 3` starts an Apache Kafka
broker of its own, publishes the example policy, fills the claims topic with `claims-per-key`
claims a key (seat counts from crm and the order form, both systems of record: a third of the
keys disagree, the rest agree), each stamped with its observed instant, then runs the export as
the command line does, in a process of its own, as of an instant after the last claim. It prints
the figures as one JSON line: the export's wall time, its peak resident memory, records and
keys a second, and each file's size. The broker and its data are removed after.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from aiokafka import AIOKafkaProducer

from streams.core.keys.state import state_key
from streams.core.records.contracts import Claim
from streams.devkit.bench.workload import CODEC, SEATS, create_topics
from streams.devkit.brokers import KafkaBroker
from streams.packaged import example_path
from streams.settings import Settings
from streams.topic_names import Topics
from streams.worker.policy_log import publish_policy

SOURCES = ("crm", "order-form", "crm")


def _claims(keys: int, per_key: int, start: datetime, topic: str) -> list[tuple[bytes, bytes, int]]:
    """(key, Avro value, timestamp ms) of every claim, one key's after another's."""
    records = []
    for n in range(keys):
        subject = f"contract:{n}"
        key = state_key(subject, SEATS).encode()
        for i in range(per_key):
            at = start + timedelta(microseconds=n * per_key + i)
            claim = Claim(
                claim_id=f"c{n}-{i}",
                subject=subject,
                field=SEATS,
                status="present",
                value=12 + (i if n % 3 == 0 else 0),
                source=SOURCES[i % len(SOURCES)],
                observed_at=at,
            )
            records.append((key, CODEC.encode(topic, claim), int(at.timestamp() * 1000)))
    return records


async def _fill(bootstrap: str, topics: Topics, records: list[tuple[bytes, bytes, int]]) -> None:
    settings = Settings(broker=f"kafka://{bootstrap}", topics=topics)
    await publish_policy(
        settings, example_path("policy.yaml").read_text(), datetime(2026, 1, 1, tzinfo=UTC)
    )
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, linger_ms=20, max_batch_size=1 << 20, acks=1
    )
    await producer.start()
    try:
        pending = []
        for key, value, stamp in records:
            pending.append(await producer.send(topics.claims, value, key=key, timestamp_ms=stamp))
            if len(pending) >= 50_000:
                await asyncio.gather(*pending)
                pending = []
        await asyncio.gather(*pending)
    finally:
        await producer.stop()


@dataclass(frozen=True)
class Measured:
    """A command run to its end: its exit status, standard error and peak resident memory."""

    returncode: int
    stderr: str
    peak_kb: int


def _run_measured(command: list[str], env: dict[str, str]) -> Measured:
    """Run `command` to its end, its peak resident memory read from /proc as it runs (the
    broker, another child of this process, must not count, as it would in RUSAGE_CHILDREN)."""
    with tempfile.TemporaryFile("w+") as errors:
        process = subprocess.Popen(
            command, env=env, stdout=subprocess.DEVNULL, stderr=errors, text=True
        )
        status = Path(f"/proc/{process.pid}/status")
        peak = 0
        while process.poll() is None:
            try:
                for line in status.read_text().splitlines():
                    if line.startswith("VmHWM:"):  # the process's peak so far
                        peak = max(peak, int(line.split()[1]))
            except OSError:  # it ended between poll() and the read
                pass
            time.sleep(0.2)
        errors.seek(0)
        return Measured(process.returncode, errors.read(), peak)


def run(keys: int, per_key: int, partitions: int, out: Path) -> dict[str, object]:
    topics = Topics()
    start = datetime.now(UTC) - timedelta(hours=1)
    built = time.monotonic()
    records = _claims(keys, per_key, start, topics.claims)
    figures: dict[str, object] = {"keys": keys, "claims": len(records)}
    figures["encode_s"] = round(time.monotonic() - built, 1)
    with KafkaBroker(partitions=partitions) as broker:
        asyncio.run(create_topics(broker.bootstrap, [topics.claims], partitions))
        filled = time.monotonic()
        asyncio.run(_fill(broker.bootstrap, topics, records))
        figures["fill_s"] = round(time.monotonic() - filled, 1)
        del records
        as_of = datetime.now(UTC).isoformat()
        env = dict(os.environ, CLAIMSTREAM_BROKER=f"kafka://{broker.bootstrap}")
        began = time.monotonic()
        exported = _run_measured(
            [sys.executable, "-m", "streams.cli", "audit", "export", "--as-of", as_of,
             "--out", str(out), "--unsigned"],
            env,
        )  # fmt: skip
        took = time.monotonic() - began
    if exported.returncode != 0:
        raise SystemExit(f"the export failed:\n{exported.stderr}")
    peak_mb = exported.peak_kb / 1024
    manifest = json.loads((out / "manifest.json").read_text())
    figures |= {
        "export_s": round(took, 1),
        "export_peak_rss_mb": round(peak_mb),
        "records_per_s": round(manifest["records"]["read"] / took),
        "keys_per_s": round(manifest["files"][0]["rows"] / took),
        "rows": {f["table"]: f["rows"] for f in manifest["files"]},
        "file_mb": {f["name"]: round(f["bytes"] / 2**20, 1) for f in manifest["files"]},
    }
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m streams.devkit.bench.audit")
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--claims-per-key", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--out", type=Path, help="the export's folder (default: a temporary one)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="claimstream-bench-audit-") as scratch:
        out = args.out or Path(scratch) / "export"
        print(json.dumps(run(args.keys, args.claims_per_key, args.partitions, out)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
