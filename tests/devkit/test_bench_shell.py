"""The shell bench's at-size probe updates keys the decoded cache no longer holds, each read
from the disk store, and answers each as the worker would."""

from __future__ import annotations

import time
from pathlib import Path

from streams.devkit.bench.shell import SHOWN, at_size
from streams.settings import Settings


def test_the_probe_at_size_decodes_the_keys_the_cache_no_longer_holds(tmp_path: Path) -> None:
    settings = Settings(state_cache_keys=20)
    figures = at_size(settings, 300, 60, tmp_path, time.perf_counter)
    assert figures["keys"] == 300
    assert figures["claims"] == 60
    assert figures["decoded"] >= 40  # at most the cache's 20 were still decoded
    assert set(figures["stage_us"]) == set(SHOWN)
    assert figures["stage_us"]["write"] > 0
