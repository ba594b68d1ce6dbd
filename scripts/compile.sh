#!/usr/bin/env bash
# Chains the tilec stages, keeping every stage's file (and its dump-ir text)
# in OUT_DIR so any stage can be re-run, diffed or bisected on its own:
#
#   0-import   import-model      the graph
#   1-plan     plan-ownership    ownerships, recipes, redistributions, estimates
#   2-reduce   expand-reduce     explicit reductions (seed, remote partials, result)
#   3-device   emit-device       the device program (buffers, supersteps, bindings)
#
#   scripts/compile.sh OUT_DIR [import-model flags...]
#
# Environment: TARGET (default ipu21); extra flags per stage in PLAN_FLAGS,
# REDUCE_FLAGS and EMIT_FLAGS (e.g. PLAN_FLAGS=--attempts=0). Tools come from
# bazel-bin (built here). Prints the last stage's path on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: scripts/compile.sh OUT_DIR [import-model flags...]" >&2; exit 2; }
out=$1
shift
target=${TARGET:-ipu21}
mkdir -p "$out"
bazel build --noshow_progress --ui_event_filters=-info //tools/... >&2
bin=bazel-bin/tools

stage() {  # stage NAME TOOL ARGS...: runs TOOL, keeps NAME.tilec and NAME.txt
  local name=$1 tool=$2
  shift 2
  "$bin/$tool/$tool" "$@" -o "$out/$name.tilec"
  "$bin/dump-ir/dump-ir" "$out/$name.tilec" -o "$out/$name.txt"
}

stage 0-import import-model --target="$target" "$@"
# shellcheck disable=SC2086
stage 1-plan plan-ownership ${PLAN_FLAGS:-} "$out/0-import.tilec"
# shellcheck disable=SC2086
stage 2-reduce expand-reduce ${REDUCE_FLAGS:-} "$out/1-plan.tilec"
# shellcheck disable=SC2086
stage 3-device emit-device ${EMIT_FLAGS:-} "$out/2-reduce.tilec"
echo "$out/3-device.tilec"
