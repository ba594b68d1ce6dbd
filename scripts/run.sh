#!/usr/bin/env bash
# The main job: compile the default model (SigLIP so400m MLP block, batch 1,
# ipu21) through every stage and print a short report.
#   scripts/run.sh [OUT_DIR] [import-model flags...]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
out=${1:-out/siglip-mlp}
[ $# -gt 0 ] && shift
last=$(scripts/compile.sh "$out" "$@" | tail -n 1)
echo "== stages in $out"
ls -1 "$out"
echo "== $(basename "$last")"
bazel-bin/tools/dump-ir/dump-ir "$last" | sed -n '/^model:/p;/^target:/p;/^ops:/,$p'
