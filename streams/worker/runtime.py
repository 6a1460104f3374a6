"""Running things: a worker, publish and tail (the `dev` bundle is in streams.devkit.dev).

`run_worker` starts the Faust worker over what streams.worker.app builds (topics ensured, the
garbage collector tuned for the hot path); `publish_lines` sends JSON claims in as Avro; `tail`
prints a stream out as JSON lines, dead letters with their `claimstream.error.*` headers.
"""

from __future__ import annotations

import asyncio
import contextlib
import faulthandler
import json
import logging
import signal
import sys
import traceback
from collections.abc import Callable, Iterable
from typing import Any

import faust
from aiokafka import AIOKafkaConsumer

from streams.client import ClaimPublisher
from streams.core.admission.intake import parse_claim
from streams.core.records.contracts import Claim, Decision, EpochChange, ReobserveRequest
from streams.core.records.errors import ClaimstreamError
from streams.core.records.policy import load_policy
from streams.ops.logs import configure_logging
from streams.ops.stalls import tune_collector
from streams.pipeline.authentication import principal_topics
from streams.pipeline.outputs import ERROR_HEADER_PREFIX
from streams.settings import Settings, warn_unknown_variables
from streams.wire.kafka import client_options
from streams.wire.registry import WireCodec, registry_for
from streams.worker.app import Pipeline, build
from streams.worker.policy_log import history_at_start
from streams.worker.topics import ensure_topics

log = logging.getLogger(__name__)


_FRAME = ("cr_frame", "gi_frame", "ag_frame")  # a coroutine's, a generator's, an async one's
_AWAITED = ("cr_await", "gi_yieldfrom", "ag_await")


def _first_attribute(obj: Any, names: tuple[str, ...]) -> Any:
    return next((value for name in names if (value := getattr(obj, name, None)) is not None), None)


def await_chain(task: asyncio.Task[Any]) -> traceback.StackSummary:
    """Where a task is: its coroutine's frame, then the frame of each coroutine it awaits in
    turn, down to the innermost (`Task.get_stack` gives only the outermost of a suspended one)."""
    frames = []
    awaitable: Any = task.get_coro()
    while (frame := _first_attribute(awaitable, _FRAME)) is not None:
        code = frame.f_code
        frames.append(traceback.FrameSummary(code.co_filename, frame.f_lineno, code.co_name))
        awaitable = _first_attribute(awaitable, _AWAITED)
    return traceback.StackSummary.from_list(frames)


def log_task_stacks(loop: asyncio.AbstractEventLoop) -> None:
    """Every asyncio task's await chain, in one log record. Frames only, never their local
    variables: those hold claim values, and a log line carries none."""
    tasks = sorted(asyncio.all_tasks(loop), key=lambda task: task.get_name())
    stacks = [
        f"Task {task.get_name()} {task.get_coro()!r}:\n{''.join(await_chain(task).format())}"
        for task in tasks
    ]
    log.warning("asyncio task stacks (%d tasks):\n%s", len(tasks), "\n".join(stacks))


class QuietWorker(faust.Worker):
    """Stops on Ctrl-C like on SIGTERM, without mode's "-INT- -INT- ..." line on stderr; on
    SIGUSR1 prints every thread's stack, then logs every asyncio task's."""

    def _on_sigint(self) -> None:
        self._schedule_shutdown(signal.SIGINT)

    def install_signal_handlers(self) -> None:
        super().install_signal_handlers()
        # The loop's SIGUSR1 handler (mode installs it at start) only runs when the loop turns.
        # faulthandler goes first, chained to it, so thread stacks print even when it is stuck.
        faulthandler.register(signal.SIGUSR1, all_threads=True, chain=True)

    def _on_sigusr1(self) -> None:
        """Replaces mode's dump, which pretty-prints every frame's local variables."""
        log_task_stacks(self.loop)


