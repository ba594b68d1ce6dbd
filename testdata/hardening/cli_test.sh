#!/usr/bin/env bash
# cli_test.sh GOLDEN TOOL...: runs every case of issue 8 (bad flags, bad
# files, files too big, nonsense values) and compares what each printed and
# its exit code with GOLDEN. Every failing case must print exactly one line
# and leave no output or temp file behind. With UPDATE_GOLDENS=1 under
# `bazel run`, rewrites GOLDEN instead (scripts/update-goldens.sh).
set -uo pipefail
golden=$PWD/$1
shift
bin=$(mktemp -d)
work=$(mktemp -d)
trap 'rm -rf "$bin" "$work"' EXIT
for tool in "$@"; do ln -s "$PWD/$tool" "$bin/$(basename "$tool")"; done
for f in testdata/hardening/*.tilec testdata/hardening/*.json; do
  cp "$f" "$work/"
done
cd "$work"
mkdir adir
printf -- '--json\n' > good.flags
printf -- '# a comment\n--json\nnot-a-flag\n' > bad.flags
printf -- '--bogus=3\n' > unknown.flags

actual=$work/actual
problems=0
# case [--stdout] TOOL ARGS...: one case; --stdout also records stdout.
case_() {
  local keep_stdout=0
  if [ "$1" = --stdout ]; then keep_stdout=1; shift; fi
  local tool=$1
  shift
  "$bin/$tool" "$@" > out.txt 2> err.txt
  local code=$?
  { echo "\$ $tool $*"; echo "exit $code"; cat err.txt;
    [ $keep_stdout = 1 ] && cat out.txt; } >> "$actual"
  if [ $code -ne 0 ] && [ "$(wc -l < err.txt)" -ne 1 ]; then
    echo "not one line: $tool $*" >&2
    problems=$((problems + 1))
  fi
  if [ -e result.tilec ]; then
    echo "a failed run left result.tilec: $tool $*" >&2
    problems=$((problems + 1))
    rm -f result.tilec
  fi
}

# 5: usage errors exit 2 with the tool's name; --help exits 0.
case_ dump-ir --bogus small.tilec
case_ dump-ir --bogus=1 small.tilec
case_ plan-ownership --seed=abc small.tilec
case_ dump-ir small.tilec -o
case_ dump-ir --flagfile=missing.flags small.tilec
case_ dump-ir --flagfile=adir small.tilec
case_ dump-ir --flagfile=bad.flags small.tilec
case_ dump-ir --flagfile=unknown.flags small.tilec
case_ dump-ir --flagfile=good.flags small.tilec -o good.json
case_ --stdout dump-ir --help
case_ --stdout dump-ir --version
"$bin/simulate-device" --helpfull > helpfull.txt; echo "\$ simulate-device --helpfull: exit $?, lists --vmodule: $(grep -c -- '--vmodule ' helpfull.txt)" >> "$actual"
"$bin/simulate-device" --help > help.txt; echo "\$ simulate-device --help: exit $?, lists --vmodule: $(grep -c -- '--vmodule ' help.txt), --threads: $(grep -c -- '--threads ' help.txt), --max-decisions: $(grep -c -- '--max-decisions ' help.txt)" >> "$actual"

# 2: a directory as any input exits 2 naming it.
case_ dump-ir adir
case_ plan-ownership --target=./adir small.tilec -o result.tilec
case_ plan-ownership --recipe=adir small.tilec -o result.tilec
case_ plan-ownership --resume=adir small.tilec -o result.tilec
case_ plan-ownership --initial_plan=adir small.tilec -o result.tilec
case_ run-reference --inputs=small.tilec small.tilec

# 3: bounded memory, refused before allocating.
case_ import-model --part=model --layers=65536 -o result.tilec
case_ run-reference huge-value.tilec
case_ run-reference too-big-for-target.tilec
case_ simulate-device rows-2e31.tilec
case_ simulate-device rows-2e31-strided.tilec

# 4 and 13: nonsense flag values.
case_ run-reference --threads=100000 small.tilec
case_ simulate-device --threads=0 good-program.tilec
case_ simulate-device --atol=nan good-program.tilec
case_ simulate-device --rtol=-1 good-program.tilec
case_ simulate-device --min_cosine=2 good-program.tilec
case_ plan-ownership --checkpoint_every=0 small.tilec -o result.tilec
case_ plan-ownership --max-decisions=-5 small.tilec -o result.tilec
case_ inspect-exchanges --op=999 good-program.tilec
case_ inspect-exchanges --superstep=999 good-program.tilec
case_ run-reference --sidecar_dir=/nonexistent small.tilec
# An output without its directory is refused before any work: the text
# report (result.tilec here) is not written either.
case_ simulate-device good-program.tilec -o result.tilec --json-report=nodir/report.json
case_ quantize-fp8 small.tilec -o result.tilec --save_initial_plan=nodir/plan.tilec
# A side output may not replace the input.
case_ quantize-fp8 small.tilec -o result.tilec --save_initial_plan=small.tilec

# The price cache: a directory, stdout, a path without its directory or
# the input is refused before any work; a damaged one is not taken (one
# line on stderr), the output is the same, and it is replaced by one that
# is taken (no line the second time).
case_ plan-ownership --price_cache=adir small.tilec -o result.tilec
case_ plan-ownership --price_cache=- small.tilec -o result.tilec
case_ plan-ownership --price_cache=nodir/prices small.tilec -o result.tilec
case_ plan-ownership --price_cache=small.tilec small.tilec -o result.tilec
case_ plan-ownership small.tilec -o planned.tilec
printf 'not prices' > damaged.tilec-prices
case_ plan-ownership --price_cache=damaged.tilec-prices small.tilec -o planned-damaged.tilec
case_ plan-ownership --price_cache=damaged.tilec-prices small.tilec -o planned-again.tilec
for f in planned-damaged.tilec planned-again.tilec; do
  cmp -s planned.tilec "$f"; echo "\$ cmp planned.tilec $f: exit $?" >> "$actual"
done

# 6: attribute domains.
case_ dump-ir eps-negative.tilec

# 11: inspect-exchanges runs the simulator's program checks.
case_ inspect-exchanges tile-4e9.tilec
case_ inspect-exchanges rows-2e31.tilec

# 8, 9, 12: one target validator on every load, messages on one line.
case_ import-model --target=target-no-kernels.json -o result.tilec
case_ import-model --target=target-bad-name.json -o result.tilec
case_ plan-ownership --target=target-bad-name.json small.tilec -o result.tilec

# 10: no temp file survives a failed run.
leftovers=$(find . -name '*.tilec-tmp.*')
if [ -n "$leftovers" ]; then
  echo "temp files left: $leftovers" >&2
  problems=$((problems + 1))
fi

if [ "${UPDATE_GOLDENS:-0}" = 1 ]; then
  cp "$actual" "$BUILD_WORKSPACE_DIRECTORY/testdata/hardening/cli.golden" &&
    echo "updated testdata/hardening/cli.golden"
  exit $((problems > 0))
fi
if ! diff -u "$golden" "$actual"; then
  echo "golden mismatch: testdata/hardening/cli.golden (scripts/update-goldens.sh rewrites it)" >&2
  exit 1
fi
[ $problems -eq 0 ]
