#!/usr/bin/env bash
# e2e_test.sh TOOLS_DIR RECIPE|- [import-model flags...]
# The whole pipeline through the tools, as scripts/compile.sh runs it
# (import-model, then every pass of passes/pipeline/PIPELINE), then
# simulate-device against the reference with its default tolerances
# (docs/device-program.md). Also checks that the emitted program's
# predicted cycles (emit-device's "program" decision) are exactly what the
# simulator counts, and that inspect-exchanges and inspect-program read
# the program.
set -euo pipefail
. scripts/lib/pipeline.sh
tools=$1 recipe=$2
shift 2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
tilec_tool "$tools" import-model --target=tiny "$@" -o "$out/0.tilec"
PLAN_OWNERSHIP_FLAGS="--attempts=16"
[ "$recipe" != - ] && PLAN_OWNERSHIP_FLAGS+=" --recipe=$recipe"
export PLAN_OWNERSHIP_FLAGS
# shellcheck disable=SC2046
program=$(tilec_run_passes "$tools" "$out" "$out/0.tilec" 1 $(tilec_passes) 2>"$out/passes.log") ||
  { cat "$out/passes.log" >&2; exit 1; }
status=0
tilec_tool "$tools" simulate-device "$program" -o "$out/report.txt" || status=$?
cat "$out/report.txt"
[ "$status" -eq 0 ] || { echo "simulate-device exited $status" >&2; exit 1; }
predicted=$(tilec_tool "$tools" dump-ir "$program" | sed -n 's/.*info () "program".* cycles [0-9]* -> \([0-9]*\) bytes.*/\1/p')
simulated=$(sed -n 's/^total: \([0-9]*\) cycles.*/\1/p' "$out/report.txt")
echo "predicted $predicted, simulated $simulated"
[ -n "$predicted" ] && [ "$predicted" = "$simulated" ] || { echo "emit-device predicted $predicted cycles, simulator counted $simulated" >&2; exit 1; }
tilec_tool "$tools" inspect-exchanges "$program" --transfers=none -o "$out/exchanges.txt"
grep -q '^totals: ' "$out/exchanges.txt"
# The report page accepts the simulator's report of the same program.
tilec_tool "$tools" simulate-device "$program" --report=json -o "$out/report.json"
tilec_tool "$tools" inspect-program "$program" --simulation="$out/report.json" -o "$out/page.html"
grep -q '"simulation":{"file":' "$out/page.html"