def run_worker(settings: Settings, customize: Callable[[Pipeline], None] | None = None) -> int:
    """Create the topics, build the app and run a Faust worker until SIGINT/SIGTERM."""
    tune_collector()
    configure_logging(settings.log_level, settings.log_format)
    warn_unknown_variables()
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    policy = load_policy(settings.policy)
    loop.run_until_complete(ensure_topics(settings, principal_topics(policy, settings)))
    text = settings.policy.read_text(encoding="utf-8")
    history = loop.run_until_complete(history_at_start(settings, policy, text))
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    pipeline = build(settings, policy, history)
    if customize is not None:
        customize(pipeline)
    worker = QuietWorker(
        pipeline.app,
        loop=loop,
        loglevel=settings.log_level,
        redirect_stdouts=False,
        override_logging=False,  # configure_logging above: JSON lines or text
    )
    # Faust's startup spinner sets the root logger to DEBUG so it can spin on every record: every
    # debug call in aiokafka's hot path then builds a LogRecord (measured: ~15% of the worker).
    worker.spinner = None
    try:
        worker.execute_from_commandline()
    except SystemExit as exit_:
        return int(exit_.code or 0)
    return 0


async def publish_lines(settings: Settings, lines: Iterable[str], user_assertions: bool) -> int:
    claims: list[Claim] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            claims.append(parse_claim(json.loads(line)))
        except (json.JSONDecodeError, ClaimstreamError) as exc:
            raise ClaimstreamError(f"line {number}: {exc}") from exc
    async with ClaimPublisher(settings, user_assertions=user_assertions) as publisher:
        return await publisher.publish_many(claims)


TAILS: dict[str, tuple[Callable[[Settings], str], type[Any] | None]] = {
    "decisions": (lambda s: s.topics.decisions, Decision),
    "epoch-changes": (lambda s: s.topics.epoch_changes, EpochChange),
    "reobserve": (lambda s: s.topics.reobserve, ReobserveRequest),
    "escalations": (lambda s: s.topics.escalations, Decision),
    "dead-letters": (lambda s: s.topics.dead_letters, None),
}


async def tail(settings: Settings, stream: str, count: int, timeout: float) -> int:
    topic_of, model = TAILS[stream]
    codec = WireCodec(registry_for(settings))
    consumer = AIOKafkaConsumer(
        topic_of(settings), **client_options(settings), auto_offset_reset="earliest"
    )
    await consumer.start()
    seen = 0
    try:
        while count == 0 or seen < count:
            batch = await consumer.getmany(timeout_ms=int((timeout or 1.0) * 1000))
            if not batch and timeout:
                break
            for messages in batch.values():
                for message in messages:
                    if model is None:
                        line = dead_letter_json(message.key, message.value, message.headers)
                    else:
                        record = codec.decode(model, message.value)
                        line = json.dumps(record.model_dump(mode="json"), sort_keys=True)
                    sys.stdout.write(line + "\n")
                    seen += 1
            sys.stdout.flush()
    finally:
        with contextlib.suppress(Exception):
            await consumer.stop()
    return 0


def dead_letter_json(key: bytes | None, value: bytes | None, headers: Any) -> str:
    """A dead letter as a Rejection-shaped JSON object, from its error headers."""
    errors = {
        k.removeprefix(ERROR_HEADER_PREFIX): v.decode("utf-8", "replace")
        for k, v in headers
        if k.startswith(ERROR_HEADER_PREFIX)
    }
    text = value.decode("utf-8", "replace") if value is not None else None
    return json.dumps(
        {
            "reason": errors.get("reason"),
            "detail": errors.get("detail"),
            "exception": errors.get("exception"),
            "topic": errors.get("topic"),
            "partition": int(errors["partition"]) if "partition" in errors else None,
            "offset": int(errors["offset"]) if "offset" in errors else None,
            "rejected_at": errors.get("rejected_at"),
            "key": key.decode("utf-8", "replace") if key is not None else None,
            "raw_value": text,
        },
        sort_keys=True,
    )
