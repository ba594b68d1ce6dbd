#!/usr/bin/env bash
# Benchmarks: speed and memory are measured here, not asserted by tests.
#   scripts/bench.sh            run every benchmark
#   scripts/bench.sh NAME...    run some (e.g. simulator)
#
# One function per benchmark, named bench_<name>; each builds what it needs
# and prints one result line starting with "<name>:". Add a section by
# adding a function (it is picked up by name; no list to edit).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=lib/pipeline.sh
. scripts/lib/pipeline.sh

# The pass chains below come from passes/pipeline/PIPELINE, so that a pass
# added there is benchmarked too. The lowering: the passes after
# plan-ownership other than fusion (expand-reduce, emit-device). The fusion:
# the fuse-* passes, which bench_fusion measures on and off.
lowering_passes() { tilec_passes_after plan-ownership | grep -v '^fuse-'; }
fusion_passes() { tilec_passes_after plan-ownership | grep '^fuse-'; }

# The device simulator on an ipu21-sized GEMM program: the so400m MLP
# up-projection (729x1152x4304, FP8, 3.61 G MACs) split over 1,458 tiles
# with a reduce-scatter of K partials. Reports host seconds per run and
# simulated MACs per second of host time (the so400m MLP block, 7.22 G MACs,
# should simulate in seconds).
bench_simulator() {
  bazel build --noshow_progress --ui_event_filters=-info //sim:simulator_bench
  bazel-bin/sim/simulator_bench --threads=2 --runs=3
}

# The exchange scheduler (kernels/exchange_schedule_bench.cc) on the so400m
# model's costliest phase shapes: host CPU seconds of the planner's price
# and of emit-device's schedule, and receiver by receiver for comparison.
bench_exchange() {
  bazel build -c opt --noshow_progress --ui_event_filters=-info //kernels:exchange_schedule_bench
  bazel-bin/kernels/exchange_schedule_bench --each
}

# The reference executor (batch 1, --threads=2, its default): host seconds,
# CPU seconds and peak RSS of run-reference on the so400m MLP block, a whole
# so400m encoder layer (attention included; 12.3 G MACs) and the whole
# so400m model (27 layers and the head, F16 as imported: its GEMMs run on
# OpenBLAS; bench_model runs it on the FP8 graph). Weight generation is
# part of every figure.
bench_reference() {
  bazel build --noshow_progress --ui_event_filters=-info \
    //tools/import-model //tools/run-reference
  local dir part what wall user sys kbytes
  dir=$(mktemp -d)
  for part in mlp-block layer model; do
    bazel-bin/tools/import-model/import-model --preset=siglip-so400m-384 \
      --part="$part" -o "$dir/$part.tilec"
    /usr/bin/time -f "%e %U %S %M" -o "$dir/time" \
      bazel-bin/tools/run-reference/run-reference "$dir/$part.tilec" -o "$dir/reference.txt"
    case $part in
      mlp-block) what="MLP block (7.22 G MACs)" ;;
      layer) what="encoder layer (12.3 G MACs)" ;;
      model) what="whole model, F16 (27 layers and head)" ;;
    esac
    read -r wall user sys kbytes < "$dir/time"
    awk -v w="$what" -v e="$wall" -v u="$user" -v s="$sys" -v k="$kbytes" \
      'BEGIN { printf "reference: so400m %s in %.2f s host, %.2f s CPU, %.0f MB peak RSS\n", w, e, u + s, k / 1024 }'
  done
  rm -rf "$dir"
}

# The GEMM kernel alone (kernels/gemm_benchmark.cc): per-tile FP8/F16/F32
# shapes of the simulator and the reference's whole-matrix F32 shapes, in
# GMAC/s on one thread; then the BLAS path on the whole-matrix shapes with
# F32, FP8 and F16 values (OpenBLAS, or the AMX units where the host has
# them), on one and two threads.
bench_gemm() {
  bazel build --noshow_progress --ui_event_filters=-info //kernels:gemm_benchmark
  bazel-bin/kernels/gemm_benchmark | sed 's/^/gemm: /'
}

