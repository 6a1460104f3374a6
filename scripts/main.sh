#!/usr/bin/env bash
# Set up a fresh machine and run the main job.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
exec .venv/bin/claimstream replay --policy examples/policy.yaml --now 2026-11-29T12:00:00Z \
    --resolutions examples/resolutions.jsonl --rejected /dev/stderr examples/claims.jsonl "$@"
