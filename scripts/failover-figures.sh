#!/usr/bin/env bash
# How long a key goes undecided while its worker fails over: runs the fail-over scenarios (the
# tests marked failover: a worker SIGKILLed and restarted, SIGKILLed for good, stopped cleanly,
# and the broker leading its partitions killed; each under both guarantees) RUNS times and
# prints, per scenario, the p50 and the max over the runs of the checker's max_pause_s (the
# longest any partition's input waited with no decision coming out):
#
#   bash scripts/failover-figures.sh [RUNS] [OUT]     # defaults: 5 runs into failover-runs/
#
# OUT/run-N.log keeps each run's output, OUT/verdicts.txt every checker line. Exits 1 if a run
# failed.
set -u
cd "$(dirname "$0")/.."
runs="${1:-5}"
out="${2:-failover-runs}"
python="${PYTHON:-.venv/bin/python}"
mkdir -p "$out"
: >"$out/verdicts.txt"

failed=0
for n in $(seq 1 "$runs"); do
  "$python" -m pytest -q -s -p no:cacheprovider --basetemp "$out/run-$n" \
    -m failover tests/reliability >"$out/run-$n.log" 2>&1 || failed=1
  grep -h "checker: scenario" "$out/run-$n.log" | tee -a "$out/verdicts.txt"
  tail -n 1 "$out/run-$n.log"
done
"$python" - "$out/verdicts.txt" <<'SUMMARY'
import re, statistics, sys
pauses = {}
for line in open(sys.argv[1]):
    if found := re.search(r"scenario=(\S+) .*max_pause_s=([\d.]+)", line):
        pauses.setdefault(found[1], []).append(float(found[2]))
print(f"{'scenario':44} {'runs':>4} {'p50 s':>6} {'max s':>6}")
for scenario, seen in sorted(pauses.items()):
    print(f"{scenario:44} {len(seen):>4} {statistics.median(seen):>6.1f} {max(seen):>6.1f}")
SUMMARY
exit "$failed"
