#!/usr/bin/env bash
# Rewrites golden files, and the saved pipeline stages under
# testdata/pipelines/, from the current tools; review the diff like code.
#   scripts/update-goldens.sh [PATTERN]   (default //..., e.g. //testdata/dump-ir/...)
# Every golden test runs even when one fails; the failures are listed at the
# end and the exit status is non-zero.
set -uo pipefail
cd "$(dirname "$0")/.."
pattern=${1:-//...}
targets=$(bazel query --noshow_progress "attr(tags, \"golden\", tests($pattern))") || exit 1
bazel build --noshow_progress $targets || exit 1
failed=()
updated=0
for t in $targets; do
  out=$(UPDATE_GOLDENS=1 bazel run --noshow_progress --ui_event_filters=-info "$t" 2>&1)
  if grep "^updated" <<<"$out"; then
    updated=$((updated + $(grep -c "^updated" <<<"$out")))
  else
    failed+=("$t")
    tail -n 5 <<<"$out" >&2
  fi
done
echo "$updated files rewritten from ${#failed[@]} failing and $(wc -w <<<"$targets") golden tests"
[ ${#failed[@]} -eq 0 ] || { printf 'failed: %s\n' "${failed[@]}" >&2; exit 1; }
