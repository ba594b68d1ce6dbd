# Shell functions for running the pipeline, sourced by scripts/compile.sh,
# scripts/bisect.sh, scripts/checks/* and the end-to-end tests. The pass
# order is passes/pipeline/PIPELINE; tools are found as $BIN/<tool>/<tool>
# (bazel-bin/tools from the repository, tools/ in a test's runfiles).
#
# Per-pass flags come from <PASS>_FLAGS in the environment, the pass name in
# capitals with '-' as '_' (PLAN_OWNERSHIP_FLAGS="--attempts=0").

TILEC_PIPELINE_FILE=${TILEC_PIPELINE_FILE:-passes/pipeline/PIPELINE}

# The pipeline's passes, one per line.
tilec_passes() {
  sed -e 's/#.*//' -e 's/^[[:space:]]*//' -e 's/[[:space:]]*$//' -e '/^$/d' \
    "$TILEC_PIPELINE_FILE"
}

# tilec_flags PASS: the words of $<PASS>_FLAGS.
tilec_flags() {
  local var
  var=$(printf '%s' "$1" | tr 'a-z-' 'A-Z_')_FLAGS
  printf '%s' "${!var:-}"
}

# tilec_tool BIN TOOL ARGS...: runs one tool.
tilec_tool() {
  local bin=$1 tool=$2
  shift 2
  "$bin/$tool/$tool" "$@"
}

# tilec_last_pass BIN FILE: the last pipeline pass in FILE's log, or
# import-model when it ran none.
tilec_last_pass() {
  local bin=$1 file=$2 pass last=import-model
  local log
  log=$(tilec_tool "$bin" dump-ir "$file" | sed -n 's/^pass \([a-z0-9-]*\).*/\1/p')
  for pass in $(tilec_passes); do
    if printf '%s\n' "$log" | grep -qx "$pass"; then last=$pass; fi
  done
  printf '%s\n' "$last"
}

# tilec_passes_after PASS: the pipeline's passes after PASS (all of them
# after import-model).
tilec_passes_after() {
  if [ "$1" = import-model ]; then
    tilec_passes
  else
    tilec_passes | sed -n "/^$1\$/,\$p" | sed 1d
  fi
}

# tilec_price_cache DIR: the price cache of the stages written in DIR. It
# stays after the run: compiling the same model again takes its prices (a
# cache of another build is not taken, and is replaced).
tilec_price_cache() {
  printf '%s\n' "$1/prices.tilec-prices"
}

# The flags that hand quantize-fp8's greedy plan of its output to
# plan-ownership, so that it is not planned twice (docs/planner.md,
# "Initial plan from quantize-fp8"): quantize-fp8 writing FILE saves it as
# FILE's .initial-plan.tilec (an older one removed first), and plan-ownership
# reading INPUT starts from INPUT's where it is there (the output is the
# same either way). Both tools come from one build here, as the plan must.
# Every pass also takes the planner's prices the passes before it made
# and saves its own for the passes after it, in FILE's directory
# (tilec_price_cache; docs/planner.md, "Price cache"), again with the same
# output either way.
# tilec_handoff_flags PASS INPUT FILE: prints one flag per line.
tilec_handoff_flags() {
  printf '%s\n' "--price_cache=$(tilec_price_cache "$(dirname -- "$3")")"
  case $1 in
    quantize-fp8)
      rm -f -- "${3%.tilec}.initial-plan.tilec"
      printf '%s\n' "--save_initial_plan=${3%.tilec}.initial-plan.tilec" ;;
    plan-ownership)
      if [ -f "${2%.tilec}.initial-plan.tilec" ]; then
        printf '%s\n' "--initial_plan=${2%.tilec}.initial-plan.tilec"
      fi ;;
  esac
}

