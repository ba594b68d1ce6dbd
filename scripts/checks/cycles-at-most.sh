#!/usr/bin/env bash
# cycles-at-most.sh N FILE: completes the pipeline from FILE's stage and
# exits 0 when the device program simulates in at most N cycles (the
# reference comparison is skipped: this asks about speed only).
# Environment as simulates.sh.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
. "$here/scripts/lib/pipeline.sh"
TILEC_PIPELINE_FILE=$here/passes/pipeline/PIPELINE
[ $# -ge 2 ] || { echo "usage: cycles-at-most.sh N FILE" >&2; exit 2; }
limit=$1
bin=${BIN:-$here/bazel-bin/tools}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
program=$(tilec_finish "$bin" "${@: -1}" "$work")
tilec_tool "$bin" simulate-device --compare=false "$program" -o "$work/report.txt"
cycles=$(sed -n 's/^total: \([0-9]*\) cycles.*/\1/p' "$work/report.txt")
echo "simulated $cycles cycles (limit $limit)"
[ -n "$cycles" ] && [ "$cycles" -le "$limit" ]
