# Shell functions shared by scripts/fuzz.sh and the fuzz smoke test
# (//tools/fuzz:fuzz_smoke_test): build one libFuzzer target of tools/fuzz/
# with clang++-14, AddressSanitizer and UndefinedBehaviorSanitizer, make its
# seed corpus, run it. Sourced, not run.
#
# Every function takes the workspace root ROOT (sources), GEN (a directory
# holding Bazel's generated formats/tilec_generated.h and
# formats/embedded.cc) and the list of source labels Bazel's genquery
# //tools/fuzz:TARGET_sources wrote.

FUZZ_TARGETS="ir device_program recipe checkpoint"
FUZZ_CXX=${CXX:-clang++-14}

# fuzz_build TARGET ROOT GEN SOURCES_FILE OBJ_DIR BIN: compiles every .cc
# source of the list (two compilers at a time, reusing objects newer than
# their source) and links BIN.
fuzz_build() {
  local target=$1 root=$2 gen=$3 list=$4 obj=$5 bin=$6
  local flags=(-std=c++20 -O1 -g -fno-omit-frame-pointer
               -fsanitize=address,undefined -fno-sanitize-recover=undefined
               -fconstexpr-steps=100000000 -I"$root" -I"$gen")
  local sources objects=() pids=() src o
  sources=$(grep -v '^@' "$list" | grep '\.cc$' | sed 's|^//||;s|:|/|')
  for src in $sources formats/embedded.cc; do
    local path=$root/$src
    [ "$src" = formats/embedded.cc ] && path=$gen/$src
    o=$obj/$src.o
    objects+=("$o")
    if [ -e "$o" ] && [ "$o" -nt "$path" ] &&
       [ "$o" -nt "$gen/formats/tilec_generated.h" ]; then
      continue
    fi
    mkdir -p "$(dirname "$o")"
    "$FUZZ_CXX" "${flags[@]}" -fsanitize=fuzzer-no-link -c "$path" -o "$o" &
    pids+=($!)
    if [ ${#pids[@]} -ge 2 ]; then
      wait "${pids[0]}" || return 1
      pids=("${pids[@]:1}")
    fi
  done
  for p in "${pids[@]}"; do wait "$p" || return 1; done
  mkdir -p "$(dirname "$bin")"
  "$FUZZ_CXX" "${flags[@]}" -fsanitize=fuzzer "$root/tools/fuzz/${target}_fuzz.cc" \
    "${objects[@]}" -lflatbuffers -lglog -lgflags -lpthread -o "$bin"
}

# fuzz_seeds TARGET ROOT TOOLS SEEDS: the seed corpus in SEEDS, from
# ROOT/testdata and small modules made with the tools in TOOLS (a directory
# holding import-model, plan-ownership, expand-reduce and emit-device). For
# checkpoint, also writes SEEDS/../checkpoint-graph.tilec, the graph the
# target resumes on (export TILEC_FUZZ_GRAPH to it).
fuzz_seeds() {
  local target=$1 root=$2 tools=$3 seeds=$4
  local work
  work=$(dirname "$seeds")
  mkdir -p "$seeds"
  local small=(--preset=vit-b16-224 --tokens=10 --width=48 --mlp_width=96
               --heads=3 --target=tiny)
  case $target in
    ir|device_program)
      find "$root/testdata" -name '*.tilec' -size -4M | while read -r f; do
        cp "$f" "$seeds/$(basename "$f")"
      done
      "$tools/import-model" "${small[@]}" -o "$work/small.tilec" &&
        "$tools/plan-ownership" --attempts=4 "$work/small.tilec" \
          -o "$work/small-plan.tilec" 2>/dev/null &&
        "$tools/expand-reduce" "$work/small-plan.tilec" \
          -o "$work/small-reduce.tilec" 2>/dev/null &&
        "$tools/emit-device" "$work/small-reduce.tilec" \
          -o "$seeds/small-program.tilec" 2>/dev/null || return 1
      cp "$work/small.tilec" "$work/small-plan.tilec" "$work/small-reduce.tilec" "$seeds/"
      ;;
    recipe)
      local n=0
      find "$root/testdata" -name '*.recipe' | while read -r f; do
        sed -n 's/^op [0-9]*: //p' "$f" | while read -r line; do
          n=$((n + 1))
          printf '%s' "$line" > "$seeds/$(basename "$f").$n"
        done
      done
      printf 'all' > "$seeds/explain-all"
      printf '12' > "$seeds/explain-op"
      ;;
    checkpoint)
      "$tools/import-model" "${small[@]}" -o "$work/checkpoint-graph.tilec" &&
        "$tools/plan-ownership" --attempts=6 --checkpoint_every=2 \
          --checkpoint="$seeds/checkpoint.tilec" "$work/checkpoint-graph.tilec" \
          -o "$work/checkpoint-plan.tilec" 2>/dev/null || return 1
      ;;
  esac
}

# fuzz_run BIN CORPUS SEEDS CRASHES LOG BUDGET: BUDGET is seconds or
# -runs=N. Prints libFuzzer's last status line (executions, cov:, ft:);
# fails when the fuzzer found a crash, leak or sanitizer report.
fuzz_run() {
  local bin=$1 corpus=$2 seeds=$3 crashes=$4 log=$5 budget=$6
  mkdir -p "$corpus" "$crashes"
  # -seed=1: the smoke run's inputs are the same every time.
  local args=(-seed="${FUZZ_SEED:-1}" -artifact_prefix="$crashes/" -max_len=1048576 -rss_limit_mb=2048
              -timeout=30 -print_final_stats=1)
  case $budget in
    -runs=*) args+=("$budget") ;;
    *) args+=(-max_total_time="$budget") ;;
  esac
  local code=0
  "$bin" "${args[@]}" "$corpus" "$seeds" > "$log" 2>&1 || code=$?
  grep -E '^#[0-9]+' "$log" | tail -n 1
  grep -E '^stat::number_of_executed_units|^stat::peak_rss_mb' "$log" || true
  if [ $code -ne 0 ]; then
    echo "fuzz: $(basename "$bin") failed (exit $code); log $log, inputs in $crashes" >&2
    grep -m 5 -E 'ERROR|SUMMARY|runtime error|deadly signal' "$log" >&2 || true
    return 1
  fi
}
