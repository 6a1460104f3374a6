"""Generate claimstream's Grafana dashboards (stdlib only).

    python grafana/generate.py           # rewrite grafana/dashboards/*.json
    python grafana/generate.py --check   # exit 1 if the committed JSON differs from this output

The JSON is committed and provisioned by Grafana as is (grafana/provisioning/dashboards/);
tests/ops/test_dashboards.py fails when it drifts from this generator.

Every query reads the raw worker metrics (streams/ops/metrics.py), so the dashboards work on any
Prometheus that scrapes the workers, with or without the alert rules; the one exception is the
field drill-down's baseline panel, which shows the very series the surge page reads. The
conflict-rate expressions are the same ratios the rules record
(deploy/prometheus/rules/claimstream.rules.yml).

Every dashboard picks its Prometheus (`$datasource`, no hard-coded uid) and its environment
(`$job`, `$namespace`): `scoped()` (boards/kit.py) adds those matchers to every metric selector
of every query. The dashboards are built in `boards/`, one function a row or group of panels.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from boards.field import field_dashboard
from boards.overview import overview

DASHBOARDS = Path(__file__).resolve().parent / "dashboards"


def build() -> dict[str, str]:
    """File name -> JSON text of every dashboard."""
    boards = {
        "claimstream-overview.json": overview(),
        "claimstream-field.json": field_dashboard(),
    }
    return {
        name: json.dumps(board, indent=2, sort_keys=False) + "\n" for name, board in boards.items()
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare, do not write")
    args = parser.parse_args(argv)
    stale = []
    for name, text in build().items():
        path = DASHBOARDS / name
        if args.check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(name)
        else:
            DASHBOARDS.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    if stale:
        print(f"out of date, run python grafana/generate.py: {', '.join(stale)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
