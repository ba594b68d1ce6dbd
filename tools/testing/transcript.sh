# Shell functions of the transcript tests (testdata/untrusted,
# testdata/reliability): each case's command, exit code and one-line message
# go into a transcript compared at the end with a golden file. Sourced, not
# run. The sourcing script sets `work` (shown as WORK), `actual` (the
# transcript file), `problems=0`, and `bin` (a directory on PATH holding the
# tools, shown without it) and `scripts` (shown as scripts/) where it has
# them.

# case_ EXPECTED_EXIT COMMAND ARGS...: one case, run in the current
# directory and recorded; a failure must print one line and leave neither
# out.tilec nor out.tilec.weights.
case_() {
  local expected=$1
  shift
  rm -f out.tilec out.tilec.weights
  timeout 120 "$@" > out.txt 2> err.txt
  local code=$?
  { echo "\$ ${*#"${bin:-/nowhere}"/}"; echo "exit $code"; cat err.txt; } |
    sed -e "s|$work|WORK|g" -e "s|${bin:-/nowhere}/||g" \
      -e "s|${scripts:-/nowhere}/|scripts/|g" >> "$actual"
  if [ "$code" -ne "$expected" ]; then
    echo "exit $code, expected $expected: $*" >&2
    problems=$((problems + 1))
  fi
  if [ "$code" -ne 0 ] && [ "$(wc -l < err.txt)" -ne 1 ]; then
    echo "not one line: $*" >&2
    problems=$((problems + 1))
  fi
  if [ "$code" -ne 0 ] && { [ -e out.tilec ] || [ -e out.tilec.weights ]; }; then
    echo "a failed run left an output: $*" >&2
    problems=$((problems + 1))
  fi
}

# transcript_finish GOLDEN SOURCE: with UPDATE_GOLDENS=1 under `bazel run`,
# copies the transcript to SOURCE (the golden's workspace path, rewritten by
# scripts/update-goldens.sh) and succeeds; else compares it with GOLDEN.
# Returns whether there were no problems.
transcript_finish() {
  local golden=$1 source=$2
  if [ "${UPDATE_GOLDENS:-0}" = 1 ]; then
    cp "$actual" "$BUILD_WORKSPACE_DIRECTORY/$source"
    echo "updated $source"
    return 0
  fi
  if ! diff -u "$golden" "$actual"; then
    echo "transcript differs from $golden" >&2
    problems=$((problems + 1))
  fi
  [ "$problems" -eq 0 ]
}
