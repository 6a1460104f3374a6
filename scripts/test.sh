#!/usr/bin/env bash
# Set up a fresh machine and run every check: lint, format, types, and the test suite
# (unit, property, and integration tests against real brokers this suite starts itself).
# The suite runs on the modules compiled with mypyc (CLAIMSTREAM_USE_MYPYC=1 unless set to 0),
# then the compiled modules' tests run again on their pure-Python sources
# (CLAIMSTREAM_INTERPRETED=1). The rules table's shortcuts are held equal to it again with ten
# times the examples.
set -euo pipefail
cd "$(dirname "$0")/.."
export CLAIMSTREAM_USE_MYPYC="${CLAIMSTREAM_USE_MYPYC:-1}"
source scripts/setup.sh

echo "== ruff"; .venv/bin/ruff check streams tests grafana
.venv/bin/ruff format --check streams tests grafana
echo "== mypy"; .venv/bin/mypy streams
# The slowest tests are listed at the end: CI runs within a budget, and these are where it goes.
echo "== pytest ($(.venv/bin/claimstream --version))"; .venv/bin/python -m pytest --durations=25 "$@"
# A repeated decision under exactly once is a broken promise, and the faults that could cause one
# are timing: the exactly-once fault scenarios run twice more (three times in all).
for run in 2 3; do
    echo "== pytest, the exactly-once fault scenarios again (run $run of 3)"
    .venv/bin/python -m pytest -q -p no:cacheprovider -m exactly_once_faults tests/reliability
done
echo "== pytest, the shortcuts' equivalence to the rules at 10x the examples"
.venv/bin/python -m pytest -q tests/core/rules/test_shortcuts.py --examples-scale 10
if [ "$CLAIMSTREAM_USE_MYPYC" = 1 ]; then
    echo "== pytest, the compiled modules interpreted"
    CLAIMSTREAM_INTERPRETED=1 .venv/bin/python -m pytest -q -m "not integration" \
        tests/core tests/test_compiled.py tests/wire/test_claim_reader.py \
        tests/wire/test_partitioner.py tests/wire/test_decision_bytes.py \
        tests/wire/test_avro_writer.py tests/pipeline/test_processor.py \
        tests/pipeline/test_emit_retry.py tests/pipeline/test_shell_path.py \
        tests/pipeline/test_alias_paths.py tests/pipeline/test_erasure_paths.py
fi
