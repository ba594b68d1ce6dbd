#!/usr/bin/env bash
# reliability_test.sh GOLDEN TRANSCRIPT_SH FILE...: issue 28's items 3 to 20, each case
# making its own input (make_onnx, make_hostile, safetensors_checkpoint.py
# or a few lines here), running one tool or script and recording command,
# exit code and message into a transcript compared with GOLDEN (the work
# directory shows as WORK; tools/testing/transcript.sh). A failing case
# must print exactly one line and leave no output. FILE...: the tools, make_onnx, make_hostile and
# safetensors_checkpoint.py, found by base name; the scripts come from the
# runfiles' scripts/. With UPDATE_GOLDENS=1 under `bazel run`, rewrites
# GOLDEN instead.
set -uo pipefail
golden=$PWD/$1
transcript=$PWD/$2
shift 2
scripts=$PWD/scripts
bin=$(mktemp -d)
work=$(mktemp -d)
trap 'rm -rf "$bin" "$work"' EXIT
for file in "$@"; do ln -s "$PWD/$file" "$bin/$(basename "$file")"; done
cd "$work"
export PATH="$bin:$PATH"

actual=$work/actual
: > "$actual"
problems=0
# shellcheck source=../../tools/testing/transcript.sh
. "$transcript"
note() { echo "# $*" >> "$actual"; }
same() {  # same A B: A still has B's bytes
  cmp -s "$1" "$2" || { echo "$1 was changed" >&2; problems=$((problems + 1)); }
}

small=(--preset=vit-b16-224 --tokens=10 --width=48 --mlp_width=96 --heads=3 --target=tiny)
make_onnx huge-init model.onnx
cp model.onnx model.orig
W=32 M=48 L=2
ckflags=(--preset=siglip-so400m-384 --part=model --layers=$L --tokens=16 --patch=4
         --width=$W --mlp_width=$M --heads=2)
mkdir ck
python3 "$bin/safetensors_checkpoint.py" write ck $W $M $L > /dev/null
cp ck/ckpt-F32.safetensors ckpt.orig

note "3. no output over an input, no two outputs on one path"
case_ 2 import-onnx model.onnx --sidecar=model.onnx -o m.tilec
same model.onnx model.orig
ln -s model.onnx link.onnx
case_ 2 import-onnx model.onnx --sidecar=link.onnx -o m.tilec
case_ 2 import-onnx model.onnx --sidecar=out.tilec -o out.tilec
case_ 2 import-model "${ckflags[@]}" --weights=ck/ckpt-F32.safetensors --sidecar=ck/ckpt-F32.safetensors -o ck/m.tilec
same ck/ckpt-F32.safetensors ckpt.orig
case_ 0 import-onnx model.onnx -o m.tilec
cp m.tilec m.orig
case_ 2 dump-ir m.tilec -o m.tilec
case_ 2 quantize-fp8 m.tilec -o m.tilec.weights
case_ 2 quantize-fp8 m.tilec -o m.tilec
ln -s m.tilec link.tilec
case_ 2 quantize-fp8 m.tilec -o link.tilec
case_ 2 plan-ownership m.tilec --checkpoint=m.tilec -o p.tilec
same m.tilec m.orig

note "4. a failing import leaves the earlier IR and sidecar as they were"
cp m.tilec.weights weights.orig
make_onnx k-mismatch bad.onnx
case_ 2 import-onnx bad.onnx -o m.tilec
same m.tilec m.orig
same m.tilec.weights weights.orig
case_ 0 run-reference m.tilec -o /dev/null

note "5. one OUT, one run at a time; stale temporaries removed"
mkdir -p busy
exec 8>>busy/.tilec-lock
flock -n 8
case_ 2 "$scripts/compile.sh" "$work/busy"
exec 8>&-
mkdir -p stale
: > stale/0-import.tilec.tilec-tmp.4194305
: > "stale/0-import.tilec.tilec-tmp.$$"
(. "$scripts/lib/pipeline.sh" && tilec_lock_out compile.sh "$work/stale")
ls stale | sed "s/\.$$\$/.LIVE-PID/" >> "$actual"
# A process a run's command leaves behind (as Bazel's client leaves its
# server) does not keep OUT locked for the next run.
(
  . "$scripts/lib/pipeline.sh"
  tilec_lock_out compile.sh "$work/left"
  tilec_unlocked bash -c 'sleep 60 > /dev/null 2>&1 & echo $! > left.pid'
)
case_ 0 bash -c ". '$scripts/lib/pipeline.sh' && tilec_lock_out compile.sh '$work/left' && echo locked"
kill "$(cat left.pid)"

note "6. Gemm whose input shape is unknown"
make_onnx gemm-unknown gemm.onnx
case_ 3 import-onnx gemm.onnx -o out.tilec

note "7. long chains"
make_onnx add-chain adds.onnx 5000
case_ 0 import-onnx adds.onnx -o out.tilec
make_onnx add-chain adds-long.onnx 20001
case_ 3 import-onnx adds-long.onnx -o out.tilec
make_onnx identity-chain ids.onnx 100000
case_ 0 import-onnx ids.onnx -o out.tilec

note "8. huge dims without data (model.onnx above imported: exit 0)"
make_onnx huge-init huge.onnx
case_ 0 import-onnx huge.onnx -o out.tilec

note "9. K = 0"
make_onnx zero-k zero-k.onnx
case_ 3 import-onnx zero-k.onnx -o out.tilec

