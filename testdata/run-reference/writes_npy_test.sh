#!/usr/bin/env bash
# writes_npy_test.sh TOOL MODULE: run-reference --out_dir writes a float32
# and a raw-code .npy per value, with NumPy's header.
set -uo pipefail
tool=$1 module=$2
fail() { echo "FAIL: $*" >&2; exit 1; }

out="$TEST_TMPDIR/outputs"
"$tool" --out_dir="$out" -o "$TEST_TMPDIR/summary" "$module" ||
  fail "run-reference exited $?"
files=$(cd "$out" && ls | tr '\n' ' ')
[ "$files" = "l0.mlp.residual.out.f16.npy l0.mlp.residual.out.npy " ] ||
  fail "outputs only: wrote $files"

# Header: magic, version 1.0, the dict; data: [10,16] elements.
check() {  # FILE DESCR BYTES_PER_ELEMENT
  local file=$1 descr=$2 width=$3
  [ "$(head -c 6 "$file" | tail -c 5)" = NUMPY ] || fail "$file: no magic"
  local header
  header=$(head -c 128 "$file")
  [[ "$header" == *"{'descr': '$descr', 'fortran_order': False, 'shape': (10, 16), }"* ]] ||
    fail "$file: header $header"
  local size
  size=$(wc -c < "$file")
  [ "$size" -eq $((128 + 10 * 16 * width)) ] || fail "$file: $size bytes"
}
check "$out/l0.mlp.residual.out.npy" '<f4' 4
check "$out/l0.mlp.residual.out.f16.npy" '<f2' 2

# --all: two files for each of the layer's 29 values, from stdin too.
all="$TEST_TMPDIR/all"
"$tool" --all --out_dir="$all" -o "$TEST_TMPDIR/summary_all" - < "$module" ||
  fail "run-reference --all exited $?"
count=$(ls "$all" | wc -l)
[ "$count" -eq 58 ] || fail "--all wrote $count files"
[ "$(wc -l < "$TEST_TMPDIR/summary_all")" -eq 29 ] || fail "--all summary"
cmp -s "$out/l0.mlp.residual.out.npy" "$all/l0.mlp.residual.out.npy" ||
  fail "outputs differ between runs"

# An output directory that cannot exist: exit 2, one line, no summary.
touch "$TEST_TMPDIR/plain-file"
"$tool" --out_dir="$TEST_TMPDIR/plain-file/sub" -o "$TEST_TMPDIR/none" \
  "$module" 2> "$TEST_TMPDIR/stderr"
code=$?
[ "$code" -eq 2 ] || fail "bad --out_dir exited $code"
[ "$(wc -l < "$TEST_TMPDIR/stderr")" -eq 1 ] || fail "$(cat "$TEST_TMPDIR/stderr")"
[ ! -e "$TEST_TMPDIR/none" ] || fail "a failed run wrote its summary"
echo PASS
