#!/usr/bin/env bash
# e2e_test.sh TOOLS_DIR RECIPE|- [--f16] [--expect-unicast] [import-model flags... | --module=PATH]
# The whole pipeline through the tools, as scripts/compile.sh runs it
# (import-model, then every pass of passes/pipeline/PIPELINE: FP8 GEMMs
# from quantize-fp8 unless --f16 comes first), then
# simulate-device against the reference with its default tolerances
# (docs/device-program.md). Also checks that the emitted program's
# predicted cycles (emit-device's "program" decision) are exactly what the
# simulator counts, that inspect-exchanges and inspect-program read the
# program, and that the page's GEMM MACs counted from the graph equal the
# simulator's.
set -euo pipefail
. scripts/lib/pipeline.sh
tools=$1 recipe=$2
shift 2
# --f16 first: the F16 pipeline (quantize-fp8 --fp8=false); FP8 otherwise.
if [ "${1:-}" = --f16 ]; then
  export QUANTIZE_FP8_FLAGS=--fp8=false
  shift
fi
# --expect-unicast next: the program must send a Redistribute as unicasts
# (docs/planning.md, "Unicast redistributions").
expect_unicast=0
if [ "${1:-}" = --expect-unicast ]; then
  expect_unicast=1
  shift
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# --module=PATH: that module (with its target) instead of import-model's.
if [ "${1#--module=}" != "${1:-}" ]; then
  cp "${1#--module=}" "$out/0.tilec"
else
  tilec_tool "$tools" import-model --target=tiny "$@" -o "$out/0.tilec"
fi
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
# The quantized graph against the unquantized one (quantize-fp8's accuracy
# decisions; docs/quantize.md, "Accuracy"): every output's cosine at least
# 0.999 and its branch's (output minus residual) at least 0.995.
tilec_tool "$tools" dump-ir "$program" > "$out/program.txt"
awk '/"accuracy of / {
    n++; line = $0
    c = line; sub(/.*graph on the [a-z ]*inputs: cosine /, "", c); sub(/ .*/, "", c)
    b = "1"; if (line ~ /branch/) { b = line; sub(/.*branch [^:]*: cosine /, "", b); sub(/ .*/, "", b) }
    printf "unquantized comparison: output cosine %s, branch cosine %s\n", c, b
    if (c + 0 < 0.999 || b + 0 < 0.995) bad = 1 }
  END { if (bad) { print "FP8 outside the unquantized tolerance" > "/dev/stderr"; exit 1 } }' "$out/program.txt"
if [ "${QUANTIZE_FP8_FLAGS:-}" != --fp8=false ]; then
  grep -q '"accuracy of ' "$out/program.txt" || { echo "quantize-fp8 logged no accuracy" >&2; exit 1; }
fi
if [ "$expect_unicast" = 1 ]; then
  ops=$(sed -n 's/^ *(\([0-9]*\)) redistribute .* unicast | .*/\1/p' "$out/program.txt")
  [ -n "$ops" ] || { echo "no Redistribute went as unicasts" >&2; exit 1; }
  # Unicasts: every byte sent once per receiver, so as many sent as received.
  for op in $ops; do
    tilec_tool "$tools" inspect-exchanges "$program" --op="$op" --transfers=none |
      awk -v op="$op" '/^totals: / { sent = $0; sub(/ B sent.*/, "", sent); sub(/.* /, "", sent)
          got = $0; sub(/ B received.*/, "", got); sub(/.* /, "", got)
          if (sent != got) { print "op " op " multicasts: " sent " B sent, " got " B received" > "/dev/stderr"; exit 1 } }'
  done
fi
tilec_tool "$tools" inspect-exchanges "$program" --transfers=none -o "$out/exchanges.txt"
grep -q '^totals: ' "$out/exchanges.txt"
# The report page accepts the simulator's report of the same program.
tilec_tool "$tools" simulate-device "$program" --report=json -o "$out/report.json"
tilec_tool "$tools" inspect-program "$program" --simulation="$out/report.json" -o "$out/page.html"
grep -q '"simulation":{"file":' "$out/page.html"
# The throughput's GEMM MACs, counted from the graph's shapes, are what
# the program's GEMM calls did (the simulator's count in the summary).
macs=$(sed -n 's/^"summary":.*"gemm_macs":\([0-9]*\),.*/\1/p' "$out/page.html")
grep -q "^\"throughput\":{.*\"gemm_macs\":$macs," "$out/page.html" ||
  { echo "the graph's GEMM MACs are not the simulator's $macs" >&2; grep '^"throughput"' "$out/page.html" >&2; exit 1; }
