#!/usr/bin/env bash
# simulates.sh FILE: completes the pipeline from FILE's stage (the passes of
# passes/pipeline/PIPELINE after the last one in its log), simulates the
# device program and compares it with the reference; exit 0 when every
# output is within simulate-device's default tolerances.
# Environment: BIN (tools as BIN/<tool>/<tool>, default bazel-bin/tools),
# <PASS>_FLAGS for the passes it runs, SIMULATE_FLAGS.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
. "$here/scripts/lib/pipeline.sh"
TILEC_PIPELINE_FILE=$here/passes/pipeline/PIPELINE
[ $# -ge 1 ] || { echo "usage: simulates.sh FILE" >&2; exit 2; }
bin=${BIN:-$here/bazel-bin/tools}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
program=$(tilec_finish "$bin" "${@: -1}" "$work")
# shellcheck disable=SC2086
tilec_tool "$bin" simulate-device ${SIMULATE_FLAGS:-} "$program" -o "$work/report.txt"
