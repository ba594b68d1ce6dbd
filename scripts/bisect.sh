#!/usr/bin/env bash
# Finds the first decision of a pass (or of the whole pipeline) whose
# inclusion makes a check fail, by binary search over --max-decisions, like
# LLVM's -opt-bisect-limit.
#
#   scripts/bisect.sh [options] PASS INPUT -- CHECK...
#   scripts/bisect.sh [options] --pipeline INPUT -- CHECK...
#
# PASS runs on INPUT with its flags from <PASS>_FLAGS (as in compile.sh).
# CHECK is any command; it is run with the candidate file appended as its
# last argument: exit 0 means good, 125 that it cannot decide (bisection
# stops), anything else bad (scripts/checks/ has ready-made ones:
# simulates.sh, cycles-at-most.sh N, peak-at-most.sh N, fits-memory.sh,
# accuracy-at-least.sh C; each completes the pipeline from whatever stage
# its file is at).
#
# With --pipeline, INPUT is an import-model output and the passes of
# passes/pipeline/PIPELINE (or --passes=a,b,c) run in order; their applied
# decisions are numbered one after another across the passes (those of
# pass i when every earlier pass is complete), a candidate g completes the
# passes before the one holding decision g, stops that one after it, and
# runs the passes after it with --max-decisions=0. The check gets the last
# pass's output.
#
# The check must pass with no decision applied and fail with all of them,
# else bisection is refused (exit 2). With --fixed the question is the
# other way round: the check fails with no decision and passes with all,
# and the first decision that makes it pass is found (e.g. which decision
# brought the cycles under N). On success the first bad decision is
# printed as the pass logged it, with the number of check runs, and the last
# good and first bad outputs are left in the output directory (--out=DIR,
# default a new temporary directory) as last-good.tilec and first-bad.tilec
# (with --fixed: last-failing.tilec and first-passing.tilec).
#
# Options: --out=DIR, --bin=DIR (tools as DIR/<tool>/<tool>; default
# bazel-bin/tools, built here), --passes=a,b,c (with --pipeline), --fixed.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=lib/pipeline.sh
. "$here/scripts/lib/pipeline.sh"
TILEC_PIPELINE_FILE=$here/passes/pipeline/PIPELINE

usage() {
  echo "usage: scripts/bisect.sh [--out=DIR] [--bin=DIR] PASS INPUT -- CHECK..." >&2
  echo "       scripts/bisect.sh [--out=DIR] [--bin=DIR] [--passes=a,b] --pipeline INPUT -- CHECK..." >&2
  exit 2
}
fail() { echo "bisect: $*" >&2; exit 2; }

out="" bin="" pipeline=0 passes_list="" fixed=0
while [ $# -gt 0 ]; do
  case $1 in
    --out=*) out=${1#--out=} ;;
    --bin=*) bin=${1#--bin=} ;;
    --passes=*) passes_list=${1#--passes=} ;;
    --pipeline) pipeline=1 ;;
    --fixed) fixed=1 ;;
    --help|-h) sed -n '2,/^set /p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    --) break ;;
    -*) fail "unknown option $1" ;;
    *) break ;;
  esac
  shift
