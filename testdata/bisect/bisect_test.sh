#!/usr/bin/env bash
# bisect_test.sh: scripts/bisect.sh on the saved stages of
# testdata/pipelines/vit-ksplit finds planted bad decisions, in one pass and
# across the pipeline, within 2 + ceil(log2(decisions)) check runs, leaves
# the last good and first bad outputs, and refuses checks that cannot
# bisect.
set -euo pipefail
export BIN=tools
. scripts/lib/pipeline.sh
stages=testdata/pipelines/vit-ksplit
planted=testdata/bisect/planted_check.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export PLAN_OWNERSHIP_FLAGS="--recipe=testdata/pipelines/vit-ksplit/ksplit.recipe"
export QUANTIZE_FP8_FLAGS="--fp8=false"

expect() {  # expect FILE TEXT: FILE has a line containing TEXT
  grep -qF -- "$2" "$1" || { echo "expected '$2' in:" >&2; cat "$1" >&2; exit 1; }
}
ceil_log2() { local n=$1 k=0; while [ $((1 << k)) -lt "$n" ]; do k=$((k + 1)); done; echo "$k"; }
within_bound() {  # within_bound OUTPUT
  local checks total
  checks=$(sed -n 's/^checks run: \([0-9]*\) (decisions: \([0-9]*\))$/\1/p' "$1")
  total=$(sed -n 's/^checks run: \([0-9]*\) (decisions: \([0-9]*\))$/\2/p' "$1")
  [ "$checks" -le $((2 + $(ceil_log2 "$total"))) ] ||
    { echo "$checks check runs for $total decisions" >&2; exit 1; }
}

# One pass: expand-reduce's second decision keeps op 4's partials in F16.
scripts/bisect.sh --bin=tools --out="$work/one" expand-reduce "$stages/2-plan-ownership.tilec" \
  -- "$planted" 4 "keep the 3 partials in f16" >"$work/one.txt"
cat "$work/one.txt"
expect "$work/one.txt" 'first bad decision: expand-reduce #2'
expect "$work/one.txt" 'accepted #2 (4) "keep the 3 partials in f16"'
expect "$work/one.txt" '(decisions: 2)'
within_bound "$work/one.txt"
"$planted" 4 "keep the 3 partials in f16" "$work/one/last-good.tilec"
! "$planted" 4 "keep the 3 partials in f16" "$work/one/first-bad.tilec"

# The whole pipeline: emit-device's second decision (on op 7, the bias's
# redistribution), the sixth overall.
scripts/bisect.sh --bin=tools --out="$work/all" --pipeline "$stages/0-import.tilec" \
  -- "$planted" 7 "share supersteps" >"$work/all.txt"
cat "$work/all.txt"
expect "$work/all.txt" "first bad decision: emit-device #2 (#6 of 9 across $(tilec_passes | paste -sd ' '))"
within_bound "$work/all.txt"

# --fixed: the first decision after which the check passes.
scripts/bisect.sh --bin=tools --out="$work/fix" --fixed expand-reduce "$stages/2-plan-ownership.tilec" \
  -- sh -c '! "$0" "$@"' "$planted" 1 "keep the 2 partials in f16" >"$work/fix.txt"
expect "$work/fix.txt" 'first fix decision: expand-reduce #1'
[ -e "$work/fix/first-passing.tilec" ] && [ -e "$work/fix/last-failing.tilec" ]

# Checks that cannot bisect are refused with exit 2 and a reason.
refused() {  # refused TEXT ARGS...
  local text=$1 status=0
  shift
  scripts/bisect.sh --bin=tools --out="$work/refused" "$@" >"$work/refused.txt" 2>&1 || status=$?
  [ "$status" -eq 2 ] || { echo "exit $status, expected 2" >&2; cat "$work/refused.txt" >&2; exit 1; }
  expect "$work/refused.txt" "$text"
}
refused 'the check is still passing with all 2 decisions applied' \
  expand-reduce "$stages/2-plan-ownership.tilec" -- true
refused 'the check is already failing with no decision applied' \
  expand-reduce "$stages/2-plan-ownership.tilec" -- false
refused 'the check cannot decide on a candidate (exit 125' \
  expand-reduce "$stages/2-plan-ownership.tilec" -- sh -c 'exit 125'
refused 'usage: scripts/bisect.sh' expand-reduce "$stages/2-plan-ownership.tilec" true
echo ok
