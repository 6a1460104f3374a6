#!/usr/bin/env bash
# Installs what claimstream needs into .venv (idempotent). Sourced by test.sh and main.sh.
# Then compiles the core with mypyc in place when a C compiler is there (build_backend/inplace.py;
# CLAIMSTREAM_USE_MYPYC=1 requires the compile, =0 keeps everything interpreted).
# It says what it does in a line a step; the tools' own output goes to .venv/setup.log, which is
# printed only when a step fails.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [ ! -x .venv/bin/python ]; then
    echo "== creating .venv"
    python3 -m venv .venv
fi
SETUP_LOG=.venv/setup.log
: >"$SETUP_LOG"

# Runs a command with its output in the log; when it fails, prints the log and fails.
logged() {
    if ! "$@" >>"$SETUP_LOG" 2>&1; then
        echo "== failed: $*; its output ($SETUP_LOG):" >&2
        cat "$SETUP_LOG" >&2
        return 1
    fi
}

if [ ! -f .venv/.installed ] || [ pyproject.toml -nt .venv/.installed ]; then
    echo "== installing claimstream and its dependencies into .venv (the first time: a few minutes)"
    logged .venv/bin/python -m pip install --quiet --upgrade pip
    # The editable install itself stays pure Python: the in-place compile below owns the switch.
    CLAIMSTREAM_USE_MYPYC=0 logged .venv/bin/python -m pip install --quiet -e '.[dev]'
    touch .venv/.installed
fi
# The compile says what it does in lines of its own (`setup: ...`), shown here as `== ...`;
# mypyc's and the C compiler's output stays in the log.
if ! .venv/bin/python -m build_backend.inplace 2>&1 | tee -a "$SETUP_LOG" \
    | sed -un 's/^setup: compiling with mypyc.*/== compiling the core with mypyc (the first time: a few minutes)/p; s/^setup: /== /p'; then
    echo "== failed: python -m build_backend.inplace; its output ($SETUP_LOG):" >&2
    cat "$SETUP_LOG" >&2
    return 1 2>/dev/null || exit 1
fi
