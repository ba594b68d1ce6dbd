#!/usr/bin/env bash
# Rewrites golden files from the current tools; review the diff like code.
#   scripts/update-goldens.sh [PATTERN]   (default //..., e.g. //testdata/dump-ir/...)
set -euo pipefail
cd "$(dirname "$0")/.."
pattern=${1:-//...}
targets=$(bazel query --noshow_progress "attr(tags, \"golden\", tests($pattern))")
bazel build --noshow_progress $targets
for t in $targets; do
  UPDATE_GOLDENS=1 bazel run --noshow_progress --ui_event_filters=-info "$t" 2>/dev/null | grep "^updated"
done
