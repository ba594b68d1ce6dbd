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
