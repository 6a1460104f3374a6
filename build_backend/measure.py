"""What compiling a candidate module set gains: interpreted against compiled, runs alternated.

Build tooling, beside the module table it justifies (build_backend/compiled.py). Run it on a
checkout set up by scripts/setup.sh, after building the candidate in place:

    CLAIMSTREAM_MYPYC_MODULES=streams.core.rules.engine,... python -m build_backend.inplace
    python -m build_backend.measure --rounds 3

Each round runs one fresh process per mode (`CLAIMSTREAM_INTERPRETED=1` for the pure-Python
run) and prints three rates per mode: the pure engine (`engine_rate`, keys of 3 claims), the
core's per-claim loop (admit, add the claim to its key's state, encode the state as the journal
does) and the worker's loop (`Processor.process` on the bench's Avro records, a task store
journaled every 500 records). The two loops count CPU seconds (the machine may be shared);
`engine_rate` is the bench's own figure, in wall-clock seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime

from streams.build_info import INTERPRETED


def _claim_loop(count: int) -> float:
    from streams.core.admission.intake import admit
    from streams.core.keys.journal import encode_state
    from streams.core.keys.state import KeyState, Limits, state_key
    from streams.core.keys.transitions import add_claim
    from streams.core.records.errors import ContractError
    from streams.core.records.policy import load_policy
    from streams.devkit.bench.workload import workload
    from streams.packaged import example_path

    policy = load_policy(example_path("policy.yaml"))
    claims = workload(count, 2000, 7, "claims.bench").claims
    now, limits = datetime.now(UTC), Limits()
    states: dict[str, KeyState] = {}
    started = time.process_time()
    for claim in claims:
        rules = policy.rules_for(claim.field)
        try:
            admitted = admit(claim, policy, now)
        except ContractError:
            continue
        assert rules is not None
        key = state_key(claim.subject, claim.field)
        step = add_claim(states.get(key), admitted, rules, policy.version, now, limits)
        states[key] = step.state
        encode_state(step.state)
    return len(claims) / (time.process_time() - started)


def _worker_loop(count: int) -> float:
    from streams.core.records.policy import load_policy
    from streams.devkit.bench.workload import CODEC, workload
    from streams.ops.metrics import Metrics
    from streams.packaged import example_path
    from streams.pipeline.processor import Processor
    from streams.pipeline.records import Incoming
    from streams.pipeline.rekey import partition_of
    from streams.settings import Settings
    from streams.state.cache import StateCache
    from streams.state.task import TaskStore

    policy, settings = load_policy(example_path("policy.yaml")), Settings()
    processor = Processor(settings, policy, CODEC, Metrics(policy))
    records = workload(count, 2000, 7, "claims.bench").records
    store = TaskStore(StateCache(100_000))
    wall = time.time()
    started = time.process_time()
    for offset, (key, value) in enumerate(records):
        owner = partition_of(key, settings.partitions)
        record = Incoming("claims.bench", owner, offset, key, value, (), wall)
        handled = processor.process(record, store.get, lambda subject: None)
        if handled.key is not None and handled.state is not None:
            store.put(handled.key, handled.state)
        if offset % 500 == 499:
            store.journal()
    return len(records) / (time.process_time() - started)


def _measure_here(count: int) -> dict[str, object]:
    from streams.build_info import compiled_modules
    from streams.core.records.policy import load_policy
    from streams.devkit.bench.inprocess import engine_rate
    from streams.packaged import example_path

    return {
        "compiled": list(compiled_modules()),
        "engine_decisions_per_s": round(engine_rate(load_policy(example_path("policy.yaml")))),
        "core_claims_per_s": round(_claim_loop(count)),
        "worker_claims_per_s": round(_worker_loop(count)),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--claims", type=int, default=20_000)
    parser.add_argument("--here", action="store_true", help="measure this process once")
    args = parser.parse_args()
    if args.here:
        print(json.dumps(_measure_here(args.claims)))
        return 0
    for round_ in range(args.rounds):
        for mode in ("interpreted", "compiled"):
            env = os.environ | {INTERPRETED: "1" if mode == "interpreted" else "0"}
            command = [sys.executable, "-m", "build_backend.measure", "--here"]
            command += ["--claims", str(args.claims)]
            out = subprocess.run(command, env=env, check=True, capture_output=True, text=True)
            print(json.dumps({"round": round_, "mode": mode, **json.loads(out.stdout)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
