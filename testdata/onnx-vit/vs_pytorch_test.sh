#!/usr/bin/env bash
# vs_pytorch_test.sh TOOLS NPY_COMPARE MODEL.onnx PIXELS.npy EXPECTED.npy MODE
#                    [ABS_FACTOR] [BATCH]
# The exported encoder through tilec, compared with PyTorch's output of the
# same model on the same image (export_vit.py wrote both):
#   MODE=reference  import-onnx --dtype=f32 and --dtype=f16, run-reference
#                   --inputs; f32 must agree to 1e-5 (cosine 0.999999),
#                   f16 to 2e-3 (cosine 0.9999).
#   MODE=pipeline-f16, pipeline-fp8
#                   import-onnx --target=tiny, then every pass of
#                   passes/pipeline/PIPELINE as scripts/compile.sh runs it
#                   (f16: quantize-fp8 --fp8=false; fp8: every MatMul FP8,
#                   calibrated on the test image), simulate-device --inputs
#                   against the graph's own reference at its default
#                   tolerances, and the simulated output against PyTorch's:
#                   f16 at the reference's f16 limits, fp8 to 3e-2 (cosine
#                   0.995). Against the unquantized graph simulate-device
#                   is given this model's floor, cosine 0.995 like PyTorch's
#                   (its default 0.999 is meant for one block whose residual
#                   hides the GEMMs' error; ten FP8 GEMMs in series ending in
#                   an unresidualized head measure 0.998-0.999;
#                   docs/import-onnx.md).
# The max-abs limits are for an output of scale about 0.3 (vit-op17's
# embeddings); ABS_FACTOR (default 1) multiplies them for a model whose
# output is that many times larger, as rounding errors scale with it.
# BATCH (default 1) is import-onnx's --batch, for a dynamic-batch export.
set -euo pipefail
tools=$1 compare=$2 model=$3 pixels=$4 expected=$5 mode=$6 factor=${7:-1}
batch=${8:-1}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
run() { local t=$1; shift; "$tools/$t/$t" "$@"; }
scaled() { awk -v a="$1" -v f="$factor" 'BEGIN { print a * f }'; }
# PyTorch's output file is named MODEL.OUTPUT[.bN].npy after the graph
# output.
output=$(basename "$expected" .npy)
output=${output%.b[0-9]*}
output=${output##*.}
mkdir "$out/in"
cp "$pixels" "$out/in/pixel_values.npy"
if [ "$mode" = reference ]; then
  for dtype in f32 f16; do
    run import-onnx "$model" --batch="$batch" --dtype=$dtype -o "$out/$dtype.tilec"
    run run-reference "$out/$dtype.tilec" --inputs="$out/in" --out_dir="$out/$dtype" -o -
    limits=(1e-5 0.999999)
    [ $dtype = f16 ] && limits=(2e-3 0.9999)
    echo -n "reference $dtype vs PyTorch: "
    "$compare" "$expected" "$out/$dtype/$output.npy" "$(scaled "${limits[0]}")" "${limits[1]}"
  done
else
  . scripts/lib/pipeline.sh
  run import-onnx "$model" --batch="$batch" --target=tiny -o "$out/0.tilec"
  export PLAN_OWNERSHIP_FLAGS=--attempts=16
  if [ "$mode" = pipeline-f16 ]; then
    export QUANTIZE_FP8_FLAGS=--fp8=false
  else
    export QUANTIZE_FP8_FLAGS="--calibration=$out/in"
  fi
  # shellcheck disable=SC2046
  program=$(tilec_run_passes "$tools" "$out" "$out/0.tilec" 1 $(tilec_passes))
  limits=(2e-3 0.9999)
  status=0
  run simulate-device "$program" --inputs="$out/in" --dump-tensors="$out/sim" \
    --min_unquantized_cosine=0.995 -o "$out/report.txt" || status=$?
  sed -n '/^total:/p;/^comparison/,$p' "$out/report.txt"
  [ "$status" -eq 0 ] || exit 1
  [ "$mode" = pipeline-fp8 ] && limits=(3e-2 0.995)
  echo -n "simulated ${mode#pipeline-} vs PyTorch: "
  "$compare" "$expected" "$out/sim/$output.npy" "$(scaled "${limits[0]}")" "${limits[1]}"
fi
