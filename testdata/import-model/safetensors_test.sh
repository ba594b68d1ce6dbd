#!/usr/bin/env bash
# safetensors_test.sh IMPORT_MODEL RUN_REFERENCE CHECKPOINT_PY NPY_COMPARE CLIP_EXPECTED
# import-model --weights on checkpoints written by safetensors_checkpoint.py
# in each dtype: every weight of the graph is the checkpoint's tensor
# (checked from run-reference's dumps), the IR names a checksummed sidecar,
# and broken checkpoints exit 2 with one line naming the tensor and file.
set -euo pipefail
import=$1 reference=$2 checkpoint=$3 compare=$4 expected=$5
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
W=32 M=48 L=2
flags=(--preset=siglip-so400m-384 --part=model --layers=$L --tokens=16 --patch=4 --width=$W --mlp_width=$M --heads=2)
python3 "$checkpoint" write "$out" $W $M $L
for dtype in F32 F16 BF16; do
  "$import" "${flags[@]}" --weights="$out/ckpt-$dtype.safetensors" -o "$out/$dtype.tilec"
  [ -s "$out/$dtype.tilec.weights" ] || { echo "no sidecar next to the IR" >&2; exit 1; }
  "$reference" "$out/$dtype.tilec" --all --out_dir="$out/dump-$dtype" -o - >/dev/null
  python3 "$checkpoint" check "$out/ckpt-$dtype.safetensors" "$out/dump-$dtype" $W $M $L
done
# CLIP's whole tower: class token, ln_pre, the projection beside the tower.
python3 "$checkpoint" write-clip "$out" $W $M $L
"$import" --preset=clip-vit-l14-224 --part=model --layers=$L --tokens=17 --patch=4 --width=$W --mlp_width=$M --heads=2 \
  --weights="$out/ckpt-clip.safetensors" -o "$out/clip.tilec"
"$reference" "$out/clip.tilec" --all --out_dir="$out/dump-clip" -o - >/dev/null
python3 "$checkpoint" check "$out/ckpt-clip.safetensors" "$out/dump-clip" $W $M $L
# The graph computes what PyTorch's CLIP computes on these weights and this
# image (clip_torch.py wrote the expected embedding): the reference's F16
# storage keeps it within 2e-3.
"$compare" "$expected" "$out/dump-clip/head.proj.out.npy" 2e-3 0.99999
# A later checkpoint layer for a one-layer graph.
"$import" "${flags[@]}" --part=layer --weights="$out/ckpt-F32.safetensors" --weights_first_layer=1 -o "$out/l1.tilec"
# A corrupted sidecar is caught by its checksum.
printf '\x7f' | dd of="$out/F32.tilec.weights" bs=1 seek=100 conv=notrunc status=none
if "$reference" "$out/F32.tilec" -o - >/dev/null 2>"$out/err"; then
  echo "a corrupted sidecar was read" >&2; exit 1
fi
grep -q "do not match the checksum" "$out/err" || { cat "$out/err"; exit 1; }

expect_bad() {  # FILE PATTERN
  local status=0
  "$import" "${flags[@]}" --weights="$out/$1" -o "$out/bad.tilec" 2>"$out/err" || status=$?
  [ $status -eq 2 ] || { echo "$1: exit $status, expected 2" >&2; cat "$out/err" >&2; exit 1; }
  [ "$(wc -l < "$out/err")" -eq 1 ] || { echo "$1: not one line" >&2; cat "$out/err" >&2; exit 1; }
  grep -q "$out/$1" "$out/err" && grep -q "$2" "$out/err" || { echo "$1: message lacks '$2' or the file:" >&2; cat "$out/err" >&2; exit 1; }
  [ ! -e "$out/bad.tilec" ] || { echo "$1: an output was written" >&2; exit 1; }
  sed "s|$out/||" "$out/err"
}
expect_bad missing.safetensors "tensor 'vision_model.encoder.layers.1.mlp.fc2.bias' is missing"
expect_bad shape.safetensors "tensor 'vision_model.encoder.layers.0.mlp.fc1.weight' has shape \[32,48\], the model needs \[48,32\]"
expect_bad dtype.safetensors "tensor 'vision_model.encoder.layers.0.layer_norm1.weight' is I64"
expect_bad truncated.safetensors "lie outside the data section"
expect_bad offsets.safetensors "tensor 'vision_model.encoder.layers.0.self_attn.k_proj.bias': data_offsets"
expect_bad overlap.safetensors "overlaps"
echo "safetensors: 3 dtypes and a CLIP tower loaded, 6 broken checkpoints refused"