# plan-ownership on the so400m MLP block (batch 1, ipu21), F16 and after
# quantize-fp8 (FP8 GEMM operands in the graph): the chosen GEMM splits and
# staging, per-op estimated cycles, total and peak bytes per tile against
# docs/machine.md's FP8 compute floor (38,367.6 cycles); host time for 0, 64 and
# 1,000 attempts; and the trace's pinned plan
# (testdata/plan-ownership/siglip-trace.recipe) against the searched one.
bench_planner() {
  bazel build -c opt --noshow_progress --ui_event_filters=-info \
    //tools/import-model //tools/quantize-fp8 //tools/plan-ownership //tools/dump-ir
  local bin=bazel-bin/tools dir
  dir=$(mktemp -d)
  "$bin/import-model/import-model" -o "$dir/f16-mlp.tilec"
  "$bin/quantize-fp8/quantize-fp8" "$dir/f16-mlp.tilec" -o "$dir/fp8-mlp.tilec"
  local dtype attempts start end
  for dtype in f16 fp8; do
    for attempts in 0 64 1000; do
      start=$(date +%s.%N)
      "$bin/plan-ownership/plan-ownership" --attempts=$attempts \
        "$dir/$dtype-mlp.tilec" -o "$dir/$dtype-$attempts.tilec" 2>"$dir/log"
      end=$(date +%s.%N)
      awk -v s="$start" -v e="$end" -v d="$dtype" -v a="$attempts" \
        -v line="$(tail -n 1 "$dir/log" | sed 's/^plan-ownership: //')" \
        'BEGIN { printf "planner: %s, --attempts=%d: %.2f s host; %s\n", d, a, e - s, line }'
    done
    "$bin/plan-ownership/plan-ownership" --attempts=1000 \
      --recipe=testdata/plan-ownership/siglip-trace.recipe \
      "$dir/$dtype-mlp.tilec" -o "$dir/$dtype-trace.tilec" 2>/dev/null
    local plan
    for plan in 1000 trace; do
      "$bin/dump-ir/dump-ir" "$dir/$dtype-$plan.tilec" | awk -v d="$dtype" -v p="$plan" '
        /^ops:/ { on = 1; next }
        /^pass / { on = 0 }
        on && /est cycles=/ {
          id = $1; kind = $2; name = $3
          recipe = $0; sub(/.*recipe=/, "", recipe); sub(/ \| est.*/, "", recipe)
          sub(/ "[^"]*"/, "", recipe)
          est = $0; sub(/.* est cycles=/, "", est); split(est, f, " ")
          cycles = f[1]; total += cycles
          peak = $0; sub(/.* peak=/, "", peak); if (peak + 0 > max) max = peak + 0
          printf "planner:   %s %-6s %-12s %-62s %8d cycles\n", (p == "trace" ? "trace " : "search"), id, kind, recipe, cycles
        }
        END {
          printf "planner: %s %s plan: total %d cycles, peak %d B per tile of 481152; FP8 compute floor 38367.6 (docs/machine.md), hardware MLP block 151998\n", d, (p == "trace" ? "trace-pinned" : "searched (1000 attempts)"), total, max
        }'
    done
  done
  rm -rf "$dir"
}

# The lowering on the so400m MLP block (batch 1, ipu21): plan-ownership ->
# expand-reduce -> emit-device -> simulate-device against the reference, for
# the searched plan and the trace's pinned plan, in F16 and with FP8 GEMMs
# from quantize-fp8 (calibrated scales, casts placed by cost;
# docs/quantize.md). Prints host seconds per stage, per-op planner
# estimate / lowered alone (emit-device's own price of the op) / simulated
# (the simulator's attribution), their ratio, bytes exchanged, peak memory
# per tile and the comparison with the (bit-faithful) reference; for FP8
# also quantize-fp8's placements and its accuracy against the unquantized
# graph.
# so400m_blocks DIR [PART]: DIR/f16.tilec, the so400m MLP block (or PART,
# e.g. layer), and DIR/fp8.tilec, the same through quantize-fp8 (its dump-ir
# text in DIR/fp8.txt).
so400m_blocks() {
  local bin=bazel-bin/tools dir=$1 part=${2:-mlp-block}
  bazel build --noshow_progress --ui_event_filters=-info //tools/...
  "$bin/import-model/import-model" --part="$part" -o "$dir/f16.tilec"
  "$bin/quantize-fp8/quantize-fp8" "$dir/f16.tilec" -o "$dir/fp8.tilec"
  "$bin/dump-ir/dump-ir" "$dir/fp8.tilec" > "$dir/fp8.txt"
}

