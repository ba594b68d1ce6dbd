#!/usr/bin/env bash
# writes_npy_test.sh TOOL MODULE: run-reference --out_dir writes a float32
# and a raw-code .npy per value, with NumPy's header; the layer's input and
# output in the PyTorch module's shape [B, T, D] (import-model declares
# it), and --inputs takes the input in that shape or in tilec's rows.
set -uo pipefail
tool=$1 module=$2
fail() { echo "FAIL: $*" >&2; exit 1; }

out="$TEST_TMPDIR/outputs"
"$tool" --out_dir="$out" -o "$TEST_TMPDIR/summary" "$module" ||
  fail "run-reference exited $?"
files=$(cd "$out" && ls | tr '\n' ' ')
[ "$files" = "l0.mlp.residual.out.f16.npy l0.mlp.residual.out.npy " ] ||
  fail "outputs only: wrote $files"

# Header: magic, version 1.0, the dict; data: 10 x 16 elements (batch 2,
# 5 tokens, width 16).
check() {  # FILE DESCR BYTES_PER_ELEMENT SHAPE
  local file=$1 descr=$2 width=$3 shape=$4
  [ "$(head -c 6 "$file" | tail -c 5)" = NUMPY ] || fail "$file: no magic"
  local header
  header=$(head -c 128 "$file")
  [[ "$header" == *"{'descr': '$descr', 'fortran_order': False, 'shape': $shape, }"* ]] ||
    fail "$file: header $header"
  local size
  size=$(wc -c < "$file")
  [ "$size" -eq $((128 + 10 * 16 * width)) ] || fail "$file: $size bytes"
}
check "$out/l0.mlp.residual.out.npy" '<f4' 4 '(2, 5, 16)'
check "$out/l0.mlp.residual.out.f16.npy" '<f2' 2 '(2, 5, 16)'

# --all: two files for each of the layer's 29 values, from stdin too.
all="$TEST_TMPDIR/all"
"$tool" --all --out_dir="$all" -o "$TEST_TMPDIR/summary_all" - < "$module" ||
  fail "run-reference --all exited $?"
count=$(ls "$all" | wc -l)
[ "$count" -eq 58 ] || fail "--all wrote $count files"
[ "$(wc -l < "$TEST_TMPDIR/summary_all")" -eq 29 ] || fail "--all summary"
cmp -s "$out/l0.mlp.residual.out.npy" "$all/l0.mlp.residual.out.npy" ||
  fail "outputs differ between runs"
# The input as the module declares it; values inside the layer keep
# tilec's rows.
check "$all/x.npy" '<f4' 4 '(2, 5, 16)'
check "$all/l0.ln1.out.npy" '<f4' 4 '(10, 16)'

# --inputs: the seeded input back in the module's shape [2,5,16], then in
# tilec's rows [10,16] (the same bytes under another header, padded to the
# same length); both give the seeded run's output, written as [2,5,16].
for shape in '(2, 5, 16), }' '(10, 16), }  '; do
  in="$TEST_TMPDIR/in"
  rm -rf "$in" "$TEST_TMPDIR/given"
  mkdir "$in"
  { head -c 128 "$all/x.npy" | sed "s/(2, 5, 16), }/$shape/"
    tail -c +129 "$all/x.npy"; } > "$in/x.npy"
  [[ "$(head -c 128 "$in/x.npy")" == *"'shape': $shape"* ]] || fail "test input $shape"
  "$tool" --inputs="$in" --out_dir="$TEST_TMPDIR/given" -o "$TEST_TMPDIR/summary_given" \
    "$module" || fail "run-reference --inputs with x $shape exited $?"
  cmp -s "$out/l0.mlp.residual.out.npy" "$TEST_TMPDIR/given/l0.mlp.residual.out.npy" ||
    fail "--inputs with x $shape: the output differs from the seeded run's"
done
# Any other shape of the same elements is refused, naming the file.
{ head -c 128 "$all/x.npy" | sed "s/(2, 5, 16), }/(5, 2, 16), }/"
  tail -c +129 "$all/x.npy"; } > "$in/x.npy"
"$tool" --inputs="$in" -o "$TEST_TMPDIR/none" "$module" 2> "$TEST_TMPDIR/stderr"
code=$?
[ "$code" -eq 2 ] || fail "x (5, 2, 16) exited $code"
grep -q "$in/x.npy" "$TEST_TMPDIR/stderr" || fail "$(cat "$TEST_TMPDIR/stderr")"

# An output directory that cannot exist: exit 2, one line, no summary.
touch "$TEST_TMPDIR/plain-file"
"$tool" --out_dir="$TEST_TMPDIR/plain-file/sub" -o "$TEST_TMPDIR/none" \
  "$module" 2> "$TEST_TMPDIR/stderr"
code=$?
[ "$code" -eq 2 ] || fail "bad --out_dir exited $code"
[ "$(wc -l < "$TEST_TMPDIR/stderr")" -eq 1 ] || fail "$(cat "$TEST_TMPDIR/stderr")"
[ ! -e "$TEST_TMPDIR/none" ] || fail "a failed run wrote its summary"
echo PASS
