"""Which modules mypyc compiles, and the switch that turns the compile on.

Read by `setup.py` (wheels, sdists' wheels) and by `build_backend.inplace` (an editable checkout's
extension modules, built by scripts/setup.sh). COMPILED is the one list: each entry says what its
compile was measured to gain. Modules that define pydantic models or msgspec Structs stay out:
their classes are built by a metaclass, which mypyc's native classes cannot express (its C output
for them does not compile).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from setuptools import Extension

SWITCH = "CLAIMSTREAM_USE_MYPYC"
"""`1` compiles, `0` (or unset, for a wheel) builds pure Python."""
MODULES_OVERRIDE = "CLAIMSTREAM_MYPYC_MODULES"
"""A comma-separated module list that replaces COMPILED for one build (to measure a candidate)."""

_ENGINE = "engine_rate 3.5k -> 7.1k decisions/s wall (medians of 3, the eight compiled together)"
_MEMBERS = "engine_rate 329-338k -> 340-387k decisions/s CPU (medians of 5, 3 alternated runs)"
_INSTANTS = "engine_rate 341-353k -> 375-390k decisions/s CPU (medians of 5, 3 alternated runs)"
_TRANSITIONS = "bench.shell 195-221 -> 173-177 µs CPU a claim (4 runs each; loaded)"
_CLAIM = "core per-claim loop 5.5k -> 6.9k claims/s CPU (medians of 3, the eight compiled together)"
_BOOKKEEPING = (
    "bench.shell 138.7/99.5/97.0 -> 113.5/97.9/91.7 µs CPU a claim (medians of 3 rounds,"
    " 3 alternated runs; loaded), with instants.micros_from_seconds (510 -> 359 ns a call)"
)
_BOUNDS = (
    "add_claim with admission 12.3 -> 9.7 µs a claim CPU, 8.8 before the bounds (20,000 claims on"
    " 2,000 keys, the rest of this list compiled; medians of 4 alternated runs; loaded)"
)
_LEAN = (
    "bench.shell decode 4.3-4.4 -> 3.5-3.7 µs a claim CPU, a key's state decoded 3.43 -> 3.12 µs a"
    " claim (the bench's 100,000 claims on 12,000 subjects; 3 alternated runs)"
)
_SHELL = "304.8k -> 286.2k instructions a claim (the shell interpreted, then compiled)"
_UPKEEP = (
    "the shell bench's arbitrate stage 11.5 -> 9.3 µs a claim CPU (it was compiled until"
    " 4a37ebb; 2 runs of 3 rounds each, alternated)"
)

COMPILED: dict[str, str] = {
    # Figures: `python -m build_backend.measure --rounds 3 --claims 10000`, interpreted against
    # compiled runs alternated on a loaded 2-core machine (2026-12-01); the worker's Processor
    # loop went 2.69k -> 2.90k claims/s CPU. Compiling its shell as well (pipeline.processor,
    # .records, .outputs, statestore) added nothing above the noise (2.87k interpreted ->
    # 2.87k/3.41k/2.69k) until their records were built by __init__s mypyc compiles (below).
    # pipeline.rekey fails the strict type check; state.task's TaskStore must stay weakly
    # referable (streams.arbiter.sources keys its ledgers by store), which a native class is not;
    # pipeline.outputs stays interpreted: tests/pipeline/test_emit_retry.py replaces an Outputs'
    # `emit` on the instance, which a native class refuses.
    "streams.core.rules.engine": f"the rules table and its steps: {_ENGINE}",
    "streams.core.rules.rulebook": (
        f"the table's context and step results, split from engine: {_ENGINE}"
    ),
    "streams.core.decision.agreement": f"the steps' value comparisons: {_ENGINE}",
    "streams.core.decision.arbitration": f"the decision record and its id: {_ENGINE}",
    "streams.core.rules.shortcuts.fused": f"the rules in one pass for plain keys: {_ENGINE}",
    "streams.core.records.members": f"the constants the engine reads, as C statics: {_MEMBERS}",
    "streams.core.rules.shortcuts.incremental": f"the one-claim shortcut of add_claim: {_CLAIM}",
    "streams.core.admission.normalize": f"per-claim normalization and values_agree: {_CLAIM}",
    "streams.core.admission.intake": f"admit, once per claim: {_CLAIM}",
    "streams.core.keys.state": f"the key state those transitions read and change: {_TRANSITIONS}",
    "streams.core.keys.transitions": f"the key's transitions, once per claim: {_TRANSITIONS}",
    "streams.core.keys.emission": f"what each of those transitions sends: {_TRANSITIONS}",
    "streams.core.keys.upkeep": f"a key's bounds and next check, once per transition: {_UPKEEP}",
    "streams.core.decision.summary": (
        f"the decision summaries those transitions make: {_TRANSITIONS}"
    ),
    "streams.core.keys.journal": f"the state's stored form, once per changed key: {_CLAIM}",
    "streams.core.records.instants": f"micros and instant, several times a claim: {_INSTANTS}",
    "streams.core.records.lean": f"a claim built per record and per claim decoded: {_LEAN}",
    "streams.core.records.memo": f"normalize's per-policy memo, read per claim: {_CLAIM}",
    "streams.core.records.bounds": (
        f"the intake's bounds and a claim's bytes, once per claim: {_BOUNDS}"
    ),
    "streams.wire.partitioner": "murmur2 of a 31-byte key 27-37 -> 0.4-0.6 µs (3 runs)",
    "streams.wire.claim_reader": (
        "decode_claim 34.6 -> 9.3 µs a claim CPU (23.4 interpreted; 3 runs)"
    ),
    # The worker's shell around the core, compiled together: `python -m streams.devkit.bench.shell`
    # (the per-claim path without a broker) measured in instructions a claim under valgrind.
    "streams.pipeline.processor": f"the dispatcher, once per record: {_SHELL}",
    "streams.pipeline.records": f"Incoming, Outgoing, Handled, built per record: {_SHELL}",
    "streams.pipeline.key_clock": f"a key brought to each record's instant first: {_SHELL}",
    "streams.wire.decision_bytes": f"each decision record: {_SHELL}",
    "streams.wire.avro_writer": f"the field writers of every record sent: {_SHELL}",
    "streams.ops.metrics": f"the per-claim tallies and stage clocks: {_SHELL}",
    "streams.arbiter.bookkeeping": f"the loop's handling of each handled record: {_BOOKKEEPING}",
}
"""Module -> where it sits on the hot path and the measurement that justifies compiling it."""

BUILD_REQUIRES = (
    "cryptography>=42",
    "msgspec>=0.18",
    "mypy>=1.10",
    "prometheus-client>=0.20",
    "pydantic>=2.7,<3",
    "types-PyYAML",
)
"""What the compile needs in an isolated build: mypyc, and what its type check reads (the core's
models and their mypy plugin, the journal's Structs, the policy loader's yaml stubs, and for the
shell the metrics' prometheus-client and the signature check's cryptography)."""

ROOT = Path(__file__).resolve().parents[1]
MYPY_CONFIG = Path(__file__).with_name("mypyc.ini")
GROUP = "streams.native"
"""The shared library of the compiled group lives inside the package: streams/native__mypyc.*"""


def use_mypyc() -> bool:
    value = os.environ.get(SWITCH, "0")
    if value not in ("0", "1"):
        raise SystemExit(f"{SWITCH} must be 0 or 1, not {value!r}")
    return value == "1"


def modules() -> list[str]:
    override = os.environ.get(MODULES_OVERRIDE, "").strip()
    if override:
        return [name.strip() for name in override.split(",") if name.strip()]
    return list(COMPILED)


def source_path(module: str) -> Path:
    path = ROOT.joinpath(*module.split(".")).with_suffix(".py")
    if not path.is_file():
        raise SystemExit(f"{SWITCH}=1: {module} is listed for mypyc but {path} does not exist")
    return path


def compile_extensions() -> list[Extension]:
    """mypyc's extension modules for the listed modules. Any type error or unsupported construct
    stops the build (mypyc exits with its diagnostics): a listed module is never quietly left
    interpreted."""
    from mypyc.build import mypycify

    paths = [str(source_path(module).relative_to(ROOT)) for module in modules()]
    return list(
        mypycify(
            ["--config-file", str(MYPY_CONFIG), *paths],
            opt_level="3",
            debug_level="0",
            group_name=GROUP,
        )
    )


def extensions() -> list[Extension]:
    """The extension modules of this build: none unless the switch is on."""
    return compile_extensions() if use_mypyc() else []
