#!/usr/bin/env bash
# Chains the tilec stages, keeping every stage's file in OUT_DIR so any stage
# can be re-run, diffed or bisected on its own.
#
#   scripts/compile.sh OUT_DIR [import-model flags...]
#
# Environment: TARGET (default ipu21), and per-stage extra flags in
# PLAN_FLAGS etc. as stages are added. Tools come from bazel-bin (built here).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: scripts/compile.sh OUT_DIR [import-model flags...]" >&2; exit 2; }
out=$1
shift
target=${TARGET:-ipu21}
mkdir -p "$out"
bazel build --noshow_progress --ui_event_filters=-info //tools/... >&2
bin=bazel-bin/tools

"$bin/import-model/import-model" --target="$target" "$@" -o "$out/0-import.tilec"
"$bin/dump-ir/dump-ir" "$out/0-import.tilec" -o "$out/0-import.txt"
echo "$out/0-import.tilec"
