#!/usr/bin/env bash
# Runs the exactly-once fault scenarios (the tests marked exactly_once_faults: SIGKILL x2, leader
# kill, local-store SIGKILL, rejoin during restore) RUNS times in a row beside a process spinning one core
# (a CI machine is slower and noisier than an idle one), keeping each run's worker logs and the
# checker's verdict:
#
#   bash scripts/repeat-exactly-once.sh [RUNS] [OUT]     # defaults: 20 runs into eos-runs/
#
# OUT/run-N/ holds the run's pytest temp folders (each worker's log beside its data dir) and
# OUT/run-N.log its output; OUT/verdicts.txt gathers every run's `checker:` lines. Exits 1 if any
# run failed or any checker line says duplicates, lost or repeated_dead_letters other than 0.
set -u
cd "$(dirname "$0")/.."
runs="${1:-20}"
out="${2:-eos-runs}"
python="${PYTHON:-.venv/bin/python}"
mkdir -p "$out"
: >"$out/verdicts.txt"

"$python" -c 'while True: pass' &
spinner=$!
trap 'kill "$spinner" 2>/dev/null' EXIT

failed=0
for n in $(seq 1 "$runs"); do
  "$python" -m pytest -q -s -p no:cacheprovider --basetemp "$out/run-$n" \
    -m exactly_once_faults tests/reliability >"$out/run-$n.log" 2>&1 || failed=1
  grep -h "checker: scenario" "$out/run-$n.log" | sed "s/^/run $n: /" | tee -a "$out/verdicts.txt"
  tail -n 1 "$out/run-$n.log" | sed "s/^/run $n: pytest /" | tee -a "$out/verdicts.txt"
done
if grep -Eq "duplicates=[1-9]|lost=[1-9]|repeated_dead_letters=[1-9]" "$out/verdicts.txt"; then
  failed=1
fi
echo "repeat-exactly-once: $runs runs; see $out/verdicts.txt" >&2
exit "$failed"
