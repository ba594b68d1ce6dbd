# Shell functions shared by scripts/fuzz.sh and the fuzz smoke test
# (//tools/fuzz:fuzz_smoke_test): build one libFuzzer target of tools/fuzz/
# with clang++-14, AddressSanitizer and UndefinedBehaviorSanitizer, make its
# seed corpus, run it. Sourced, not run.
#
# Every function takes the workspace root ROOT (sources), GEN (a directory
# holding Bazel's generated formats/tilec_generated.h and
# formats/embedded.cc) and the list of source labels Bazel's genquery
# //tools/fuzz:TARGET_sources wrote. Tools are found as BIN/<tool>/<tool>
# and the pass chain is passes/pipeline/PIPELINE, as in scripts/lib/pipeline.sh
# (sourced here, so the caller's directory is the workspace or runfiles root).

# shellcheck source=pipeline.sh
. scripts/lib/pipeline.sh

FUZZ_TARGETS="ir device_program recipe checkpoint onnx safetensors npy policy target simulation"
FUZZ_CXX=${CXX:-clang++-14}

# fuzz_build TARGET ROOT GEN SOURCES_FILE OBJ_DIR BIN: compiles every .cc
# source of the list (two compilers at a time, reusing objects newer than
# their source) and links BIN.
fuzz_build() {
  local target=$1 root=$2 gen=$3 list=$4 obj=$5 bin=$6
  local flags=(-std=c++20 -O1 -g -fno-omit-frame-pointer
               -fsanitize=address,undefined -fno-sanitize-recover=undefined
               -fconstexpr-steps=100000000 -DONNX_NAMESPACE=onnx -DONNX_ML=1
               -I"$root" -I"$gen")
  local libs=(-lflatbuffers -lglog -lgflags -lpthread)
  [ "$target" = onnx ] && libs+=(-lonnx_proto -lprotobuf)
  # The reference executor's OpenBLAS (//third_party/system:openblas).
  if grep -qx '//kernels:blas.cc' "$list"; then
    flags+=(-I/usr/include/x86_64-linux-gnu/openblas-pthread)
    libs+=(-lopenblas)
  fi
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
    "${objects[@]}" "${libs[@]}" -o "$bin"
}

# fuzz_small_program BIN WORK: a small ViT layer for the tiny target and
# its stages through the default pipeline: WORK/small.tilec, then
# WORK/small-stages/<i>-<pass>.tilec, the last one also as
# WORK/small-program.tilec (the device program).
fuzz_small_program() {
  local bin=$1 work=$2 program
  rm -rf "$work/small-stages"
  mkdir -p "$work/small-stages"
  tilec_tool "$bin" import-model --preset=vit-b16-224 --tokens=10 --width=48 \
    --mlp_width=96 --heads=3 --target=tiny -o "$work/small.tilec" || return 1
  # A short search: the seeds need a valid plan, not a good one.
  # shellcheck disable=SC2046
  program=$(PLAN_OWNERSHIP_FLAGS=--attempts=4 tilec_run_passes "$bin" \
    "$work/small-stages" "$work/small.tilec" 1 $(tilec_passes) 2>/dev/null) &&
    cp "$program" "$work/small-program.tilec"
}

# fuzz_seeds TARGET ROOT BIN HOSTILE SEEDS: the seed corpus in SEEDS, from
# ROOT/testdata and small modules made with the tools in BIN (import-model,
# the pipeline's passes and simulate-device) and HOSTILE (the make_hostile
# binary). For checkpoint and policy, also writes
# SEEDS/../checkpoint-graph.tilec, the graph the target parses against
# (export TILEC_FUZZ_GRAPH to it).
fuzz_seeds() {
  local target=$1 root=$2 bin=$3 hostile=$4 seeds=$5
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
      fuzz_small_program "$bin" "$work" || return 1
      cp "$work/small.tilec" "$seeds/"
      local stage
      for stage in "$work"/small-stages/*.tilec; do
        cp "$stage" "$seeds/small-$(basename "$stage")"
      done
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
      tilec_tool "$bin" import-model "${small[@]}" -o "$work/checkpoint-graph.tilec" &&
        tilec_tool "$bin" plan-ownership --attempts=6 --checkpoint_every=2 \
          --checkpoint="$seeds/checkpoint.tilec" "$work/checkpoint-graph.tilec" \
          -o "$work/checkpoint-plan.tilec" 2>/dev/null || return 1
      ;;
    onnx)
      cp "$root"/testdata/onnx-vit/*.onnx "$seeds/"
      # One model of each ONNX node test whose directory name is a plain op.
      local d
      for d in /usr/share/libonnx-testdata/data/node/test_{matmul_2d,gemm_default_no_bias,gemm_transposeB,add,add_bcast,reshape_reordered_all_dims,transpose_default,softmax_axis_1,gather_0,concat_2d_axis_0,slice,unsqueeze_axis_0,cast_FLOAT_to_FLOAT16,layer_normalization_2d_axis1,erf,range_float_type_positive_delta,shape,expand_dim_changed,div,mul,pow,sqrt,reduce_mean_default_axes_keepdims_example}; do
        [ -f "$d/model.onnx" ] && cp "$d/model.onnx" "$seeds/$(basename "$d").onnx"
      done
      # External data inside the sandbox, and a path leaving it.
      "$hostile" onnx "$seeds/external.onnx" weights.bin &&
        "$hostile" onnx "$seeds/external-up.onnx" ../outside.bin ||
        return 1
      ;;
    safetensors)
      python3 "$root/testdata/import-model/safetensors_checkpoint.py" write \
        "$seeds" 8 16 2 > /dev/null || return 1
      ;;
    npy)
      find "$root/testdata" -name '*.npy' -size -64k | while read -r f; do
        cp "$f" "$seeds/$(basename "$(dirname "$f")")-$(basename "$f")"
      done
      ;;
    policy)
      cp "$root"/testdata/quantize-fp8/*.policy "$seeds/"
      tilec_tool "$bin" import-model "${small[@]}" -o "$work/checkpoint-graph.tilec" ||
        return 1
      ;;
    target)
      cp "$root"/formats/targets/*.json "$root"/testdata/hardening/target-*.json \
        "$seeds/"
      ;;
    simulation)
      fuzz_small_program "$bin" "$work" &&
        tilec_tool "$bin" simulate-device --report=json "$work/small-program.tilec" \
          -o "$seeds/small.json" 2>/dev/null &&
        tilec_tool "$bin" simulate-device --report=json --compare=false \
          "$work/small-program.tilec" -o "$seeds/small-nocompare.json" \
          2>/dev/null || return 1
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
