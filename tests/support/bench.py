"""A bench worker's settings for the bench phases' tests."""

from __future__ import annotations

import uuid
from pathlib import Path

from streams.devkit.brokers import KafkaBroker, free_port
from streams.settings import Settings
from streams.topic_names import Topics


def bench_settings(kafka: KafkaBroker, tmp_path: Path, prefix: str) -> Settings:
    """A worker's settings on `kafka`, its app id and topics named apart (`prefix` and a tag)."""
    name = f"{prefix}{uuid.uuid4().hex[:6]}"
    return Settings(
        app_id=name,
        broker=f"kafka://{kafka.bootstrap}",
        partitions=2,
        topics=Topics(**{k: f"{name}.{v}" for k, v in Topics().model_dump().items()}),
        web_port=free_port(),
        data_dir=tmp_path / "state",
        log_level="info",
    )