# tilec_run_passes BIN OUT_DIR INPUT FIRST_INDEX PASS...: runs the passes in
# order from INPUT, keeping OUT_DIR/<i>-<pass>.tilec (i from FIRST_INDEX)
# and, with TILEC_DUMP=1, its dump-ir text; prints the last file's path.
tilec_run_passes() {
  local bin=$1 out=$2 input=$3 i=$4 pass handoff
  shift 4
  for pass in "$@"; do
    local file="$out/$i-$pass.tilec"
    mapfile -t handoff < <(tilec_handoff_flags "$pass" "$input" "$file")
    # shellcheck disable=SC2046
    tilec_tool "$bin" "$pass" $(tilec_flags "$pass") \
      "${handoff[@]+"${handoff[@]}"}" "$input" -o "$file" || return
    if [ "${TILEC_DUMP:-0}" = 1 ]; then
      tilec_tool "$bin" dump-ir "$file" -o "${file%.tilec}.txt" || return
    fi
    input=$file
    i=$((i + 1))
  done
  printf '%s\n' "$input"
}

# tilec_finish BIN FILE OUT_DIR: the rest of the pipeline after FILE's last
# pass; prints the device program's path (FILE itself if it is one).
tilec_finish() {
  local bin=$1 file=$2 out=$3
  # shellcheck disable=SC2046
  tilec_run_passes "$bin" "$out" "$file" 1 $(tilec_passes_after "$(tilec_last_pass "$bin" "$file")")
}

# tilec_out_dir SCRIPT CALLER OUT: OUT as an absolute path, a relative one
# taken in CALLER (the directory the user ran SCRIPT from, before it changed
# to the repository). An OUT starting with '-' is a forgotten OUT_DIR
# (`run.sh --f16`), refused with a usage line (exit 2): write ./-x for such
# a directory.
tilec_out_dir() {
  local script=$1 caller=$2 out=$3
  case $out in
    -*) echo "usage: scripts/$script OUT_DIR [flags...]: OUT_DIR comes first" \
          "(got '$out'; name a directory starting with '-' as ./$out)" >&2
        exit 2 ;;
    *) tilec_caller_path "$caller" "$out" ;;
  esac
}

# tilec_caller_path CALLER PATH: PATH as an absolute path, a relative one
# taken in CALLER (for the files a script's flags name: it runs in the
# repository).
tilec_caller_path() {
  case $2 in
    /*) printf '%s\n' "$2" ;;
    *) printf '%s\n' "$1/$2" ;;
  esac
}

# tilec_tools: the directory the scripts run tools from, $TILEC_TOOLS when
# set (prebuilt tools, e.g. a test's runfiles; nothing is built), else
# bazel-bin/tools after building them.
tilec_tools() {
  if [ -n "${TILEC_TOOLS:-}" ]; then
    printf '%s\n' "$TILEC_TOOLS"
    return
  fi
  tilec_unlocked bazel build --noshow_progress --ui_event_filters=-info //tools/... >&2 || return
  printf '%s\n' bazel-bin/tools
}

# tilec_unlocked CMD...: runs CMD without the descriptor that holds OUT's
# lock (tilec_lock_out), for commands that may leave a process behind: the
# Bazel server a first build starts outlives the script, and holding the
# lock it refused every later run into the same OUT until it stopped,
# hours later.
tilec_unlocked() {
  "$@" 9>&-
}

# tilec_lock_out SCRIPT OUT: makes OUT and takes its lock (OUT/.tilec-lock,
# held until the script exits), so that two runs cannot mix their stages in
# one OUT: a second run is refused (exit 2) naming the lock. The lock passes
# to child scripts through TILEC_OUT_LOCK (run.sh runs compile.sh); a child
# that may outlive the script runs through tilec_unlocked. Then
# removes the temporaries a killed tool left (PATH.tilec-tmp.PID, SIGKILL
# cannot be caught) whose process is gone.
tilec_lock_out() {
  local script=$1 out=$2 temp pid
  mkdir -p -- "$out"
  if [ "${TILEC_OUT_LOCK:-}" != "$out" ]; then
    exec 9>>"$out/.tilec-lock"
    if ! flock -n 9; then
      echo "$script: $out is in use by another run (lock $out/.tilec-lock);" \
        "wait for it or use another OUT_DIR" >&2
      exit 2
    fi
    export TILEC_OUT_LOCK=$out
  fi
  for temp in "$out"/*.tilec-tmp.*; do
    [ -e "$temp" ] || continue
    pid=${temp##*.tilec-tmp.}
    case $pid in '' | *[!0-9]*) continue ;; esac
    [ -d "/proc/$pid" ] || rm -f -- "$temp"
  done
}