# quantize_log NAME FILE: quantize-fp8's decisions in FILE's dump-ir text,
# one line each, prefixed "NAME: ".
quantize_log() {
  awk -v n="$1" '/^pass / { on = ($2 ~ /^quantize-fp8/); next } on && NF { sub(/^ +/, ""); print n ": quantize-fp8: " $0 }' "$2"
}

# lower_and_report BENCH NAME DIR INPUT [plan-ownership flags...]:
# plan-ownership and the lowering passes on INPUT, then simulate-device;
# prints "BENCH: NAME: ..." lines: host seconds per stage, per-op estimate /
# emit-device alone / simulated, memory and the comparison with the
# reference.
lower_and_report() {
  local bin=bazel-bin/tools bench=$1 name=$2 dir=$3 input=$4
  shift 4
  local start end times status=0 i=1 pass before
  start=$(date +%s.%N)
  "$bin/plan-ownership/plan-ownership" "$@" "$input" -o "$dir/$name-1.tilec" 2>/dev/null
  end=$(date +%s.%N)
  times=$(awk -v s="$start" -v e="$end" 'BEGIN { printf "plan %.2f", e - s }')
  for pass in $(lowering_passes); do
    start=$end
    # shellcheck disable=SC2046
    tilec_tool "$bin" "$pass" $(tilec_flags "$pass") "$dir/$name-$i.tilec" \
      -o "$dir/$name-$((i + 1)).tilec"
    end=$(date +%s.%N)
    times+=$(awk -v p="$pass" -v s="$start" -v e="$end" 'BEGIN { printf ", %s %.2f", p, e - s }')
    i=$((i + 1))
  done
  start=$end
  "$bin/simulate-device/simulate-device" "$dir/$name-$i.tilec" \
    -o "$dir/$name.report" || status=$?
  end=$(date +%s.%N)
  # Estimates from the last pass's input, the lowering from its output.
  before=$(( i > 1 ? i - 1 : 1 ))
  "$bin/dump-ir/dump-ir" "$dir/$name-$before.tilec" > "$dir/$name-plan.txt"
  "$bin/dump-ir/dump-ir" "$dir/$name-$i.tilec" > "$dir/$name-device.txt"
  awk -v bench="$bench" -v n="$name" -v t="$times" -v s="$start" -v e="$end" \
      -v mb="$(du -m "$dir/$name-$i.tilec" | cut -f1)" 'BEGIN {
    printf "%s: %s: host s: %s (program %d MB), simulate %.2f\n", bench, n, t, mb, e - s }'
  # Per op: planner estimate, emit-device alone, simulated (attributed).
  awk -v bench="$bench" -v n="$name" '
    FNR == 1 { file++ }
    file == 1 && /^  \([0-9]+\) .* est cycles=/ {
      id = $1; gsub(/[()]/, "", id); name[id] = $3; sub(/:$/, "", name[id])
      e = $0; sub(/.* est cycles=/, "", e); split(e, f, " "); est[id] = f[1]
      order[++k] = id }
    file == 2 && /"lowered \(/ {
      id = $0; sub(/.*"lowered \(/, "", id); sub(/\).*/, "", id)
      a = $0; sub(/.* cycles [0-9]+ -> /, "", a); sub(/ .*/, "", a); alone[id] = a }
    file == 3 && /^ops \(/ { on = 1; next }
    # The column headed "total", wherever the report puts it.
    file == 3 && on && $1 == "op" { for (c = 1; c <= NF; c++) if ($c == "total") col = c; next }
    file == 3 && on && /^ *[0-9]+ / { sim[$1] = $col }
    file == 3 && on && /^$/ { on = 0 }
    END {
      printf "%s: %s: %4s %-40s %9s %9s %9s %6s\n", bench, n, "op", "name", "estimate", "alone", "simulated", "ratio"
      for (i = 1; i <= k; i++) {
        id = order[i]; te += est[id]; ts += sim[id]
        printf "%s: %s: %4s %-40s %9d %9d %9d %6.2f\n", bench, n, id, name[id], est[id], alone[id], sim[id], (est[id] > 0 ? sim[id] / est[id] : 0)
      }
      printf "%s: %s: %4s %-40s %9d %9s %9d %6.3f\n", bench, n, "", "total", te, "", ts, (te > 0 ? ts / te : 0)
    }' "$dir/$name-plan.txt" "$dir/$name-device.txt" "$dir/$name.report"
  sed -n 's/^total: /'"$bench: $name"': simulated /p; s/^work: /'"$bench: $name"': /p; s/^memory: /'"$bench: $name"': memory: /p' "$dir/$name.report"
  sed -n 's/^  \(%[0-9]* .*\)/'"$bench: $name"': \1/p; s/^result: /'"$bench: $name"': result: /p' "$dir/$name.report"
  [ "$status" -eq 0 ] || { echo "$bench: $name: simulate-device exited $status" >&2; return 1; }
}

