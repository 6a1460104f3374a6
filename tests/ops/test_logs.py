"""Log lines: one JSON object per line (tracebacks included), or text for people."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Callable

from streams.ops.logs import configure_logging
from streams.settings import LogFormat, load_settings


def logged(log_format: LogFormat, emit: Callable[[logging.Logger], None]) -> list[str]:
    stream = io.StringIO()
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    try:
        configure_logging("info", log_format, stream)
        emit(logging.getLogger("streams.pipeline"))
    finally:
        root.handlers[:], root.level = saved[0], saved[1]
    return stream.getvalue().splitlines()


def test_json_lines_carry_level_logger_message_and_extra_fields() -> None:
    def emit(log: logging.Logger) -> None:
        log.debug("below the level")
        log.info(
            "dead letter %s[%d]@%d: %s",
            "claims.tools",
            3,
            17,
            "unit_mismatch",
            extra={"reason": "unit_mismatch", "attempts": 1},
        )

    (line,) = logged(LogFormat.JSON, emit)
    event = json.loads(line)
    assert event.pop("ts").endswith("+00:00")
    assert event == {
        "level": "info",
        "logger": "streams.pipeline",
        "message": "dead letter claims.tools[3]@17: unit_mismatch",
        "reason": "unit_mismatch",
        "attempts": 1,
    }


def test_a_traceback_stays_on_its_line() -> None:
    def emit(log: logging.Logger) -> None:
        try:
            raise ValueError("boom")
        except ValueError:
            log.exception("batch failed")

    (line,) = logged(LogFormat.JSON, emit)
    event = json.loads(line)
    assert event["level"] == "error"
    assert event["exception"].startswith("Traceback")
    assert "ValueError: boom" in event["exception"]


def test_text_for_people() -> None:
    (line,) = logged(LogFormat.TEXT, lambda log: log.warning("arbiter: offset commit failed"))
    assert line.endswith(" WARNING streams.pipeline: arbiter: offset commit failed")
    assert not line.startswith("{")


def test_the_default_level_shows_the_lines_the_runbook_tells_an_operator_to_watch() -> None:
    stream = io.StringIO()
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    try:
        configure_logging(load_settings(env={}).log_level, LogFormat.JSON, stream)
        tasks = logging.getLogger("streams.arbiter.tasks")
        tasks.info("arbiter: tasks %s ready in %.2fs (%d keys)", [0, 1], 1.5, 20)
        tasks.info("arbiter: task %d caught up to changelog offset %d (end %d)", 1, 40, 40)
        tasks.debug("below the default level")
    finally:
        root.handlers[:], root.level = saved[0], saved[1]
    messages = [json.loads(line)["message"] for line in stream.getvalue().splitlines()]
    assert messages == [
        "arbiter: tasks [0, 1] ready in 1.50s (20 keys)",
        "arbiter: task 1 caught up to changelog offset 40 (end 40)",
    ]
