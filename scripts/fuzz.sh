#!/usr/bin/env bash
# Builds and runs one libFuzzer target of tools/fuzz/ with AddressSanitizer
# and UndefinedBehaviorSanitizer (clang++-14; scripts/install-deps.sh
# installs clang-14 and libclang-rt-14-dev).
#
#   scripts/fuzz.sh TARGET SECONDS    run for SECONDS
#   scripts/fuzz.sh TARGET -runs=N    run N inputs (what the smoke test does)
#   scripts/fuzz.sh --list            the targets
#
# TARGET: ir (IR reader + verifier), device_program (the device-program
# verifier), recipe (--recipe and --explain parsers), checkpoint (the
# --resume reader), onnx (import-onnx, external data in a sandbox),
# safetensors (--weights), npy (.npy files and --inputs / --calibration
# directories), policy (--policy), target (target JSON), simulation
# (inspect-program --simulation). Seeds come from testdata/ and small
# modules made by the tools; inputs that add coverage stay in
# $FUZZ_DIR/corpus/TARGET, crashes go to $FUZZ_DIR/crashes/TARGET
# (FUZZ_DIR: /tmp/tilec-fuzz). Ends with libFuzzer's last status line
# (executions, cov:, ft:).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
. scripts/lib/fuzz.sh
if [ "${1:-}" = --list ]; then echo "$FUZZ_TARGETS"; exit 0; fi
[ $# -eq 2 ] || { sed -n '2,19p' "$0" >&2; exit 2; }
target=$1 budget=$2
case " $FUZZ_TARGETS " in
  *" $target "*) ;;
  *) echo "fuzz.sh: unknown target $target (targets: $FUZZ_TARGETS)" >&2; exit 2 ;;
esac
command -v "$FUZZ_CXX" >/dev/null || {
  echo "fuzz.sh: $FUZZ_CXX not found (scripts/install-deps.sh installs clang-14 and libclang-rt-14-dev)" >&2
  exit 2
}
FUZZ_DIR=${FUZZ_DIR:-/tmp/tilec-fuzz}
# The tools fuzz_seeds runs: the pipeline's passes (PIPELINE) and their ends.
mapfile -t tools < <(echo import-model; tilec_passes; echo simulate-device)
bazel build --noshow_progress "//tools/fuzz:${target}_sources" \
  //formats:tilec_fbs_gen //formats:embedded_gen "${tools[@]/#/\/\/tools\/}" \
  //testdata/untrusted:make_hostile >&2
gen=$(bazel info bazel-bin 2>/dev/null)
fuzz_build "$target" "$root" "$gen" "$gen/tools/fuzz/${target}_sources" \
  "$FUZZ_DIR/obj" "$FUZZ_DIR/bin/${target}_fuzz"
rm -rf "$FUZZ_DIR/$target/seeds"
fuzz_seeds "$target" "$root" "$gen/tools" "$gen/testdata/untrusted/make_hostile" \
  "$FUZZ_DIR/$target/seeds"
export TILEC_FUZZ_GRAPH=$FUZZ_DIR/$target/checkpoint-graph.tilec
fuzz_run "$FUZZ_DIR/bin/${target}_fuzz" "$FUZZ_DIR/corpus/$target" \
  "$FUZZ_DIR/$target/seeds" "$FUZZ_DIR/crashes/$target" \
  "$FUZZ_DIR/$target.log" "$budget"
echo "fuzz.sh: $target clean"
