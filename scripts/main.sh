#!/usr/bin/env bash
# Set up a fresh machine and run the main job: `claimstream dev` starts the bundled broker
# (Tansu, no JVM), a worker and a demo feed, prints decisions and serves the web API and
# /metrics on http://127.0.0.1:6066/ until Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
echo "== starting claimstream dev: the bundled broker, a worker and a demo feed (Ctrl-C stops them)"
exec .venv/bin/claimstream dev "$@"
