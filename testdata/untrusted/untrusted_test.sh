#!/usr/bin/env bash
# untrusted_test.sh GOLDEN TRANSCRIPT_SH MAKE_HOSTILE TOOL...: every hostile input of
# testdata/untrusted/BUILD. Each case prints its command, exit code and
# message into a transcript compared with GOLDEN (the work directory shows
# as WORK). A failing case must print exactly one line and leave no output;
# no file written anywhere may contain the marker that lies outside the
# model's directory. With UPDATE_GOLDENS=1 under `bazel run`, rewrites
# GOLDEN instead (scripts/update-goldens.sh).
set -uo pipefail
golden=$PWD/$1
transcript=$PWD/$2
make_hostile=$PWD/$3
shift 3
bin=$(mktemp -d)
work=$(mktemp -d)
trap 'rm -rf "$bin" "$work"' EXIT
for tool in "$@"; do ln -s "$PWD/$tool" "$bin/$(basename "$tool")"; done
cd "$work"

# The secret: 64 bytes of a marker that no tilec output would hold, as four
# rows of four F32 (the hostile weight's exact size), outside model/.
mkdir model outside
marker=TILEC-SECRET-MARKER
printf "%s" "$marker$marker$marker$marker" | head -c 64 > outside/secret
[ "$(wc -c < outside/secret)" -eq 64 ] || { echo "bad secret" >&2; exit 1; }
# The honest weight inside the model's directory: 16 F32, not all equal (a
# uniform initializer becomes a Constant init, not a sidecar).
python3 -c 'import struct,sys; sys.stdout.buffer.write(struct.pack("<16f", *range(16)))' \
  > model/weights.bin

actual=$work/actual
: > "$actual"
problems=0
export PATH="$bin:$PATH"
# shellcheck source=../../tools/testing/transcript.sh
. "$transcript"

# 1. ONNX external data must resolve, after symlinks, inside the model's
# directory.
"$make_hostile" onnx model/good.onnx weights.bin
"$make_hostile" onnx model/up.onnx ../outside/secret
"$make_hostile" onnx model/down-up.onnx weights.bin/../../outside/secret
"$make_hostile" onnx model/absolute.onnx "$work/outside/secret"
ln -s ../outside/secret model/link.bin
"$make_hostile" onnx model/link.onnx link.bin
ln -s ../outside model/linkdir
"$make_hostile" onnx model/linkdir.onnx linkdir/secret
ln -s weights.bin model/inner-link.bin
"$make_hostile" onnx model/inner-link.onnx inner-link.bin
"$make_hostile" onnx model/missing.onnx nothing.bin
mkdir model/adir
"$make_hostile" onnx model/adir.onnx adir
case_ 0 import-onnx model/good.onnx -o out.tilec
case_ 0 import-onnx model/inner-link.onnx -o out.tilec
for bad in up down-up absolute link linkdir missing adir; do
  case_ 2 import-onnx "model/$bad.onnx" -o out.tilec
done
# From stdin the model's directory is the working directory.
(cd model && "$bin/import-onnx" - -o ../out.tilec < up.onnx > /dev/null 2> ../err.txt)
code=$?
{ echo "\$ import-onnx - < up.onnx (in model/)"; echo "exit $code"; cat err.txt; } |
  sed "s|$work|WORK|g" >> "$actual"
# A link to a model reads the model's own neighbours, not the link's.
mkdir elsewhere
ln -s ../model/good.onnx elsewhere/good.onnx
case_ 0 import-onnx elsewhere/good.onnx -o out.tilec

# 2. An IR's sidecar path is a plain file name in the IR's directory (or
# --sidecar_dir), and a checksum mismatch does not print checksums.
# ir/g.tilec is the imported graph (quantize-fp8 reads it), ir/m.tilec its
# device program for tiny (simulate-device reads it); both name m.weights.
mkdir ir
"$bin/import-onnx" --target=tiny model/good.onnx -o ir/g.tilec --sidecar=ir/m.weights 2> /dev/null
cp ir/g.tilec ir/m.tilec
for pass in plan-ownership fuse-elementwise fuse-residual expand-reduce emit-device; do
  "$bin/$pass" ir/m.tilec -o ir/next.tilec 2> /dev/null || echo "$pass failed" >&2
  mv ir/next.tilec ir/m.tilec
done
case_ 0 run-reference ir/m.tilec -o /dev/null
case_ 0 simulate-device ir/m.tilec -o /dev/null
case_ 0 quantize-fp8 ir/g.tilec -o /dev/null
ln -s ../outside/secret ir/link.weights
cp ir/m.weights ir/other.weights
printf 'X' | dd of=ir/other.weights bs=1 seek=3 conv=notrunc 2> /dev/null
for stage in g m; do
  "$make_hostile" sidecar ir/$stage.tilec ir/$stage-up.tilec ../outside/secret
  "$make_hostile" sidecar ir/$stage.tilec ir/$stage-absolute.tilec "$work/outside/secret"
  "$make_hostile" sidecar ir/$stage.tilec ir/$stage-link.tilec link.weights
  "$make_hostile" sidecar ir/$stage.tilec ir/$stage-changed.tilec other.weights
done
for bad in up absolute link changed; do
  case_ 2 run-reference "ir/m-$bad.tilec" -o out.tilec
  case_ 2 simulate-device "ir/m-$bad.tilec" -o out.tilec
  case_ 2 quantize-fp8 "ir/g-$bad.tilec" -o out.tilec
done
# From stdin, in --sidecar_dir.
case_ 2 run-reference --sidecar_dir=ir - -o out.tilec < ir/m-link.tilec
# A writer records a plain name, so --sidecar must lie beside -o.
case_ 2 import-onnx model/good.onnx -o out.tilec --sidecar=ir/w.weights
case_ 0 import-onnx model/good.onnx -o ir/w.tilec --sidecar=ir/w.weights

# Nothing anyone wrote holds the secret.
leaks=$(grep -rl --exclude-dir=outside -e "$marker" . 2>/dev/null |
        grep -v -e '^./actual$' -e '^./err.txt$')
if [ -n "$leaks" ]; then
  echo "the secret outside the model's directory leaked into: $leaks" >&2
  problems=$((problems + 1))
fi

transcript_finish "$golden" testdata/untrusted/untrusted.golden
