#!/usr/bin/env bash
# peak-at-most.sh N FILE: completes the pipeline from FILE's stage and exits
# 0 when the device program's peak memory (the highest buffer end on any
# tile, as emit-device logs it) is at most N bytes. Environment as
# simulates.sh.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
. "$here/scripts/lib/pipeline.sh"
TILEC_PIPELINE_FILE=$here/passes/pipeline/PIPELINE
[ $# -ge 2 ] || { echo "usage: peak-at-most.sh N FILE" >&2; exit 2; }
limit=$1
bin=${BIN:-$here/bazel-bin/tools}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
program=$(tilec_finish "$bin" "${@: -1}" "$work")
peak=$(tilec_tool "$bin" dump-ir "$program" | sed -n 's/.*info () "program".* bytes [0-9]* -> \([0-9]*\)$/\1/p' | tail -n 1)
echo "peak $peak B per tile (limit $limit)"
[ -n "$peak" ] && [ "$peak" -le "$limit" ]