note "10. safetensors header limits"
python3 - <<'PY'
import struct
def write(path, header):
    open(path, "wb").write(struct.pack("<Q", len(header)) + header)
write("nested.safetensors", b"[" * 100000 + b"]" * 100000)
write("large.safetensors", b"{" + b" " * 9000000 + b"}")
PY
case_ 2 import-model "${ckflags[@]}" --weights=nested.safetensors -o out.tilec
case_ 2 import-model "${ckflags[@]}" --weights=large.safetensors -o out.tilec

note "11. inputs are regular files"
make_onnx k-mismatch unused.onnx
import-onnx --target=tiny model.onnx -o g.tilec 2> /dev/null
mkdir fifo
mkfifo fifo/x.npy
case_ 2 run-reference g.tilec --inputs=fifo -o /dev/null
case_ 2 quantize-fp8 g.tilec --calibration=fifo -o out.tilec

note "12. value_info is looked up, not scanned (20,000 declared values)"
make_onnx value-info vi.onnx 20000
case_ 0 import-onnx vi.onnx -o out.tilec

note "13. the planner's quadratic search is bounded: a 2050-op chain is refused"
make_onnx add-chain chain.onnx 2049
import-onnx chain.onnx -o chain.tilec 2> /dev/null
case_ 3 quantize-fp8 chain.tilec -o out.tilec
case_ 3 plan-ownership chain.tilec -o out.tilec

note "14. zero and huge graph inputs"
make_onnx zero-input zero.onnx
case_ 3 import-onnx zero.onnx -o out.tilec
make_onnx big-input big.onnx
case_ 3 import-onnx big.onnx -o out.tilec

note "15. NaN inputs never pass"
plan-ownership --attempts=2 g.tilec -o g-plan.tilec 2> /dev/null
expand-reduce g-plan.tilec -o g-reduce.tilec 2> /dev/null
emit-device g-reduce.tilec -o g-program.tilec 2> /dev/null
mkdir nan
python3 - <<'PY'
import struct
header = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 4), }"
header += " " * (63 - (10 + len(header)) % 64) + "\n"
data = struct.pack("<8f", *([float("nan")] * 8))
open("nan/x.npy", "wb").write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + data)
PY
case_ 3 simulate-device g-program.tilec --inputs=nan -o /dev/null

note "16. invalid ONNX is exit 2"
for kind in gather-axis gather-index k-mismatch negative-dim range-step0 matmul-types \
    gemm-vector; do
  make_onnx $kind $kind.onnx
  case_ 2 import-onnx $kind.onnx -o out.tilec
done
note "16. a corrupted recipe in a planned IR is exit 2 in every reader"
make_hostile recipe g-plan.tilec bad-plan.tilec
for tool in fuse-elementwise fuse-residual expand-reduce emit-device inspect-gemms; do
  case_ 2 $tool bad-plan.tilec -o out.tilec
done

note "17. scripts and leading dashes; OUT relative to the caller"
case_ 2 "$scripts/compile.sh" --f16
case_ 2 "$scripts/run.sh" --f16
(. "$scripts/lib/pipeline.sh" && tilec_out_dir compile.sh /caller rel/out) >> "$actual"
import-model "${small[@]}" -o small.tilec
plan-ownership --attempts=2 small.tilec -o ./-2plan.tilec 2> /dev/null
mkdir -p tools
for t in expand-reduce dump-ir; do mkdir -p tools/$t; ln -sf "$bin/$t" tools/$t/$t; done
case_ 2 "$scripts/bisect.sh" --bin=tools --out=-x expand-reduce -2plan.tilec -- true
[ -d ./-x ] || { echo "bisect.sh did not make ./-x" >&2; problems=$((problems + 1)); }

note "18. policy files"
import-onnx model.onnx -o p.tilec 2> /dev/null
printf 'value %%4294967296: e4m3\n' > wrap-value.policy
printf 'op 4294967296: exclude\n' > wrap-op.policy
printf 'value y: e4m3\n' > not-operand.policy
python3 -c 'print("value " + "n" * 3000000 + ": e4m3")' > long.policy
for p in wrap-value wrap-op not-operand long; do
  case_ 2 quantize-fp8 --policy=$p.policy p.tilec -o out.tilec
done

note "19. safetensors: an empty tensor at a boundary; a shape that would wrap"
python3 - <<'PY'
import json, struct
raw = open("ck/ckpt-F32.safetensors", "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
header = json.loads(raw[8:8 + n])
data = raw[8 + n:]
def write(path, h):
    text = json.dumps(h).encode()
    open(path, "wb").write(struct.pack("<Q", len(text)) + text + data)
end = min(v["data_offsets"][1] for k, v in header.items() if k != "__metadata__")
empty = dict(header)
empty["extra.empty"] = {"dtype": "F32", "shape": [0], "data_offsets": [end, end]}
write("empty.safetensors", empty)
wrap = dict(header)
wrap["extra.wrap"] = {"dtype": "F32", "shape": [2**40, 2**24], "data_offsets": [end, end]}
write("wrap.safetensors", wrap)
PY
case_ 0 import-model "${ckflags[@]}" --weights=empty.safetensors -o e.tilec
case_ 2 import-model "${ckflags[@]}" --weights=wrap.safetensors -o out.tilec

note "20. dump-ir escapes names"
make_onnx odd-names odd.onnx
import-onnx odd.onnx -o odd.tilec 2> /dev/null
dump-ir odd.tilec | grep -e '^  %1 ' -e '^  (0) ' >> "$actual"

transcript_finish "$golden" testdata/reliability/reliability.golden
