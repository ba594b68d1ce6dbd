#!/usr/bin/env bash
# run_expect_test.sh OUTPUT EXPECTED.npy EXIT IMAGE.npy|- RUN_FLAGS...
# One command from a model to the report page, as a user runs it:
#   scripts/run.sh OUT RUN_FLAGS... [--inputs=IN] --expect=EXP
# on `tiny` with the tools of this build (TILEC_TOOLS), where IN holds
# IMAGE.npy as pixel_values.npy (`-`: the inputs' seeded ones) and EXP the
# expected output (e.g. PyTorch's) as OUTPUT.npy, the graph output's name.
# RUN_FLAGS: --onnx=MODEL, or a preset's flags with --weights=CKPT; --f16
# for the F16 pipeline (else FP8). The run must exit EXIT (0, or 3 for an
# expected output it does not match) and, either way, write the report
# page, the summary's throughput and the comparison with the expected
# output, which are printed; a failure must name the expected file.
set -euo pipefail
output=$1 expected=$2 want_exit=$3 image=$4
shift 4
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/expect"
cp "$expected" "$work/expect/$output.npy"
flags=("$@" --expect="$work/expect")
if [ "$image" != - ]; then
  mkdir "$work/in"
  cp "$image" "$work/in/pixel_values.npy"
  flags+=(--inputs="$work/in")
fi
status=0
TARGET=tiny PLAN_OWNERSHIP_FLAGS=--attempts=16 TILEC_TOOLS="$PWD/tools" \
  scripts/run.sh "$work/out" "${flags[@]}" > "$work/log" 2> "$work/err" || status=$?
sed -n '/^comparison with the expected/,/^result/p' "$work/log"
cat "$work/err"
if [ "$status" -ne "$want_exit" ]; then
  echo "run.sh exited $status, expected $want_exit"
  tail -n 20 "$work/log"
  exit 1
fi
[ -s "$work/out/report.html" ] || { echo "no report page"; exit 1; }
# The summary's throughput, from the page's data (every import records
# the batch).
grep -E '^throughput: batch [1-9][0-9]*, [0-9,]+ cycles per image, [0-9.]+ images/s at [0-9.]+ GHz, [0-9.]+ % of FP8 peak \([0-9,]+ GEMM MACs\)$' "$work/log" ||
  { echo "no throughput line in the summary"; sed -n '/^== summary/,$p' "$work/log"; exit 1; }
verdict=PASS
[ "$want_exit" = 0 ] || verdict=FAIL
grep -q "^  %[0-9]* $output f16\[.*: $verdict " "$work/log" ||
  { echo "no $verdict line for $output against the expected output"; exit 1; }
if [ "$want_exit" != 0 ]; then
  grep -q "against $work/expect/$output.npy: output %[0-9]* \"$output\" is outside tolerance" "$work/err" ||
    { echo "the failure does not name the expected file"; exit 1; }
fi
