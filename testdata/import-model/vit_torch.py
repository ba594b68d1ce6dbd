#!/usr/bin/env python3
"""PyTorch's ViTForImageClassification on a safetensors checkpoint, written
out plainly (Debian has no `transformers`).

  vit_torch.py CKPT PIXELS.npy WIDTH HEADS LAYERS OUT.npy

Reads the checkpoint safetensors_checkpoint.py write-vit made (Hugging
Face's ViTForImageClassification names) and the image run-reference
generated (its --all dump's pixel_values.npy), runs the model as Hugging
Face's ViT does (patch convolution with bias, class token, positions,
pre-norm layers with exact GELU, LayerNorm eps 1e-12, the final layernorm,
the classifier on the class token) in float64, and writes the [B, 1000]
logits as float32 .npy. Run once by hand (Debian's python3-torch) when the
checkpoint's contents change, as
  vit_torch.py ckpt-vit.safetensors dump/pixel_values.npy 32 2 2 \\
      vit-torch-expected.npy
on safetensors_test.sh's files; the tests compare import-model's graph and
its simulated program with the saved logits.
"""
import sys

import torch
import torch.nn.functional as F

from clip_torch import read_npy, read_safetensors, write_npy


def forward(w, pixels, heads, layers):
    v = "vit."
    patch = w[v + "embeddings.patch_embeddings.projection.weight"]
    x = F.conv2d(pixels, patch, w[v + "embeddings.patch_embeddings.projection.bias"],
                 stride=patch.shape[-1])
    x = x.flatten(2).transpose(1, 2)  # [B, P, width]
    b, _, width = x.shape
    cls = w[v + "embeddings.cls_token"].expand(b, 1, width)
    x = torch.cat([cls, x], dim=1) + w[v + "embeddings.position_embeddings"]
    ln = lambda t, name: F.layer_norm(t, (width,), w[name + ".weight"], w[name + ".bias"], 1e-12)
    lin = lambda t, name: F.linear(t, w[name + ".weight"], w[name + ".bias"])
    d = width // heads
    for n in range(layers):
        p = v + "encoder.layer.%d." % n
        h = ln(x, p + "layernorm_before")
        split = lambda t: t.reshape(b, -1, heads, d).transpose(1, 2)
        q = split(lin(h, p + "attention.attention.query"))
        k = split(lin(h, p + "attention.attention.key"))
        val = split(lin(h, p + "attention.attention.value"))
        probs = torch.softmax(q @ k.transpose(-1, -2) / d ** 0.5, dim=-1)
        ctx = (probs @ val).transpose(1, 2).reshape(b, -1, width)
        x = x + lin(ctx, p + "attention.output.dense")
        h = F.gelu(lin(ln(x, p + "layernorm_after"), p + "intermediate.dense"))
        x = x + lin(h, p + "output.dense")
    x = ln(x, v + "layernorm")
    return lin(x[:, 0, :], "classifier")


def main():
    ckpt, pixels, width, heads, layers, out = sys.argv[1:]
    assert int(width) % int(heads) == 0
    w = read_safetensors(ckpt)
    logits = forward(w, read_npy(pixels), int(heads), int(layers))
    assert logits.shape[1] == w["classifier.weight"].shape[0]
    write_npy(out, logits)


if __name__ == "__main__":
    main()
