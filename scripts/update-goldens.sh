#!/usr/bin/env bash
# Rewrites every golden file from the current tools. Review the diff like code.
set -euo pipefail
cd "$(dirname "$0")/.."
targets=$(bazel query --noshow_progress 'attr(tags, "golden", tests(//...))' "$@")
bazel build $targets
for t in $targets; do
  UPDATE_GOLDENS=1 bazel run --noshow_progress --ui_event_filters=-info "$t" 2>/dev/null
done