done
if [ "$pipeline" = 1 ]; then
  [ $# -ge 3 ] && [ "$2" = -- ] || usage
  pass="" input=$1
  shift 2
else
  [ $# -ge 4 ] && [ "$3" = -- ] || usage
  pass=$1 input=$2
  shift 3
fi
check=("$@")
[ -r "$input" ] || fail "$input: cannot read"
if [ -z "$bin" ]; then
  (cd "$here" && bazel build --noshow_progress --ui_event_filters=-info //tools/... >&2)
  bin=$here/bazel-bin/tools
fi
[ -n "$out" ] || out=$(mktemp -d "${TMPDIR:-/tmp}/bisect.XXXXXX")
# Paths starting with '-' would reach mkdir and the tools as options.
case $out in -*) out=./$out ;; esac
case $input in -*) input=./$input ;; esac
mkdir -p -- "$out"
if [ "$pipeline" = 1 ]; then
  if [ -n "$passes_list" ]; then
    IFS=, read -r -a passes <<<"$passes_list"
  else
    mapfile -t passes < <(tilec_passes)
  fi
else
  passes=("$pass")
fi
for p in "${passes[@]}"; do
  [ -x "$bin/$p/$p" ] || fail "no tool $bin/$p/$p for pass '$p'"
done

# The decisions a pass applied in FILE, by their limit index.
applied_in() {  # applied_in PASS FILE
  tilec_tool "$bin" dump-ir "$2" | awk -v pass="$1" '
    /^pass / { name = $2; sub(/:$/, "", name); on = (name == pass); if (on) max = 0; next }
    on && /^  accepted #[0-9]+ / { n = substr($2, 2) + 0; if (n > max) max = n }
    END { print max + 0 }'
}
decision_text() {  # decision_text PASS FILE K
  tilec_tool "$bin" dump-ir "$2" | awk -v pass="$1" -v k="#$3" '
    /^pass / { name = $2; sub(/:$/, "", name); on = (name == pass); if (on) text = ""; next }
    on && $1 == "accepted" && $2 == k { sub(/^  /, ""); text = $0 }
    END { print text }'
}

# run_with LIMITS... : runs the passes with --max-decisions per pass ("" =
# no limit) into $out/run.tilec; prints its path.
run_with() {
  local file=$input i=0 limit p flags
  for p in "${passes[@]}"; do
    limit=${1-}
    shift || true
    flags=$(tilec_flags "$p")
    [ -n "$limit" ] && flags+=" --max-decisions=$limit"
    # shellcheck disable=SC2086
    tilec_tool "$bin" "$p" $flags "$file" -o "$out/stage-$i.tilec" 2>>"$out/passes.log" ||
      fail "$p exited $? (see $out/passes.log)"
    file=$out/stage-$i.tilec
    i=$((i + 1))
  done
  printf '%s\n' "$file"
}

checks=0
check_file() {  # check_file FILE: 0 if good, 1 if bad; exit 125 aborts
  checks=$((checks + 1))
  local status=0
  "${check[@]}" "$1" >>"$out/checks.log" 2>&1 || status=$?
  [ "$status" -ne 125 ] || fail "the check cannot decide on a candidate (exit 125; see $out/checks.log)"
  [ "$fixed" = 1 ] && return $((status == 0))
  return $((status != 0))
}
if [ "$fixed" = 1 ]; then
  good_word=failing bad_word=passing first=fix
  good_file=$out/last-failing.tilec bad_file=$out/first-passing.tilec
else
  good_word=passing bad_word=failing first=bad
  good_file=$out/last-good.tilec bad_file=$out/first-bad.tilec
fi

# Decision counts per pass with every earlier pass complete.
full=$(run_with)
counts=()
total=0
for ((i = 0; i < ${#passes[@]}; i++)); do
  counts+=("$(applied_in "${passes[$i]}" "$out/stage-$i.tilec")")
  total=$((total + counts[i]))
done
cp "$full" "$out/all.tilec"

# The limits of candidate g: complete before the pass holding decision g,
# g - (decisions before) in it, 0 after.
limits_for() {
  local g=$1 before=0 i limits=()
  for ((i = 0; i < ${#passes[@]}; i++)); do
    if [ "$g" -ge $((before + counts[i])) ]; then
      limits+=("")
    elif [ "$g" -gt "$before" ]; then
      limits+=($((g - before)))
    else
      limits+=(0)
    fi
    before=$((before + counts[i]))
  done
  printf '%s\n' "${limits[@]}"
}
candidate() {  # candidate G: the output with the first G decisions
  local limits
  mapfile -t limits < <(limits_for "$1")
  run_with "${limits[@]}"
}

[ "$total" -gt 0 ] || fail "the passes applied no decision: nothing to bisect"
zero=$(candidate 0)
cp "$zero" "$out/none.tilec"
check_file "$out/none.tilec" || fail "the check is already $bad_word with no decision applied (see $out/checks.log): the cause is not a decision of ${passes[*]}"
check_file "$out/all.tilec" && fail "the check is still $good_word with all $total decisions applied: nothing to find"

good=0 bad=$total
cp "$out/none.tilec" "$good_file"
cp "$out/all.tilec" "$bad_file"
while [ $((bad - good)) -gt 1 ]; do
  mid=$(((good + bad) / 2))
  file=$(candidate "$mid")
  if check_file "$file"; then
    good=$mid
    cp "$file" "$good_file"
  else
    bad=$mid
    cp "$file" "$bad_file"
  fi
done

# Which pass holds decision `bad`, and its index there.
before=0
for ((i = 0; i < ${#passes[@]}; i++)); do
  if [ "$bad" -le $((before + counts[i])) ]; then break; fi
  before=$((before + counts[i]))
done
culprit=${passes[$i]} local_index=$((bad - before))
rm -f "$out"/stage-*.tilec "$out/none.tilec" "$out/all.tilec"
echo "first $first decision: $culprit #$local_index$([ "$pipeline" = 1 ] && echo " (#$bad of $total across ${passes[*]})")"
echo "  $(decision_text "$culprit" "$bad_file" "$local_index")"
echo "checks run: $checks (decisions: $total)"
echo "last $good_word: $good_file ($((bad - 1)) decisions)"
echo "first $bad_word: $bad_file ($bad decisions)"