bench_lowering() {
  local dir dtype plan status=0
  dir=$(mktemp -d)
  so400m_blocks "$dir"
  quantize_log lowering "$dir/fp8.txt"
  for dtype in f16 fp8; do
    for plan in search trace; do
      local flags=()
      [ "$plan" = trace ] && flags=(--recipe=testdata/plan-ownership/siglip-trace.recipe)
      lower_and_report lowering "$dtype-$plan" "$dir" "$dir/$dtype.tilec" "${flags[@]}" ||
        { status=1; break 2; }
    done
  done
  rm -rf "$dir"
  return $status
}

# A whole so400m encoder layer (batch 1, ipu21), F16 and through
# quantize-fp8 as in bench_lowering: attention on per-head grids, the
# per-op figures to set beside docs/machine.md's hardware layer.
bench_layer() {
  local dir dtype status=0
  dir=$(mktemp -d)
  so400m_blocks "$dir" layer
  quantize_log layer "$dir/fp8.txt"
  for dtype in f16 fp8; do
    lower_and_report layer "$dtype" "$dir" "$dir/$dtype.tilec" || { status=1; break; }
  done
  rm -rf "$dir"
  return $status
}

# fuse-elementwise and fuse-residual on the so400m MLP block (batch 1,
# ipu21), F16 and FP8 GEMM inputs (the FP8 module of bench_lowering), the
# searched and the trace-pinned plan, and two MLP blocks
# (import-model --layers=2) for fuse-residual: plan cycles before and after
# each pass (estimates), each region's decision, and the simulated cycles
# with and without fusion (docs/fusion.md).
bench_fusion() {
  local bin=bazel-bin/tools dir
  dir=$(mktemp -d)
  so400m_blocks "$dir"
  "$bin/import-model/import-model" --layers=2 -o "$dir/two.tilec"
  local name
  for name in f16-search f16-trace fp8-search fp8-trace two-search; do
    local input=${name%-*} flags=()
    [ "${name#*-}" = trace ] && flags=(--recipe=testdata/plan-ownership/siglip-trace.recipe)
    "$bin/plan-ownership/plan-ownership" "${flags[@]}" "$dir/$input.tilec" \
      -o "$dir/$name-plan.tilec" 2>/dev/null
    mkdir -p "$dir/$name-fuse"
    # shellcheck disable=SC2046
    cp "$(tilec_run_passes "$bin" "$dir/$name-fuse" "$dir/$name-plan.tilec" 1 \
      $(fusion_passes))" "$dir/$name-fused.tilec"
    local stage program
    for stage in plan fused; do
      mkdir -p "$dir/$name-$stage"
      # shellcheck disable=SC2046
      program=$(tilec_run_passes "$bin" "$dir/$name-$stage" "$dir/$name-$stage.tilec" 2 \
        $(lowering_passes))
      "$bin/simulate-device/simulate-device" "$program" \
        -o "$dir/$name-$stage.report" || { echo "fusion: $name $stage: simulate-device failed" >&2; rm -rf "$dir"; return 1; }
      local est
      est=$("$bin/dump-ir/dump-ir" "$dir/$name-$stage.tilec" | awk '/^ops:/ { on = 1; next } /^pass / { on = 0 }
        on && /est cycles=/ { e = $0; sub(/.* est cycles=/, "", e); split(e, f, " "); t += f[1] } END { print t }')
      printf 'fusion: %s: %-5s estimate %d, simulated %s\n' "$name" \
        "$([ $stage = plan ] && echo unfused || echo fused)" "$est" \
        "$(sed -n 's/^total: \([0-9]*\) cycles.*/\1/p' "$dir/$name-$stage.report")"
    done
    "$bin/dump-ir/dump-ir" "$dir/$name-fused.tilec" | awk -v n="$name" '
      /^pass fuse-/ { pass = $2; sub(/:$/, "", pass); next }
      /^pass / { pass = "" }
      pass != "" && /(accepted|rejected|info)/ { sub(/^ */, ""); printf "fusion: %s: %s: %s\n", n, pass, $0 }'
  done
  rm -rf "$dir"
}

# F16 against FP8 on the so400m MLP block (batch 1, ipu21) through the
# default pipeline (scripts/compile.sh, searched plan; --f16 for F16):
# simulated cycles and the planner's estimate of each, quantize-fp8's
# placements and accuracy against the unquantized graph, and the
# simulator's bit-faithful comparison of each program with its reference.
bench_fp8() {
  local bin=bazel-bin/tools dir dtype
  dir=$(mktemp -d)
  local sims=()
  for dtype in f16 fp8; do
    local flags=() last
    [ "$dtype" = f16 ] && flags=(--f16)
    last=$(scripts/compile.sh "$dir/$dtype" "${flags[@]}" | tail -n 1)
    "$bin/simulate-device/simulate-device" "$last" -o "$dir/$dtype.report"
    local sim est
    sim=$(sed -n 's/^total: \([0-9]*\) cycles.*/\1/p' "$dir/$dtype.report")
    est=$(sed -n 's/.*| est cycles=\([0-9]*\) .*/\1/p' "${last%.tilec}.txt" | awk '{ s += $1 } END { print s + 0 }')
    sims+=("$sim")
    echo "fp8: $dtype: simulated $sim cycles, planner estimate $est"
    sed -n 's/^result: /fp8: '"$dtype"': against its own reference: /p' "$dir/$dtype.report"
    sed -n '/^comparison with the unquantized/,/^result/{/^  %/s/^  /fp8: '"$dtype"': against the unquantized graph: /p}' "$dir/$dtype.report"
  done
  quantize_log fp8 "$dir/fp8/1-quantize-fp8.txt"
  awk -v a="${sims[0]}" -v b="${sims[1]}" 'BEGIN { printf "fp8: FP8 / F16 simulated cycles = %.3f\n", b / a }'
  rm -rf "$dir"
}

# Every GEMM of the so400m MLP block (searched plans, F16 and FP8 inputs)
# against the best its grid and any grid allow by the formulas alone
# (inspect-gemms; passes/plan/gemm_bound.h): grid, calls per tile,
# estimated and simulated cycles, % of AMP peak, simulated / bound. Then
# the so400m encoder layer through the default pipeline (FP8,
# scripts/compile.sh): its MatMuls and the attention GEMMs Q·Kᵀ and P·V.
bench_gemm_bound() {
  local bin=bazel-bin/tools dir dtype last
  dir=$(mktemp -d)
  so400m_blocks "$dir"
  for dtype in f16 fp8; do
    "$bin/plan-ownership/plan-ownership" "$dir/$dtype.tilec" -o "$dir/$dtype-1.tilec" 2>/dev/null
    mkdir -p "$dir/$dtype"
    # shellcheck disable=SC2046
    last=$(tilec_run_passes "$bin" "$dir/$dtype" "$dir/$dtype-1.tilec" 2 $(lowering_passes))
    "$bin/inspect-gemms/inspect-gemms" "$last" | sed "s/^/gemm_bound: $dtype: /"
  done
  last=$(scripts/compile.sh "$dir/layer" --part=layer 2>/dev/null | tail -n 1)
  "$bin/inspect-gemms/inspect-gemms" "$last" | sed "s/^/gemm_bound: layer fp8: /"
  rm -rf "$dir"
}

# ---------------------------------------------------------------- driver

# import-onnx on an ONNX model with SigLIP so400m/14's shapes (27 layers,
# 729 tokens, width 1152, random weights; 1.66 GB): host seconds and peak
# RSS. The model is $SO400M_ONNX (default out/so400m.onnx), made once by
# testdata/onnx-vit/export_vit.py --so400m PATH (python3-torch; about 12
# minutes and 11 GB).
bench_import_onnx() {
  local model=${SO400M_ONNX:-out/so400m.onnx}
  if [ ! -f "$model" ]; then
    echo "import_onnx: no $model (testdata/onnx-vit/export_vit.py --so400m $model makes it)"
    return 0
  fi
  bazel build --noshow_progress --ui_event_filters=-info //tools/import-onnx //tools/dump-ir
  local dir
  dir=$(mktemp -d)
  /usr/bin/time -f "%e %M" -o "$dir/time" \
    bazel-bin/tools/import-onnx/import-onnx "$model" -o "$dir/so400m.tilec"
  read -r seconds kbytes < "$dir/time"
  local ops
  ops=$(bazel-bin/tools/dump-ir/dump-ir "$dir/so400m.tilec" 2>/dev/null | grep -c '^  (' || true)
  rm -rf "$dir"
  awk -v s="$seconds" -v k="$kbytes" -v o="$ops" \
    'BEGIN { printf "import_onnx: so400m-shaped model (1.66 GB) in %.1f s host, peak RSS %.2f GB, %d ops\n", s, k / 1048576, o }'
}

# A whole model (issue 12, docs/repeat.md), so400m by default: batch 1, FP8, ipu21,
# every layer's weights resident, the 27 layers one repeat. Host seconds
# and peak RSS of each stage from import to device program, the program's
# size on disk, simulate-device with and without running the kernels, the
# report page (inspect-program), simulated cycles and time beside the seed's compiler on hardware
# (10,088,124 cycles; 16,065,444 at batch 2) and Graphcore's SDK (17.8 M), the simulator's
# comparison and the accuracy against the unquantized graph.
# BENCH_MODEL_FLAGS adds import-model flags (e.g. "--batch=2",
# "--preset=vit-b16-224"); BENCH_MODEL_DIR keeps the stages (default: a
# temporary directory, removed).
bench_model() {
  bazel build --noshow_progress --ui_event_filters=-info //tools/...
  local bin=bazel-bin/tools dir=${BENCH_MODEL_DIR:-$(mktemp -d)} input pass i=1
  local handoff
  mkdir -p "$dir"
  # shellcheck disable=SC2086
  /usr/bin/time -f "%e %M" -o "$dir/time" "$bin/import-model/import-model" \
    --part=model ${BENCH_MODEL_FLAGS:-} -o "$dir/0-import-model.tilec"
  model_stage_line import-model "$dir/time" "$dir/0-import-model.tilec"
  input=$dir/0-import-model.tilec
  # Measured cold: without the prices a run in the same directory made.
  rm -f -- "$(tilec_price_cache "$dir")"
  for pass in $(tilec_passes); do
    # The initial plan quantize-fp8 hands to plan-ownership and the price
    # cache every pass takes and extends, as scripts/compile.sh runs them.
    mapfile -t handoff < <(tilec_handoff_flags "$pass" "$input" "$dir/$i-$pass.tilec")
    /usr/bin/time -f "%e %M" -o "$dir/time" "$bin/$pass/$pass" \
      "${handoff[@]+"${handoff[@]}"}" "$input" \
      -o "$dir/$i-$pass.tilec" 2>"$dir/$pass.log" || { cat "$dir/$pass.log" >&2; return 1; }
    model_stage_line "$pass" "$dir/time" "$dir/$i-$pass.tilec"
    if [ "$pass" = quantize-fp8 ]; then
      # The reference on the quantized graph (FP8 MatMuls in the tile
      # kernels' k order, the rest on OpenBLAS; sim/reference.h), before
      # a later stage can fail.
      /usr/bin/time -f "%e %M" -o "$dir/time" "$bin/run-reference/run-reference" \
        "$dir/$i-$pass.tilec" -o "$dir/reference.txt"
      model_stage_line "run-reference (FP8 graph)" "$dir/time"
    fi
    input=$dir/$i-$pass.tilec
    i=$((i + 1))
  done
  /usr/bin/time -f "%e %M" -o "$dir/time" "$bin/simulate-device/simulate-device" \
    --execute=false "$input" -o "$dir/cycles.txt"
  model_stage_line "simulate-device --execute=false" "$dir/time"
  local status=0
  # The whole model's own floor against the unquantized graph (scripts/run.sh).
  /usr/bin/time -f "%e %M" -o "$dir/time" "$bin/simulate-device/simulate-device" \
    --min_unquantized_cosine=0.99 "$input" -o "$dir/simulate.txt" \
    --json-report="$dir/simulate.json" || status=$?
  model_stage_line "simulate-device" "$dir/time"
  # The report page, as scripts/run.sh writes it after the simulation.
  /usr/bin/time -f "%e %M" -o "$dir/time" "$bin/inspect-program/inspect-program" \
    "$input" --simulation="$dir/simulate.json" -o "$dir/report.html" || status=1
  model_stage_line "inspect-program (the report page)" "$dir/time"
  sed -n 's/^/model: /; /^model: total:/p; /^model: repeat /p; /^model: memory:/p' "$dir/simulate.txt"
  awk -v c="$(sed -n 's/^total: \([0-9]*\) cycles.*/\1/p' "$dir/simulate.txt")" \
      -v clock="$(sed -n 's/^simulate-device: .* \([0-9.]*\) GHz.*/\1/p' "$dir/simulate.txt")" \
      -v model="$("$bin/dump-ir/dump-ir" "$dir/0-import-model.tilec" | sed -n 's/^model: //p')" 'BEGIN {
    printf "model: %d cycles = %.3f ms at %s GHz", c, c / (clock * 1e6), clock
    # The yardsticks were measured on the whole so400m model only: batch 1
    # on the seed and the SDK, batch 2 on the seed.
    whole = model ~ /^siglip-so400m-384 part=model /
    if (whole && model ~ / batch=1 /)
      printf "; the seed on hardware 10,088,124 (%.3fx), Graphcore SDK 17.8 M (%.3fx)", c / 10088124, c / 17.8e6
    else if (whole && model ~ / batch=2 /)
      printf "; the seed on hardware 16,065,444 (%.3fx)", c / 16065444
    printf "\n" }'
  sed -n 's/^/model: /; /^model:   %.*\(PASS\|FAIL\)/p; /^model: result:/p' "$dir/simulate.txt"
  [ -n "${BENCH_MODEL_DIR:-}" ] || rm -rf "$dir"
  return $status
}

