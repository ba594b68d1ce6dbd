#!/usr/bin/env bash
# accuracy-at-least.sh MIN_COSINE FILE: completes the pipeline from FILE's
# stage, simulates the device program and exits 0 when it matches its
# reference and every output's cosine against the unquantized graph
# (simulate-device's "comparison with the unquantized graph", present once
# quantize-fp8 made something FP8) is at least MIN_COSINE. Asks which
# decision first costs accuracy. Environment as simulates.sh.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
. "$here/scripts/lib/pipeline.sh"
TILEC_PIPELINE_FILE=$here/passes/pipeline/PIPELINE
[ $# -ge 2 ] || { echo "usage: accuracy-at-least.sh MIN_COSINE FILE" >&2; exit 2; }
limit=$1
bin=${BIN:-$here/bazel-bin/tools}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
program=$(tilec_finish "$bin" "${@: -1}" "$work")
# shellcheck disable=SC2086
tilec_tool "$bin" simulate-device ${SIMULATE_FLAGS:-} "$program" -o "$work/report.txt"
# The lowest output cosine of the unquantized section ("" when absent).
lowest=$(sed -n '/^comparison with the unquantized graph/,/^result:/s/^  %[0-9]* [^:]*: [A-Z]* cosine \([0-9.]*\).*/\1/p' \
  "$work/report.txt" | sort -g | head -n 1)
echo "unquantized cosine ${lowest:-(nothing quantized)} (at least $limit)"
[ -z "$lowest" ] || awk -v c="$lowest" -v m="$limit" 'BEGIN { exit !(c >= m) }'
