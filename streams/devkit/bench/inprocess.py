"""The phases without a broker: the pure engine's decision rate, and the encoded state a key
holds after the workload.
"""

from __future__ import annotations

import random
import statistics
import time
from datetime import UTC, datetime, timedelta

from streams.core.admission.intake import admit
from streams.core.keys.journal import encode_state
from streams.core.keys.state import KeyState, Limits, state_key
from streams.core.keys.transitions import add_claim
from streams.core.records.contracts import Claim
from streams.core.records.errors import ContractError
from streams.core.records.policy import Policy
from streams.core.rules.engine import arbitrate
from streams.devkit.bench.workload import PAID, SOURCES, payment


def engine_rate(policy: Policy, keys: int = 20000) -> float:
    """The pure engine alone: decisions per second of this process's CPU time, for keys of 3
    claims (CPU time: what else runs on the machine does not count against it)."""
    now = datetime.now(UTC)
    rules = policy.rules_for(PAID)
    assert rules is not None
    rng = random.Random(3)
    batches = []
    for k in range(keys):
        claims = [
            payment(
                f"e{k}-{i}",
                f"s{k}",
                now - timedelta(seconds=rng.randrange(90)),
                value=rng.choice(["paid", "paid", "unpaid"]),
                source=rng.choice(SOURCES),
            )
            for i in range(3)
        ]
        batches.append([admit(c, policy, now) for c in claims])
    started = time.process_time()
    for n, admitted in enumerate(batches):
        arbitrate(f"s{n}", PAID, admitted, rules, policy.version, now)
    return keys / (time.process_time() - started)


def state_bytes_per_key(policy: Policy, claims: list[Claim]) -> float:
    """Average serialized size of a key's state after the workload (what changelog and RocksDB
    hold per key)."""
    now = datetime.now(UTC)
    states: dict[str, KeyState] = {}
    for claim in claims:
        rules = policy.rules_for(claim.field)
        try:
            admitted = admit(claim, policy, now)
        except ContractError:
            continue
        assert rules is not None
        key = state_key(claim.subject, claim.field)
        step = add_claim(states.get(key), admitted, rules, policy.version, now, Limits())
        states[key] = step.state
    sizes = [len(encode_state(state)) for state in states.values()]
    return statistics.fmean(sizes)
