#!/usr/bin/env bash
# Chains the tilec stages, keeping every stage's file (and its dump-ir text)
# in OUT_DIR so any stage can be re-run, diffed or bisected on its own:
# 0-import.tilec from import-model (or import-onnx), then <i>-<pass>.tilec
# for each pass of passes/pipeline/PIPELINE in order (today 1-quantize-fp8,
# 2-plan-ownership, 3-fuse-elementwise, 4-fuse-residual, 5-expand-reduce,
# 6-emit-device: the device program). quantize-fp8's greedy plan of its
# output goes to plan-ownership in 1-quantize-fp8.initial-plan.tilec, so that
# it is not planned twice, and the planner's prices go from pass to pass in
# prices.tilec-prices, which stays for the next compile into OUT_DIR
# (scripts/lib/pipeline.sh, tilec_handoff_flags; docs/planner.md, "Price
# cache").
#
#   scripts/compile.sh OUT_DIR [--f16] [import-model flags...]
#   scripts/compile.sh OUT_DIR [--f16] --onnx=MODEL.onnx [import-onnx flags...]
#
# FP8 GEMMs by default; --f16 keeps every value in its dtype. --onnx=MODEL
# imports an ONNX model with import-onnx instead of import-model; every
# other flag goes to the importer as it is (e.g. --batch=N, --dtype=f32).
# Relative paths in --onnx and --weights are taken in the caller's
# directory.
#
# Environment: TARGET (default ipu21); extra flags per pass in <PASS>_FLAGS
# (e.g. PLAN_OWNERSHIP_FLAGS=--attempts=0, EMIT_DEVICE_FLAGS=--explain).
# Tools come from bazel-bin (built here), or from TILEC_TOOLS when set
# (prebuilt, nothing built). Prints the last stage's path on
# stdout. scripts/pipeline.mk does the same with make, re-running only the
# stages after the one whose flags changed.
# A relative OUT_DIR is taken in the caller's directory. Two runs into one
# OUT_DIR at once are refused (a lock); temporaries a killed run left there
# are removed.
set -euo pipefail
caller=$PWD
cd "$(dirname "$0")/.."
# shellcheck source=lib/pipeline.sh
. scripts/lib/pipeline.sh
[ $# -ge 1 ] || { echo "usage: scripts/compile.sh OUT_DIR [--f16] [--onnx=MODEL.onnx] [importer flags...]" >&2; exit 2; }
out=$(tilec_out_dir compile.sh "$caller" "$1")
shift
# --f16 (anywhere among the flags): the F16 pipeline, quantize-fp8
# --fp8=false (docs/quantize.md); FP8 is the default.
model_flags=()
importer=(import-model)
for flag in "$@"; do
  case $flag in
    --f16)
      QUANTIZE_FP8_FLAGS="--fp8=false ${QUANTIZE_FP8_FLAGS:-}"
      export QUANTIZE_FP8_FLAGS ;;
    --onnx=*) importer=(import-onnx "$(tilec_caller_path "$caller" "${flag#--onnx=}")") ;;
    --weights=*) model_flags+=("--weights=$(tilec_caller_path "$caller" "${flag#--weights=}")") ;;
    *) model_flags+=("$flag") ;;
  esac
done
set -- "${model_flags[@]+"${model_flags[@]}"}"
tilec_lock_out compile.sh "$out"
bin=$(tilec_tools)
tilec_tool "$bin" "${importer[@]}" --target="${TARGET:-ipu21}" "$@" -o "$out/0-import.tilec"
tilec_tool "$bin" dump-ir "$out/0-import.tilec" -o "$out/0-import.txt"
# shellcheck disable=SC2046
TILEC_DUMP=1 tilec_run_passes "$bin" "$out" "$out/0-import.tilec" 1 $(tilec_passes)
