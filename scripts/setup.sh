#!/usr/bin/env bash
# Installs what claimstream needs into .venv (idempotent). Sourced by test.sh and main.sh.
# Then compiles the core with mypyc in place when a C compiler is there (build_backend/inplace.py;
# CLAIMSTREAM_USE_MYPYC=1 requires the compile, =0 keeps everything interpreted).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
if [ ! -f .venv/.installed ] || [ pyproject.toml -nt .venv/.installed ]; then
    .venv/bin/python -m pip install --quiet --upgrade pip
    # The editable install itself stays pure Python: the in-place compile below owns the switch.
    CLAIMSTREAM_USE_MYPYC=0 .venv/bin/python -m pip install --quiet -e '.[dev]'
    touch .venv/.installed
fi
.venv/bin/python -m build_backend.inplace
