#!/usr/bin/env bash
# checks_test.sh: scripts/checks/accuracy-at-least.sh on saved device
# programs: an FP8 program passes a floor below its cosine against the
# unquantized graph and fails one above it (cosine is at most 1); an
# unquantized program has nothing to compare and passes.
set -euo pipefail
export BIN=tools
check=scripts/checks/accuracy-at-least.sh
# The device program: each directory's last stage, whatever its number.
last_stage() { find "$1" -name '*.tilec' | sort -V | tail -n 1; }
fp8=$(last_stage testdata/pipelines/siglip-mlp)
f16=$(last_stage testdata/pipelines/vit-ksplit)

"$check" 0.9 "$fp8" | tee "$TEST_TMPDIR/pass.txt"
grep -q '^unquantized cosine 0\.9[0-9]* (at least 0.9)$' "$TEST_TMPDIR/pass.txt"
status=0
"$check" 1.5 "$fp8" >"$TEST_TMPDIR/fail.txt" || status=$?
[ "$status" -eq 1 ] || { echo "exit $status, expected 1" >&2; exit 1; }
"$check" 1.5 "$f16" | grep -q '^unquantized cosine (nothing quantized) (at least 1.5)$'
echo PASS
