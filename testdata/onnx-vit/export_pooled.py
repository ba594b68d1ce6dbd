#!/usr/bin/python3
"""Exports pooled SigLIP-like encoders with a dynamic batch axis.

Writes, into OUT_DIR (default: this script's directory):
  map-op17.onnx, map-op14.onnx
      the encoder of export_vit.py (32x32 image, 8x8 patches, width 32, 4
      heads, MLP 64, 2 layers, post-LayerNorm) pooled by SigLIP's
      attention-pooling (MAP) head as Hugging Face writes it: a learned
      probe repeated per image, nn.MultiheadAttention(batch_first=True,
      need_weights=False) over the tokens, LayerNorm and MLP with a
      residual, token 0; opset 17 (tanh GELU) and 14 (LayerNorm
      decomposed, erf GELU)
  mean-op17.onnx, mean-op14.onnx
      the same encoder pooled by the mean over the tokens (keepdim=False at
      opset 17, keepdim=True then flatten at opset 14), a linear head to 10
  cls-op17.onnx, cls-op14.onnx
      export_vit.py's class-token ViT (Hugging Face ViTModel's form: the
      class token expanded over the batch and concatenated, token 0 after
      the final LayerNorm into a classifier to 10), picked by x[:, 0]
      (Gather), at opset 17 and 14 (LayerNorm decomposed). Not by
      x[:, :1].squeeze(1) as vit-cls-op14 does: with a dynamic batch the
      exporter writes that squeeze as an If on the axis' size, which
      import-onnx does not read
  pooled.pixel_values.b1.npy, pooled.pixel_values.b2.npy
      input images, float32 [1, 3, 32, 32] and [2, 3, 32, 32]
  <model>.pooled.b1.npy, <model>.pooled.b2.npy
      PyTorch's output of each model on them
  bad-map-mask.onnx    the MAP head with an additive mask on the scores
  bad-map-weights.onnx the MAP head with need_weights=True, its averaged
                       attention weights a second output
  bad-two-dynamic.onnx mean-op17's model with a dynamic image height too
  bad-cls-squeeze.onnx cls-op14 picking token 0 by x[:, :1].squeeze(1),
                       which a dynamic export writes as an If
The batch axis is dynamic in every export ("batch"); import-onnx binds it
with --batch.

  --so400m PATH   instead, one SigLIP so400m/14-shaped model with its MAP
                  head (384 px, width 1152, MLP 4304, 16 heads, 27 layers,
                  random weights, opset 17, batch 1 fixed) written to PATH
                  (about 1.7 GB; not committed), to compare with
                  `import-model --part=model` (so400m_vs_preset.sh).
  --dynamic       with --so400m: the batch axis dynamic, as above.

Needs Debian's python3-torch and python3-numpy; not run in CI.
"""
import argparse
import os

import numpy as np
import torch
from torch import nn

from export_vit import ClassTokenViT, VisionEncoder, randomize


class MapHead(nn.Module):
    """Hugging Face's SiglipMultiheadAttentionPoolingHead."""

    def __init__(self, width, mlp_width, heads, eps, gelu, mask=False,
                 need_weights=False):
        super().__init__()
        self.probe = nn.Parameter(torch.randn(1, 1, width))
        self.attention = nn.MultiheadAttention(width, heads, batch_first=True)
        self.layer_norm = nn.LayerNorm(width, eps=eps)
        self.fc1 = nn.Linear(width, mlp_width)
        self.fc2 = nn.Linear(mlp_width, width)
        self.gelu = gelu
        self.mask = mask
        self.need_weights = need_weights

    def forward(self, x):
        probe = self.probe.repeat(x.shape[0], 1, 1)
        mask = None
        if self.mask:  # an additive mask hiding the last token
            mask = torch.cat((torch.zeros(1, x.shape[1] - 1),
                              torch.full((1, 1), -1e4)), dim=1)
        h, weights = self.attention(probe, x, x, attn_mask=mask,
                                    need_weights=self.need_weights)
        residual = h
        h = self.fc2(nn.functional.gelu(self.fc1(self.layer_norm(h)),
                                        approximate=self.gelu))
        h = (residual + h)[:, 0]
        return (h, weights) if self.need_weights else h


