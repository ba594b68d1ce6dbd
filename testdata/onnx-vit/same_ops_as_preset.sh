#!/usr/bin/env bash
# same_ops_as_preset.sh TOOLS MODEL.onnx BATCH [import-model flags...]
# import-onnx MODEL.onnx --batch=BATCH against `import-model
# --preset=siglip-so400m-384 --part=model --repeat=false --batch=BATCH
# FLAGS`: each op's kind and result shape, in order, must be the same (an
# exported SigLIP with its MAP head is the graph import-model builds).
# import-onnx's host time and peak RSS are printed (/usr/bin/time -v).
# With CYCLES_TARGET (e.g. tiny), both are also compiled for that target by
# passes/pipeline/PIPELINE with F16 GEMMs (quantize-fp8 --fp8=false, so
# the weights' values decide nothing) and their simulated cycles must be
# equal.
set -euo pipefail
tools=$1 model=$2 batch=$3
shift 3
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
/usr/bin/time -v "$tools/import-onnx/import-onnx" "$model" --batch="$batch" \
  --target="${CYCLES_TARGET:-ipu21}" -o "$out/onnx.tilec" 2> "$out/time.txt" || { cat "$out/time.txt"; exit 1; }
sed -n 's/^\t\(Elapsed (wall clock) time\|Maximum resident set size\)/import-onnx: \1/p' \
  "$out/time.txt"
"$tools/import-model/import-model" --preset=siglip-so400m-384 --part=model \
  --repeat=false --batch="$batch" --target="${CYCLES_TARGET:-ipu21}" "$@" \
  -o "$out/preset.tilec"
# "  (12) mat_mul name: %20 = %18, %19 : f16[729,3456] ..." -> "mat_mul f16[729,3456]"
ops() {
  "$tools/dump-ir/dump-ir" "$1" |
    sed -n 's/^  ([0-9]*) \([a-z_]*\) [^:]*: %[0-9]* = [^:]*: \([^ ]*\).*/\1 \2/p'
}
ops "$out/onnx.tilec" > "$out/onnx.ops"
ops "$out/preset.tilec" > "$out/preset.ops"
echo "$(wc -l < "$out/onnx.ops") ops from import-onnx, $(wc -l < "$out/preset.ops") from import-model"
[ -s "$out/onnx.ops" ] || { echo "no ops read from dump-ir"; exit 1; }
diff "$out/preset.ops" "$out/onnx.ops"
echo "same ops and shapes"
[ -n "${CYCLES_TARGET:-}" ] || exit 0
. scripts/lib/pipeline.sh
export PLAN_OWNERSHIP_FLAGS=--attempts=16 QUANTIZE_FP8_FLAGS=--fp8=false
for graph in onnx preset; do
  mkdir "$out/$graph"
  # shellcheck disable=SC2046
  program=$(tilec_run_passes "$tools" "$out/$graph" "$out/$graph.tilec" 1 \
    $(tilec_passes))
  "$tools/simulate-device/simulate-device" "$program" --execute=false -o - |
    grep '^total:' > "$out/$graph.cycles"
done
echo "import-onnx's program: $(cat "$out/onnx.cycles")"
diff "$out/preset.cycles" "$out/onnx.cycles"
echo "the same simulated cycles"
