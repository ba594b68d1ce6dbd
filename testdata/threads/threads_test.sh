#!/usr/bin/env bash
# threads_test.sh TOOLS_DIR [import-model flags...]
# The host thread count changes no output byte (docs/architecture.md,
# "Conventions of every tool"): the model through the pipeline once, then
# every tool that takes --threads run with 1 and with 2 on the same input,
# their outputs compared with cmp: quantize-fp8 (its calibration and
# accuracy runs, and the unquantized graph planned beside them with 2),
# run-reference, simulate-device's text and JSON reports (execution on the
# tile threads), inspect-gemms and inspect-program (the simulator's timing
# run).
set -euo pipefail
. scripts/lib/pipeline.sh
tools=$1
shift
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
tilec_tool "$tools" import-model "$@" -o "$out/0.tilec"
for n in 1 2; do
  tilec_tool "$tools" quantize-fp8 --threads=$n "$out/0.tilec" -o "$out/q$n.tilec"
  tilec_tool "$tools" dump-ir "$out/q$n.tilec" -o "$out/q$n.txt"
done
# The flag itself is recorded in the pass's log: the rest must be equal.
diff <(grep -v -- '--threads=' "$out/q1.txt") <(grep -v -- '--threads=' "$out/q2.txt")
# shellcheck disable=SC2046
program=$(tilec_run_passes "$tools" "$out" "$out/q2.tilec" 2 $(tilec_passes_after quantize-fp8))
for n in 1 2; do
  tilec_tool "$tools" run-reference --threads=$n "$out/q2.tilec" -o "$out/reference$n.txt"
  tilec_tool "$tools" simulate-device --threads=$n "$program" -o "$out/sim$n.txt"
  tilec_tool "$tools" simulate-device --threads=$n --report=json "$program" -o "$out/sim$n.json"
  tilec_tool "$tools" inspect-gemms --threads=$n "$program" -o "$out/gemms$n.txt"
done
for n in 1 2; do
  tilec_tool "$tools" inspect-program --threads=$n "$program" \
    --simulation="$out/sim1.json" -o "$out/page$n.html"
done
for f in reference sim gemms; do
  cmp "$out/${f}1.txt" "$out/${f}2.txt"
done
cmp "$out/sim1.json" "$out/sim2.json"
cmp "$out/page1.html" "$out/page2.html"
grep -q '^result: PASS' "$out/sim2.txt"
echo "threads 1 and 2: the same bytes from quantize-fp8, run-reference, simulate-device, inspect-gemms and inspect-program"
