#!/usr/bin/env bash
# vs_pytorch_test.sh TOOLS NPY_COMPARE MODEL.onnx PIXELS.npy EXPECTED.npy MODE
# The exported encoder through tilec, compared with PyTorch's output of the
# same model on the same image (export_vit.py wrote both):
#   MODE=reference  import-onnx --dtype=f32 and --dtype=f16, run-reference
#                   --inputs; f32 must agree to 1e-5 (cosine 0.999999),
#                   f16 to 2e-3 (cosine 0.9999).
#   MODE=pipeline   import-onnx --target=tiny, plan-ownership, expand-reduce,
#                   emit-device, simulate-device --inputs, its simulated
#                   output compared with PyTorch's at the f16 limits.
set -euo pipefail
tools=$1 compare=$2 model=$3 pixels=$4 expected=$5 mode=$6
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
run() { local t=$1; shift; "$tools/$t/$t" "$@"; }
mkdir "$out/in"
cp "$pixels" "$out/in/pixel_values.npy"
if [ "$mode" = reference ]; then
  for dtype in f32 f16; do
    run import-onnx "$model" --dtype=$dtype -o "$out/$dtype.tilec"
    run run-reference "$out/$dtype.tilec" --inputs="$out/in" --out_dir="$out/$dtype" -o -
    limits=(1e-5 0.999999)
    [ $dtype = f16 ] && limits=(2e-3 0.9999)
    echo -n "reference $dtype vs PyTorch: "
    "$compare" "$expected" "$out/$dtype/embeddings.npy" "${limits[@]}"
  done
else
  run import-onnx "$model" --target=tiny -o "$out/0.tilec"
  run plan-ownership "$out/0.tilec" --attempts=16 -o "$out/1.tilec"
  run expand-reduce "$out/1.tilec" -o "$out/2.tilec"
  run emit-device "$out/2.tilec" -o "$out/3.tilec"
  run simulate-device "$out/3.tilec" --inputs="$out/in" --dump-tensors="$out/sim" -o -
  echo -n "simulated f16 vs PyTorch: "
  "$compare" "$expected" "$out/sim/embeddings.npy" 2e-3 0.9999
fi
