#!/usr/bin/env bash
# Set up a fresh machine and run every check: lint, format, types, and the test suite
# (unit, property, and integration tests against real brokers this suite starts itself).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh

echo "== ruff"; .venv/bin/ruff check streams tests grafana
.venv/bin/ruff format --check streams tests grafana
echo "== mypy"; .venv/bin/mypy streams
echo "== pytest"; .venv/bin/python -m pytest "$@"
