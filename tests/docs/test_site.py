"""The documentation site builds strictly: a broken link or anchor, a page missing from the
navigation or a snippet that names no file fails `mkdocs build --strict`, and so this test."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    site = tmp_path / "site"
    build = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        timeout=300,
    )
    assert build.returncode == 0, build.stderr + build.stdout
    for page in ("settings", "cli", "metrics", "web-api", "records", "rules", "alerts"):
        assert (site / "reference" / page / "index.html").exists(), page
    assert (site / "reference" / "policy-file" / "index.html").exists()
    assert (site / "reference" / "policy.schema.json").exists()  # the policy page links it
    assert not (site / "hooks").exists()  # the build hook is not published
