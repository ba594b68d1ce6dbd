#!/usr/bin/env bash
# browser_test.sh TOOL PROGRAM SIMULATION SIMULATION_WITH_EXPECT
# Headless Chromium (Debian's package, installed by scripts/install-deps.sh)
# renders inspect-program's page of PROGRAM and the test checks the
# rendered DOM: no script errors, every section, and as many op rows, tile
# cells, timeline spans, exchange bars and decision rows as the page's data
# section holds. A deliberately broken copy of the page must fail the same
# checks, so they can fail. The screenshot goes to the test's undeclared
# outputs (bazel-testlogs/.../test.outputs/). SIMULATION has no --expect
# comparison, so the page shows none; SIMULATION_WITH_EXPECT has one, and
# its page shows the card with a line per output.
set -euo pipefail
tool=$1 program=$2 simulation=$3 with_expect=$4
chromium=${CHROMIUM:-/usr/bin/chromium}
[ -x "$chromium" ] || {
  echo "browser_test: $chromium is missing (scripts/install-deps.sh installs Debian's chromium)" >&2
  exit 1
}
work=$(mktemp -d "${TEST_TMPDIR:-/tmp}/browser.XXXXXX")
trap 'rm -rf "$work"' EXIT
shots=${TEST_UNDECLARED_OUTPUTS_DIR:-$work}
export HOME=$work

"$tool" "$program" --simulation="$simulation" -o "$work/page.html"
"$tool" "$program" --simulation="$simulation" --format=json -o "$work/data.json"

# browse PAGE OUT [flags...]: the browser's stdout in OUT.dom (with
# --dump-dom: the DOM after the scripts ran) and its log in OUT.log
# (console messages included).
browse() {
  local page=$1 out=$2
  shift 2
  rm -rf "$work/profile"
  # As root in CI: no sandbox; no network: no background connections.
  timeout 120 "$chromium" --headless --no-sandbox --disable-gpu --disable-quic \
    --no-first-run --disable-background-networking --disable-component-update \
    --disable-sync --user-data-dir="$work/profile" --enable-logging=stderr --v=0 \
    --virtual-time-budget=10000 "$@" "file://$page" >"$out.dom" 2>"$out.log" || true
}

count() { grep -o "$1" "$2" | wc -l; }
# Rows of the table with class $1 in DOM $2 (header row excluded).
table_rows() {
  awk -v cls="class=\"$1\"" 'BEGIN { RS = "</table>" }
    index($0, cls) { n = gsub(/<tr>/, ""); print n - 1; exit }' "$2"
}

failures=()
check() {  # check WHAT EXPECTED ACTUAL
  [ "$2" = "$3" ] || failures+=("$1: expected $2, got $3")
}

# What the data section says the page must draw.
section() { sed -n "/^\"$1\":/,/^\"$2\":/p" "$work/data.json"; }
tiles=$(sed -n 's/^"target":{[^}]*"tiles":\([0-9]*\).*/\1/p' "$work/data.json")
ops=$(section ops steps | grep -c '^\[')
spans=$(section steps memory | grep -oE '\[[0-9]+,"[a-z_]+",[0-9]+,[0-9]+\]' | wc -l)
splits=$(section steps memory | grep -oE '\[[0-9]+,[0-9]+,[1-9][0-9]*,[0-9]+\]' | wc -l)
phases=$(sed -n 's/^"summary":.*"exchange_phases":\([0-9]*\).*/\1/p' "$work/data.json")
decisions=$(section passes tile_maps | grep -c '^\[\[')
[ "$decisions" -gt 1000 ] && decisions=1000

verify() {  # verify OUT: every check on OUT.dom / OUT.log
  local dom=$1.dom log=$1.log
  failures=()
  grep -q 'data-status="ready"' "$dom" || failures+=("the page did not finish rendering")
  check "script errors" 0 "$(count 'class="script-error"' "$dom")"
  check "console errors" 0 "$(grep -c 'Uncaught' "$log" || true)"
  check "sections" 6 "$(count '<section id="' "$dom")"
  for s in summary timeline ops memory exchange decisions; do
    grep -q "<section id=\"$s\"><h2>" "$dom" || failures+=("no section $s")
  done
  check "op table rows" "$ops" "$(table_rows ops-table "$dom")"
  check "tile cells (memory and exchange heat maps)" $((2 * tiles)) "$(count 'class="tile[ "]' "$dom")"
  check "timeline spans" $((spans + splits)) "$(count 'class="span' "$dom")"
  check "sync marks" "$phases" "$(count 'class="sync"' "$dom")"
  check "exchange bars" "$phases" "$(count 'class="bar' "$dom")"
  check "decision rows" "$decisions" "$(table_rows decisions-table "$dom")"
  check "buffer rectangles" 1 "$([ "$(count 'class="buffer"' "$dom")" -gt 0 ] && echo 1 || echo 0)"
  check "expected-output cards" "${2:-0}" "$(count 'id="expected"' "$dom")"
}

# The checks fail on a page whose script breaks half-way.
sed 's/"exchange":{"received_map"/"exchange":{"broken_map"/' "$work/page.html" >"$work/broken.html"
browse "$work/broken.html" "$work/broken" --dump-dom
verify "$work/broken"
[ ${#failures[@]} -gt 0 ] || { echo "a broken page passed the checks" >&2; exit 1; }
grep -q 'class="script-error"' "$work/broken.dom" || { echo "the broken page's error was not shown" >&2; exit 1; }

browse "$work/page.html" "$work/page" --dump-dom
verify "$work/page"
browse "$work/page.html" "$work/shot" --hide-scrollbars --window-size=1400,5200 \
  --screenshot="$shots/inspect-program.png"
[ -s "$shots/inspect-program.png" ] || failures+=("no screenshot")
[ ${#failures[@]} -gt 0 ] || {
  "$tool" "$program" --simulation="$with_expect" -o "$work/expect.html"
  browse "$work/expect.html" "$work/expect" --dump-dom
  verify "$work/expect" 1
  outputs=$(grep -o '"expected":{"dir":.*' "$work/expect.html" | grep -o '"name":' | wc -l)
  [ "$outputs" -gt 0 ] || failures+=("$with_expect: no expected outputs in the page's data")
  check "expected-output lines" "$outputs" "$(count 'class="expected-output"' "$work/expect.dom")"
  grep -q 'Against the expected outputs</div><div class="v pass">PASS' "$work/expect.dom" ||
    failures+=("no PASS verdict against the expected outputs")
}
if [ ${#failures[@]} -gt 0 ]; then
  printf 'browser_test: %s\n' "${failures[@]}" >&2
  grep -i 'console\|uncaught' "$work/page.log" >&2 || true
  exit 1
fi
echo "ok: $ops ops, $tiles tiles, $((spans + splits)) timeline spans, $decisions decisions; screenshot $shots/inspect-program.png"
