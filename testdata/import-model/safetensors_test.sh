#!/usr/bin/env bash
# safetensors_test.sh IMPORT_MODEL RUN_REFERENCE CHECKPOINT_PY NPY_COMPARE CLIP_EXPECTED
#                     VIT_EXPECTED
# import-model --weights on checkpoints written by safetensors_checkpoint.py
# in each dtype: every weight of the graph is the checkpoint's tensor
# (checked from run-reference's dumps), the IR names a checksummed sidecar,
# and broken checkpoints exit 2 with one line naming the tensor and file.
set -euo pipefail
import=$1 reference=$2 checkpoint=$3 compare=$4 expected=$5 vit_expected=$6
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
# A Hugging Face ViTForImageClassification checkpoint: the graph computes
# what PyTorch's ViT computes on it (vit_torch.py wrote the expected
# logits), within the same F16 limits.
python3 "$checkpoint" write-vit "$out" $W $M $L
vit_flags=(--preset=vit-b16-224 --part=model --layers=$L --tokens=17 --patch=4 --width=$W --mlp_width=$M --heads=2)
"$import" "${vit_flags[@]}" --weights="$out/ckpt-vit.safetensors" -o "$out/vit.tilec"
"$reference" "$out/vit.tilec" --out_dir="$out/dump-vit" -o - >/dev/null
"$compare" "$vit_expected" "$out/dump-vit/head.classifier_bias.out.npy" 2e-3 0.99999
# A later checkpoint layer for a one-layer graph.
"$import" "${flags[@]}" --part=layer --weights="$out/ckpt-F32.safetensors" --weights_first_layer=1 -o "$out/l1.tilec"
# A corrupted sidecar is caught by its checksum.
printf '\x7f' | dd of="$out/F32.tilec.weights" bs=1 seek=100 conv=notrunc status=none
if "$reference" "$out/F32.tilec" -o - >/dev/null 2>"$out/err"; then
  echo "a corrupted sidecar was read" >&2; exit 1
fi
grep -q "do not match the checksum" "$out/err" || { cat "$out/err"; exit 1; }

expect_bad() {  # FILE PATTERN [IMPORT_FLAGS...] (default: the SigLIP tower's)
  local status=0 file=$1 pattern=$2
  shift 2
  [ $# -gt 0 ] || set -- "${flags[@]}"
  "$import" "$@" --weights="$out/$file" -o "$out/bad.tilec" 2>"$out/err" || status=$?
  [ $status -eq 2 ] || { echo "$file: exit $status, expected 2" >&2; cat "$out/err" >&2; exit 1; }
  [ "$(wc -l < "$out/err")" -eq 1 ] || { echo "$file: not one line" >&2; cat "$out/err" >&2; exit 1; }
  grep -q "$out/$file" "$out/err" && grep -q "$pattern" "$out/err" || { echo "$file: message lacks '$pattern' or the file:" >&2; cat "$out/err" >&2; exit 1; }
  [ ! -e "$out/bad.tilec" ] || { echo "$file: an output was written" >&2; exit 1; }
  sed "s|$out/||" "$out/err"
}
expect_bad missing.safetensors "tensor 'vision_model.encoder.layers.1.mlp.fc2.bias' is missing"
expect_bad shape.safetensors "tensor 'vision_model.encoder.layers.0.mlp.fc1.weight' has shape \[32,48\], the model needs \[48,32\]"
expect_bad dtype.safetensors "tensor 'vision_model.encoder.layers.0.layer_norm1.weight' is I64"
expect_bad truncated.safetensors "lie outside the data section"
expect_bad offsets.safetensors "tensor 'vision_model.encoder.layers.0.self_attn.k_proj.bias': data_offsets"
expect_bad overlap.safetensors "overlaps"
expect_bad vit-missing.safetensors "tensor 'vit.encoder.layer.1.output.dense.bias' is missing" "${vit_flags[@]}"
expect_bad vit-shape.safetensors "tensor 'vit.embeddings.cls_token' has shape \[32\], the model needs \[1,1,32\]" "${vit_flags[@]}"
echo "safetensors: 3 dtypes, a CLIP tower and a ViT loaded, 8 broken checkpoints refused"