class PooledEncoder(VisionEncoder):
    """export_vit.py's encoder, pooled by the MAP head or the token mean."""

    def __init__(self, image, patch, width, mlp_width, heads, layers, pool,
                 gelu="tanh", eps=1e-6, classes=10, **head_options):
        super().__init__(image, patch, width, mlp_width, heads, layers,
                         classes, eps=eps, gelu=gelu)
        self.pool = pool
        if pool == "map":
            self.head = MapHead(width, mlp_width, heads, eps, gelu,
                                **head_options)

    def forward(self, pixel_values):
        x = self.patch_embedding(pixel_values).flatten(2).transpose(1, 2)
        x = x + self.position_embedding
        for layer in self.layers:
            x = layer(x)
        x = self.post_layernorm(x)
        if self.pool == "map":
            return self.head(x)
        if self.pool == "mean-keepdim":
            return self.head(x.mean(dim=1, keepdim=True).flatten(1))
        return self.head(x.mean(dim=1))


def export(model, image, path, opset, outputs=("pooled",), height=False):
    model.eval()
    axes = {"pixel_values": {0: "batch"}}
    if height:
        axes["pixel_values"][2] = "height"
    for name in outputs:
        axes[name] = {0: "batch"}
    torch.onnx.export(model, (image,), path, opset_version=opset,
                      input_names=["pixel_values"], output_names=list(outputs),
                      dynamic_axes=axes, do_constant_folding=True)


def small(pool, gelu, seed, **head_options):
    torch.manual_seed(seed)
    model = PooledEncoder(32, 8, 32, 64, 4, 2, pool, gelu=gelu, **head_options)
    randomize(model, seed)
    return model.eval()


def so400m(path, dynamic):
    torch.manual_seed(0)
    model = PooledEncoder(384, 14, 1152, 4304, 16, 27, "map")
    randomize(model, 400)
    image = torch.randn(1, 3, 384, 384)
    if dynamic:
        return export(model, image, path, 17)
    model.eval()
    torch.onnx.export(model, (image,), path, opset_version=17,
                      input_names=["pixel_values"], output_names=["pooled"],
                      do_constant_folding=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out_dir", nargs="?",
                        default=os.path.dirname(os.path.abspath(__file__)))
    parser.add_argument("--so400m", metavar="PATH")
    parser.add_argument("--dynamic", action="store_true",
                        help="with --so400m: a dynamic batch axis")
    args = parser.parse_args()
    if args.so400m:
        return so400m(args.so400m, args.dynamic)
    out = args.out_dir
    images = {}
    for batch, seed in ((1, 31), (2, 32)):
        g = torch.Generator().manual_seed(seed)
        images[batch] = torch.randn(batch, 3, 32, 32, generator=g)
        np.save(os.path.join(out, "pooled.pixel_values.b%d.npy" % batch),
                images[batch].numpy())
    for name, opset, pool, gelu, seed in (
            ("map-op17", 17, "map", "tanh", 41),
            ("map-op14", 14, "map", "none", 42),
            ("mean-op17", 17, "mean", "tanh", 43),
            ("mean-op14", 14, "mean-keepdim", "none", 44)):
        model = small(pool, gelu, seed)
        export(model, images[1], os.path.join(out, name + ".onnx"), opset)
        for batch, image in images.items():
            with torch.no_grad():
                np.save(os.path.join(out, "%s.pooled.b%d.npy" % (name, batch)),
                        model(image).numpy())
    for name, opset, pool, seed in (("cls-op17", 17, "gather", 47),
                                    ("cls-op14", 14, "gather", 48)):
        torch.manual_seed(seed)
        model = ClassTokenViT(32, 8, 32, 64, 4, 2, 10, pool=pool)
        randomize(model, seed)
        model.eval()
        export(model, images[1], os.path.join(out, name + ".onnx"), opset)
        for batch, image in images.items():
            with torch.no_grad():
                np.save(os.path.join(out, "%s.pooled.b%d.npy" % (name, batch)),
                        model(image).numpy())
    torch.manual_seed(49)
    model = ClassTokenViT(32, 8, 32, 64, 4, 2, 10, pool="slice")
    randomize(model, 49)
    export(model, images[1], os.path.join(out, "bad-cls-squeeze.onnx"), 14)
    export(small("map", "tanh", 45, mask=True), images[1],
           os.path.join(out, "bad-map-mask.onnx"), 17)
    export(small("map", "tanh", 46, need_weights=True), images[1],
           os.path.join(out, "bad-map-weights.onnx"), 17,
           outputs=("pooled", "weights"))
    export(small("mean", "tanh", 43), images[1],
           os.path.join(out, "bad-two-dynamic.onnx"), 17, height=True)


if __name__ == "__main__":
    main()
