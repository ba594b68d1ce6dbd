#!/usr/bin/env bash
# pipeline_tools_test.sh LIST: LIST (PIPELINE_PASSES of pipeline_tools.bzl,
# one a line) must be the passes of passes/pipeline/PIPELINE in order, as
# scripts/lib/pipeline.sh reads them.
set -euo pipefail
. scripts/lib/pipeline.sh
if ! diff <(tilec_passes) "$1"; then
  echo "passes/pipeline/pipeline_tools.bzl's PIPELINE_PASSES (>) differs from" \
    "passes/pipeline/PIPELINE (<): edit it to match" >&2
  exit 1
fi
echo PASS
