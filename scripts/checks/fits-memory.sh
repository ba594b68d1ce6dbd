#!/usr/bin/env bash
# fits-memory.sh FILE: completes the pipeline from FILE's stage; exit 0 when
# every pass fits tile memory (no pass exits 3), 1 when one does not.
# Other failures (bad input, internal errors) exit 125, so a bisection
# stops instead of mistaking them for the answer. Environment as simulates.sh.
set -uo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
. "$here/scripts/lib/pipeline.sh"
TILEC_PIPELINE_FILE=$here/passes/pipeline/PIPELINE
[ $# -ge 1 ] || { echo "usage: fits-memory.sh FILE" >&2; exit 2; }
bin=${BIN:-$here/bazel-bin/tools}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tilec_finish "$bin" "${@: -1}" "$work" >/dev/null
status=$?
case $status in
  0) exit 0 ;;
  3) echo "does not fit" >&2; exit 1 ;;
  *) echo "a pass failed with exit $status" >&2; exit 125 ;;
esac
