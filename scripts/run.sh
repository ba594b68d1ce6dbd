#!/usr/bin/env bash
# The main job: compile the default model (SigLIP so400m MLP block, batch 1,
# ipu21) through every stage, FP8 GEMMs by default (quantize-fp8), run the
# device program in simulate-device against the reference, and print
# simulated cycles, time at the target's clock, the throughput (cycles per
# image, images per second, the fraction of the FP8 peak), the planner's
# estimate and the accuracy against the quantized graph's reference and the
# unquantized graph.
#   scripts/run.sh [OUT_DIR] [--f16] [import-model flags...]
#   scripts/run.sh OUT_DIR [--f16] --onnx=MODEL.onnx [--inputs=DIR]
#                  [--expect=DIR] [import-onnx flags, e.g. --batch=N]
# --onnx and every importer flag go to scripts/compile.sh (the default
# pipeline). --inputs=DIR: the graph inputs as .npy (sim/inputs.h),
# simulated on and, FP8, calibrated on (quantize-fp8 --calibration);
# otherwise the inputs' seeded ones. --expect=DIR: one float32 .npy per
# graph output, named after it (e.g. PyTorch's), each compared with the
# simulated output: cosine and max abs error in the report, exit 3 past
# simulate-device's tolerance (docs/import-onnx.md, "One command").
# SIMULATE_DEVICE_FLAGS adds simulate-device flags. A whole model
# (--part=model, or any --onnx model) ends in a head after its last
# LayerNorm, where nothing
# hides the FP8 error of every layer before it: it is held to its own
# floor against the unquantized graph, cosine 0.99 (the seed's compiler
# measured 0.9942 on the same random-weight model; docs/quantize.md),
# instead of the one block's 0.999.
# Every stage's file stays in OUT_DIR (default out/siglip-mlp), with the
# simulator's report in simulate.txt (simulate.json) and the report page in
# report.html. Exit status: compile.sh's, or
# simulate-device's (3 when an output is outside tolerance). A relative
# OUT_DIR is taken in the caller's directory (the default in the
# repository's); the OUT_DIR is locked for the whole run (compile.sh).
set -euo pipefail
caller=$PWD
cd "$(dirname "$0")/.."
repo=$PWD
# shellcheck source=lib/pipeline.sh
. scripts/lib/pipeline.sh
if [ $# -gt 0 ]; then
  out=$(tilec_out_dir run.sh "$caller" "$1")
  shift
else
  out=$PWD/out/siglip-mlp
fi
tilec_lock_out run.sh "$out"
[ -n "${TILEC_TOOLS:-}" ] || scripts/install-deps.sh
# shellcheck disable=SC2206
sim_flags=(${SIMULATE_DEVICE_FLAGS:-})
compile_flags=()
for flag in "$@"; do
  case $flag in
    --part=model | --onnx=*)
      if [[ " ${sim_flags[*]-} " != *min_unquantized_cosine* ]]; then
        sim_flags+=(--min_unquantized_cosine=0.99)
      fi ;;
  esac
  case $flag in
    --inputs=*)
      inputs=$(tilec_caller_path "$caller" "${flag#--inputs=}")
      sim_flags+=("--inputs=$inputs")
      QUANTIZE_FP8_FLAGS="--calibration=$inputs ${QUANTIZE_FP8_FLAGS:-}"
      export QUANTIZE_FP8_FLAGS ;;
    --expect=*)
      sim_flags+=("--expect=$(tilec_caller_path "$caller" "${flag#--expect=}")") ;;
    *) compile_flags+=("$flag") ;;
  esac
done
start=$(date +%s.%N)
# From the caller's directory, where its relative paths (--onnx, --weights) are.
last=$(cd "$caller" && "$repo/scripts/compile.sh" "$out" ${compile_flags[@]+"${compile_flags[@]}"} | tail -n 1)
compiled=$(date +%s.%N)
bin=${TILEC_TOOLS:-bazel-bin/tools}  # compile.sh built them
status=0
"$bin/simulate-device/simulate-device" ${sim_flags[@]+"${sim_flags[@]}"} "$last" -o "$out/simulate.txt" \
  --json-report="$out/simulate.json" || status=$?
simulated=$(date +%s.%N)
[ -s "$out/simulate.txt" ] || { echo "run.sh: simulate-device wrote no report (exit $status)" >&2; exit "$status"; }
compile_s=$(awk -v a="$start" -v b="$compiled" 'BEGIN { print b - a }')
simulate_s=$(awk -v a="$compiled" -v b="$simulated" 'BEGIN { print b - a }')
# The report page (docs/report.md) with the accuracy from simulate-device's
# JSON report (written by the same run) and the host times measured above.
"$bin/inspect-program/inspect-program" "$last" --simulation="$out/simulate.json" \
  --compile-seconds="$compile_s" --simulate-seconds="$simulate_s" \
  -o "$out/report.html"

echo "== stages in $out"
ls -1 "$out"
echo "== $(sed -n 's/^model: //p' "$out/0-import.txt") on $(sed -n 's/^target: //p' "$out/0-import.txt")"
sed -n '/^ops:/,/^pass /p' "${last%.tilec}.txt" | sed '$d'
# The planner's estimate is the sum of its per-op estimates, a repeat's
# body once per iteration: emit-device's "program" decision states it.
estimate=$(sed -n 's/^  info () "program" .* cycles \([0-9]*\) -> [0-9]*.*/\1/p' "${last%.tilec}.txt" | head -n 1)
clock=$(sed -n 's/^target: .* clock_hz=\([^ ]*\) .*/\1/p' "$out/0-import.txt")
echo "== simulate-device ($out/simulate.txt)"
sed -n '/^total:/,/^slow path/p' "$out/simulate.txt"
sed -n '/^ops (/,/^$/p' "$out/simulate.txt"
sed -n '/^comparison/,$p' "$out/simulate.txt"
# The throughput inspect-program worked out (docs/report.md, "Throughput"):
# the members of its data section's "throughput" line in the page, where
# every top-level key has a line of its own.
throughput=$(sed -n 's/^"throughput":{\(.*\)},$/\1/p' "$out/report.html")
[ -n "$throughput" ] || { echo "run.sh: $out/report.html has no throughput line" >&2; exit 1; }
awk -v sim="$(sed -n 's/^total: \([0-9]*\) cycles.*/\1/p' "$out/simulate.txt")" \
    -v est="$estimate" -v clock="$clock" -v throughput="$throughput" \
    -v tc="$compile_s" -v ts="$simulate_s" '
function thousands(n,   s, out) {
  s = sprintf("%.0f", n)
  while (length(s) > 3) {
    out = "," substr(s, length(s) - 2) out
    s = substr(s, 1, length(s) - 3)
  }
  return s out
}
BEGIN {
  n = split(throughput, members, ",")
  for (i = 1; i <= n; i++) {
    split(members[i], kv, ":")
    gsub(/"/, "", kv[1])
    t[kv[1]] = kv[2]
  }
  peak = sprintf("%.1f %% of FP8 peak (%s GEMM MACs)", 100 * t["fp8_peak_fraction"], thousands(t["gemm_macs"]))
  printf "== summary\n"
  printf "simulated: %d cycles = %.3f us at %.3g GHz\n", sim, sim / clock * 1e6, clock / 1e9
  if (t["batch"] == "null")
    printf "throughput: batch not recorded, %s\n", peak
  else
    printf "throughput: batch %d, %s cycles per image, %.1f images/s at %.3g GHz, %s\n", t["batch"],
      thousands(t["cycles_per_image"]), t["images_per_second"], clock / 1e9, peak
  printf "planner estimate: %d cycles (simulated / estimated = %.3f)\n", est, (est > 0 ? sim / est : 0)
  printf "host time: compile %.1f s, simulate %.1f s\n", tc, ts
}'
grep -E '^result:' "$out/simulate.txt"
# The program matches its own graph's reference (above); quantize-fp8
# measured that graph against the unquantized one (docs/quantize.md).
accuracy=$(sed -n 's/^  info ([0-9, ]*) "accuracy of \(.*\)" reason="against the unquantized graph on the [a-z ]* inputs: \(.*\)" cycles.*/\1: \2/p' "${last%.tilec}.txt")
if [ -n "$accuracy" ]; then
  echo "accuracy against the unquantized graph (quantize-fp8):"
  printf '  %s\n' "$accuracy"
else
  echo "accuracy against the unquantized graph: F16 pipeline, nothing quantized"
fi
echo "report page: $out/report.html"
exit "$status"
