#!/usr/bin/env bash
# stages_test.sh TOOLS_DIR DIR: DIR holds every stage's file of one small
# model's pipeline run (0-import.tilec, <i>-<pass>.tilec), saved so that a
# pass can be bisected on them (docs/workflow.md); DIR/flags.sh names the
# model (MODEL: import-model flags) and any <PASS>_FLAGS. The test rebuilds
# the stages with today's tools and fails if a saved file differs; under
# `bazel run` with UPDATE_GOLDENS=1 (scripts/update-goldens.sh) it rewrites
# them in the source tree instead, and removes saved stages the pipeline no
# longer makes. A second run that takes the first run's price cache must
# make the same bytes.
set -euo pipefail
. scripts/lib/pipeline.sh
tools=$1 dir=$2
. "$dir/flags.sh"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# shellcheck disable=SC2086
tilec_tool "$tools" import-model $MODEL -o "$out/0-import.tilec"
# shellcheck disable=SC2046
tilec_run_passes "$tools" "$out" "$out/0-import.tilec" 1 $(tilec_passes) >/dev/null 2>"$out/log" ||
  { cat "$out/log" >&2; exit 1; }
status=0
# The pipeline again, taking every price the first run saved: the same
# bytes at every stage (docs/planner.md, "Price cache").
mkdir "$out/warm"
cp "$(tilec_price_cache "$out")" "$(tilec_price_cache "$out/warm")"
cp "$out/0-import.tilec" "$out/warm/"
# shellcheck disable=SC2046
tilec_run_passes "$tools" "$out/warm" "$out/warm/0-import.tilec" 1 $(tilec_passes) >/dev/null 2>"$out/log" ||
  { cat "$out/log" >&2; exit 1; }
for file in "$out"/*.tilec; do
  if ! cmp -s "$file" "$out/warm/$(basename "$file")"; then
    echo "$(basename "$file") differs when the passes take the first run's prices" >&2
    status=1
  fi
done
for file in "$out"/*.tilec; do
  name=$(basename "$file")
  # Not a stage: the initial plan quantize-fp8 hands to plan-ownership
  # (scripts/lib/pipeline.sh); a plan-ownership bisected on the saved stages
  # plans it again.
  case $name in *.initial-plan.tilec) continue ;; esac
  if [ "${UPDATE_GOLDENS:-0}" = 1 ]; then
    cp "$file" "$BUILD_WORKSPACE_DIRECTORY/$dir/$name" && echo "updated $dir/$name"
  elif ! cmp -s "$file" "$dir/$name"; then
    echo "saved stage $dir/$name differs from today's (scripts/update-goldens.sh rewrites it)" >&2
    status=1
  fi
done
# No stale stage from an older pipeline either (removed when updating).
for saved in "$dir"/*.tilec; do
  [ -e "$out/$(basename "$saved")" ] && continue
  if [ "${UPDATE_GOLDENS:-0}" = 1 ]; then
    rm "$BUILD_WORKSPACE_DIRECTORY/$saved" && echo "updated $saved (removed: no such stage today)"
  else
    echo "stale saved stage $saved (scripts/update-goldens.sh removes it)" >&2
    status=1
  fi
done
exit "$status"