# The host-time table (wall seconds and peak RSS): every stage of the whole
# so400m model at batch 1 and at batch 2 (bench_model, the reference, the
# simulator with and without execution and the report page), then the README's main
# command (scripts/run.sh, the MLP block) from the built tree. Each line
# starts "host: batch N:" or "host: run.sh:".
bench_host() {
  local batch status=0 out start end
  out=$(mktemp -d)
  for batch in 1 2; do
    BENCH_MODEL_FLAGS="--batch=$batch" bench_model >"$out/model.txt" || status=1
    sed "s/^model: /host: batch $batch: /" "$out/model.txt"
  done
  start=$(date +%s.%N)
  scripts/run.sh "$out/mlp" >"$out/run.log" 2>&1 || { cat "$out/run.log" >&2; status=1; }
  end=$(date +%s.%N)
  awk -v a="$start" -v b="$end" -v cycles="$(sed -n 's/^simulated: \([0-9]*\) cycles.*/\1/p' "$out/run.log")" \
    'BEGIN { printf "host: run.sh: the README main command (MLP block, %s cycles): %.1f s wall\n", cycles, b - a }'
  rm -rf "$out"
  return $status
}

# model_stage_line NAME TIME_FILE [OUTPUT]: "model: NAME: S s, R MB peak RSS[, output B]".
model_stage_line() {
  local seconds kbytes size=""
  read -r seconds kbytes < "$2"
  [ -z "${3:-}" ] || size=$(stat -c %s "$3")
  awk -v n="$1" -v s="$seconds" -v k="$kbytes" -v b="$size" 'BEGIN {
    printf "model: %s: %.1f s host, %.0f MB peak RSS%s\n", n, s, k / 1024, (b == "" ? "" : sprintf(", output %.1f MB", b / 1048576)) }'
}

main() {
  local names=("$@")
  if [ ${#names[@]} -eq 0 ]; then
    mapfile -t names < <(declare -F | awk '{print $3}' | sed -n 's/^bench_//p')
  fi
  local failed=0
  for name in "${names[@]}"; do
    if ! declare -F "bench_$name" >/dev/null; then
      echo "bench.sh: no benchmark '$name'" >&2
      failed=1
      continue
    fi
    "bench_$name" || { echo "$name: FAILED" >&2; failed=1; }
  done
  return $failed
}

main "$@"
