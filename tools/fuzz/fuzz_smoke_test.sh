#!/usr/bin/env bash
# The CI smoke run of every fuzz target (tools/fuzz/BUILD): build it with the
# sanitizers and run a fixed number of inputs from its seed corpus and
# libFuzzer's mutations (not a timed run). Skips, saying why, when
# clang++-14 or libFuzzer is missing.
set -euo pipefail
runs=${FUZZ_SMOKE_RUNS:-300}
# By default ir, target and safetensors, which share most of their sources
# (formats/): the sanitizer build of the other targets' ~70 sources takes
# most of an hour on a loaded 2-core machine. FUZZ_SMOKE_TARGETS (--test_env)
# names others, e.g. "onnx npy policy simulation device_program recipe
# checkpoint"; scripts/fuzz.sh runs any one.
targets=${FUZZ_SMOKE_TARGETS:-ir target safetensors}
. scripts/lib/fuzz.sh
if ! command -v "$FUZZ_CXX" >/dev/null; then
  echo "SKIPPED: $FUZZ_CXX not found (scripts/install-deps.sh installs clang-14 and libclang-rt-14-dev)"
  exit 0
fi
if ! ls /usr/lib/llvm-14/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1; then
  echo "SKIPPED: libFuzzer runtime not found (libclang-rt-14-dev)"
  exit 0
fi
# Runfiles are links into the workspace: the sources are compiled from there.
root=$(cd "$(dirname "$(readlink -f tools/fuzz/ir_fuzz.cc)")/../.." && pwd)
gen=$PWD
work=${TEST_TMPDIR:-$(mktemp -d)}
failed=0
for target in $targets; do
  echo "== $target"
  fuzz_build "$target" "$root" "$gen" "tools/fuzz/${target}_sources" \
    "$work/obj" "$work/bin/${target}_fuzz"
  fuzz_seeds "$target" "$root" "$PWD/tools" "$PWD/testdata/untrusted/make_hostile" \
    "$work/$target/seeds"
  export TILEC_FUZZ_GRAPH=$work/$target/checkpoint-graph.tilec
  fuzz_run "$work/bin/${target}_fuzz" "$work/$target/corpus" \
    "$work/$target/seeds" "$work/$target/crashes" "$work/$target.log" \
    "-runs=$runs" || failed=1
done
exit $failed
