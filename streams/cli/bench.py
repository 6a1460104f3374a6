"""The `bench` command's argument table (`add_bench_command`): the dev kit's benchmark, its
phases and what each measures. Its handler is `streams.cli.main`'s, the one module that may name
the dev kit.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from streams.settings import Guarantee


def add_bench_command(
    commands: Any,
    handler: Callable[[argparse.Namespace], int],
    broker_kind_option: Callable[[argparse.ArgumentParser, str], None],
) -> None:
    """Add `bench`, run by `handler` (`broker_kind_option`: the --broker-kind option `dev`
    shares, given its default)."""
    bench_parser = commands.add_parser(
        "bench", help="claims/s, latency and state next to the raw aiokafka limit (prints JSON)"
    )
    bench_parser.add_argument(
        "--claims", type=int, default=100_000, help="generated claims to process"
    )
    bench_parser.add_argument(
        "--subjects", type=int, default=12_000, help="distinct subjects among them"
    )
    broker_kind_option(bench_parser, "kafka")
    bench_parser.add_argument("--partitions", type=int, default=4, help="partitions per topic")
    bench_parser.add_argument(
        "--latency-s", type=float, default=20.0, help="seconds of offered load"
    )
    bench_parser.add_argument(
        "--soak-s",
        type=float,
        default=0.0,
        help="then a steady run of this many seconds sampling memory (600 for the 10-min check)",
    )
    bench_parser.add_argument(
        "--guarantee",
        choices=[g.value for g in Guarantee],
        default=Guarantee.AT_LEAST_ONCE.value,
        help="the worker's processing guarantee (exactly_once: the same run under transactions)",
    )
    bench_parser.add_argument(
        "--scale-keys",
        type=int,
        nargs="?",
        const=1_000_000,
        default=None,
        metavar="N",
        help="then the scale phase: a worker holding N keys (default 1000000): RSS, disk per "
        "key, claims/s at that size, restart and full-restore times; off unless given",
    )
    bench_parser.add_argument(
        "--scale-stores",
        default="rocksdb",
        help="stores the scale phase measures, comma-separated (rocksdb,memory: both)",
    )
    bench_parser.add_argument(
        "--scale-only",
        action="store_true",
        help="run the scale phase alone (N keys: --scale-keys, default 1000000)",
    )
    bench_parser.add_argument(
        "--pin-cores",
        action="store_true",
        help="run the latency phases with the worker on one core, the broker and the load on "
        "the others (Linux; the JSON's pinned_cores says which)",
    )
    bench_parser.add_argument(
        "--merge-pairs",
        type=int,
        nargs="?",
        const=10_000,
        metavar="N",
        help="then the merge phase: N alias keys (10000) merged by aliases under live load",
    )
    bench_parser.add_argument(
        "--peer",
        choices=["quixstreams"],
        help="after the throughput phase, the same claims through a minimal stateful quixstreams "
        "pipeline (the bench extra: pip install 'claimstream[bench]'), its claims/s beside ours",
    )
    bench_parser.set_defaults(handler=handler)
