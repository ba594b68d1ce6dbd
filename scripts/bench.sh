#!/usr/bin/env bash
# Benchmarks: speed and memory are measured here, not asserted by tests.
#   scripts/bench.sh            run every benchmark
#   scripts/bench.sh NAME...    run some (e.g. simulator)
#
# One function per benchmark, named bench_<name>; each builds what it needs
# and prints one result line starting with "<name>:". Add a section by
# adding a function (it is picked up by name; no list to edit).
set -euo pipefail
cd "$(dirname "$0")/.."

# The device simulator on an ipu21-sized GEMM program: the so400m MLP
# up-projection (729x1152x4304, FP8, 3.61 G MACs) split over 1,458 tiles
# with a reduce-scatter of K partials. Reports host seconds per run and
# simulated MACs per second of host time (the so400m MLP block, 7.22 G MACs,
# should simulate in seconds).
bench_simulator() {
  bazel build --noshow_progress --ui_event_filters=-info //kernels:simulator_bench
  bazel-bin/kernels/simulator_bench --threads=2 --runs=3
}

# The reference executor on the so400m MLP block (batch 1): host seconds.
bench_reference() {
  bazel build --noshow_progress --ui_event_filters=-info \
    //tools/import-model //tools/run-reference
  local dir
  dir=$(mktemp -d)
  bazel-bin/tools/import-model/import-model -o "$dir/mlp.tilec"
  local start end
  start=$(date +%s.%N)
  bazel-bin/tools/run-reference/run-reference "$dir/mlp.tilec" -o /dev/null
  end=$(date +%s.%N)
  rm -rf "$dir"
  awk -v s="$start" -v e="$end" 'BEGIN { printf "reference: so400m MLP block (7.22 G MACs) in %.2f s host\n", e - s }'
}

# plan-ownership on the so400m MLP block (batch 1, ipu21), F16 and with
# GEMM inputs priced as FP8 (--gemm_dtype=fp8): the chosen GEMM splits and
# staging, per-op estimated cycles, total and peak bytes per tile against
# MACHINE.md's FP8 compute floor (38,366 cycles); host time for 0, 64 and
# 1,000 attempts; and the trace's pinned plan
# (testdata/plan-ownership/siglip-trace.recipe) against the searched one.
bench_planner() {
  bazel build -c opt --noshow_progress --ui_event_filters=-info \
    //tools/import-model //tools/plan-ownership //tools/dump-ir
  local bin=bazel-bin/tools dir
  dir=$(mktemp -d)
  "$bin/import-model/import-model" -o "$dir/mlp.tilec"
  local dtype attempts start end
  for dtype in f16 fp8; do
    local flag=""
    [ "$dtype" = fp8 ] && flag=--gemm_dtype=fp8
    for attempts in 0 64 1000; do
      start=$(date +%s.%N)
      "$bin/plan-ownership/plan-ownership" $flag --attempts=$attempts \
        "$dir/mlp.tilec" -o "$dir/$dtype-$attempts.tilec" 2>"$dir/log"
      end=$(date +%s.%N)
      awk -v s="$start" -v e="$end" -v d="$dtype" -v a="$attempts" \
        -v line="$(tail -n 1 "$dir/log" | sed 's/^plan-ownership: //')" \
        'BEGIN { printf "planner: %s, --attempts=%d: %.2f s host; %s\n", d, a, e - s, line }'
    done
    "$bin/plan-ownership/plan-ownership" $flag --attempts=1000 \
      --recipe=testdata/plan-ownership/siglip-trace.recipe \
      "$dir/mlp.tilec" -o "$dir/$dtype-trace.tilec" 2>/dev/null
    local plan
    for plan in 1000 trace; do
      "$bin/dump-ir/dump-ir" "$dir/$dtype-$plan.tilec" | awk -v d="$dtype" -v p="$plan" '
        /^ops:/ { on = 1; next }
        /^pass / { on = 0 }
        on && /est cycles=/ {
          id = $1; kind = $2; name = $3
          recipe = $0; sub(/.*recipe=/, "", recipe); sub(/ \| est.*/, "", recipe)
          sub(/ "[^"]*"/, "", recipe)
          est = $0; sub(/.* est cycles=/, "", est); split(est, f, " ")
          cycles = f[1]; total += cycles
          peak = $0; sub(/.* peak=/, "", peak); if (peak + 0 > max) max = peak + 0
          printf "planner:   %s %-6s %-12s %-62s %8d cycles\n", (p == "trace" ? "trace " : "search"), id, kind, recipe, cycles
        }
        END {
          printf "planner: %s %s plan: total %d cycles, peak %d B per tile of 481152; FP8 compute floor 38366 (MACHINE.md), hardware MLP block 151998\n", d, (p == "trace" ? "trace-pinned" : "searched (1000 attempts)"), total, max
        }'
    done
  done
  rm -rf "$dir"
}

# ---------------------------------------------------------------- driver

main() {
  local names=("$@")
  if [ ${#names[@]} -eq 0 ]; then
    mapfile -t names < <(declare -F | awk '{print $3}' | sed -n 's/^bench_//p')
  fi
  local failed=0
  for name in "${names[@]}"; do
    if ! declare -F "bench_$name" >/dev/null; then
      echo "bench.sh: no benchmark '$name'" >&2
      failed=1
      continue
    fi
    "bench_$name" || { echo "$name: FAILED" >&2; failed=1; }
  done
  return $failed
}

main "$@"
