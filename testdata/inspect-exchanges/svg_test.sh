#!/usr/bin/env bash
# svg_test.sh TOOL PROGRAM: the heat map of a 16-tile program has 16 tile
# cells (each with a title naming the tile), a red busiest cell, and is
# written atomically next to the report.
set -euo pipefail
tool=$1 program=$2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$tool" "$program" --svg="$out/heat.svg" -o "$out/report.txt"
grep -q '^<svg ' "$out/heat.svg" || { echo "not an svg" >&2; exit 1; }
tail -n 1 "$out/heat.svg" | grep -q '^</svg>$' || { echo "unterminated svg" >&2; exit 1; }
cells=$(grep -c '<title>tile ' "$out/heat.svg")
[ "$cells" -eq 16 ] || { echo "expected 16 tile cells, got $cells" >&2; exit 1; }
grep -q 'fill="#ff0000"><title>tile ' "$out/heat.svg" || { echo "no busiest (red) tile" >&2; exit 1; }
# One superstep only: a different map.
"$tool" "$program" --superstep=0 --metric=received --svg="$out/step0.svg" -o "$out/step0.txt"
! cmp -s "$out/heat.svg" "$out/step0.svg" || { echo "superstep 0 map equals the whole-program map" >&2; exit 1; }
grep -q 'superstep 0' "$out/step0.svg"
echo ok
