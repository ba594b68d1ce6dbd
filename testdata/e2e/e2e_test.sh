#!/usr/bin/env bash
# e2e_test.sh TOOLS_DIR RECIPE|- [import-model flags...]
# The whole pipeline through the tools, as scripts/compile.sh runs it:
# import-model -> plan-ownership -> expand-reduce -> emit-device, then
# simulate-device against the reference with its default tolerances
# (docs/device-program.md). Also checks that the emitted program's
# predicted cycles (emit-device's "program" decision) are exactly what the
# simulator counts, and that inspect-exchanges and inspect-program read
# the program.
set -euo pipefail
tools=$1 recipe=$2
shift 2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
run() { local t=$1; shift; "$tools/$t/$t" "$@"; }
run import-model --target=tiny "$@" -o "$out/0.tilec"
plan_flags=(--attempts=16)
[ "$recipe" != - ] && plan_flags+=(--recipe="$recipe")
run plan-ownership "${plan_flags[@]}" "$out/0.tilec" -o "$out/1.tilec" 2>/dev/null
run expand-reduce "$out/1.tilec" -o "$out/2.tilec"
run emit-device "$out/2.tilec" -o "$out/3.tilec"
status=0
run simulate-device "$out/3.tilec" -o "$out/report.txt" || status=$?
cat "$out/report.txt"
[ "$status" -eq 0 ] || { echo "simulate-device exited $status" >&2; exit 1; }
predicted=$(run dump-ir "$out/3.tilec" | sed -n 's/.*info () "program".* cycles [0-9]* -> \([0-9]*\) bytes.*/\1/p')
simulated=$(sed -n 's/^total: \([0-9]*\) cycles.*/\1/p' "$out/report.txt")
echo "predicted $predicted, simulated $simulated"
[ -n "$predicted" ] && [ "$predicted" = "$simulated" ] || { echo "emit-device predicted $predicted cycles, simulator counted $simulated" >&2; exit 1; }
run inspect-exchanges "$out/3.tilec" --transfers=none -o "$out/exchanges.txt"
grep -q '^totals: ' "$out/exchanges.txt"
# The report page accepts the simulator's report of the same program.
run simulate-device "$out/3.tilec" --report=json -o "$out/report.json"
run inspect-program "$out/3.tilec" --simulation="$out/report.json" -o "$out/page.html"
grep -q '"simulation":{"file":' "$out/page.html"
