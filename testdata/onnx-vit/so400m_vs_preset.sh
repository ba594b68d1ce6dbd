#!/usr/bin/env bash
# so400m_vs_preset.sh [WORK_DIR]  (not run in CI: it needs python3-torch,
# about 11 GB of memory and a few minutes)
# Exports a SigLIP so400m/14-shaped vision model with its MAP head
# (export_pooled.py --so400m: random weights, batch 1, opset 17; 1.7 GB,
# kept in WORK_DIR) and checks with same_ops_as_preset.sh that import-onnx
# makes the ops and shapes of `import-model --part=model`. Run from the
# repository root after
# `bazel build //tools/import-onnx //tools/import-model //tools/dump-ir`.
set -euo pipefail
work=$(realpath "${1:-$(mktemp -d)}")
mkdir -p "$work"
model=$work/so400m-map.onnx
[ -f "$model" ] ||
  (cd testdata/onnx-vit && python3 export_pooled.py --so400m "$model")
testdata/onnx-vit/same_ops_as_preset.sh bazel-bin/tools "$model" 1
