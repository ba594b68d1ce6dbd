#!/usr/bin/env bash
# golden_test.sh TOOL DUMP_IR GOLDEN RAW EXPECT_EXIT INPUT [ARGS...]
# With UPDATE_GOLDENS=1 under `bazel run`, rewrites the golden in the source
# tree instead of comparing.
set -uo pipefail
tool=$1 dump=$2 golden=$3 raw=$4 expect_exit=$5 input=$6
shift 6

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
args=("$@")
[ -n "$input" ] && args+=("$input")

"$tool" "${args[@]}" -o "$out/result" >"$out/stdout" 2>"$out/stderr"
code=$?
if [ "$code" -ne "$expect_exit" ]; then
  echo "$tool exited $code, expected $expect_exit" >&2
  cat "$out/stderr" >&2
  exit 1
fi
if [ "$raw" = 1 ]; then
  # Messages name files by their runfiles path, which is stable.
  touch "$out/result"
  cat "$out/result" "$out/stdout" "$out/stderr" > "$out/actual"
elif [ "$code" -ne 0 ]; then
  cat "$out/stderr" > "$out/actual"
  [ -e "$out/result" ] && { echo "a failed run left an output file" >&2; exit 1; }
else
  "$dump" "$out/result" > "$out/actual" || exit 1
fi

if [ "${UPDATE_GOLDENS:-0}" = 1 ]; then
  dest="$BUILD_WORKSPACE_DIRECTORY/$golden"
  cp "$out/actual" "$dest" && echo "updated $golden"
  exit 0
fi
if ! diff -u "$golden" "$out/actual"; then
  echo "golden mismatch: $golden (scripts/update-goldens.sh rewrites it)" >&2
  exit 1
fi
