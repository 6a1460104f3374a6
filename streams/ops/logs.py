"""Worker logs: one JSON object per line for log collectors, or text for people (`claimstream dev`).

A JSON line carries the time, level, logger and message, plus the `extra` fields a call site adds
(`reason`, `topic`, `partition`, `offset`): reason codes a collector can count. A traceback stays
on its line (as the `exception` string). Call sites log reason codes, offsets and exception class
names, never claim values: a log line is no place for the data being reconciled.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import TextIO

from mode.utils.logging import level_number

from streams.settings import LogFormat

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
_RECORD_ATTRIBUTES = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        event = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        event |= {k: v for k, v in vars(record).items() if k not in _RECORD_ATTRIBUTES}
        if record.exc_info:
            event["exception"] = self.formatException(record.exc_info)
        return json.dumps(event, default=str, ensure_ascii=False)


def configure_logging(level: str, log_format: LogFormat, stream: TextIO | None = None) -> None:
    """Send every log record to `stream` (stderr) as JSON lines or text, from `level` up."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(
        JsonFormatter() if log_format is LogFormat.JSON else logging.Formatter(TEXT_FORMAT)
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level_number(level))
