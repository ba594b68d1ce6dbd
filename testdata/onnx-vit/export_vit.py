#!/usr/bin/python3
"""Exports a small SigLIP/ViT-shaped vision encoder with torch.onnx.export.

Writes, into OUT_DIR (default: this script's directory):
  vit-op17.onnx   opset 17: LayerNormalization nodes, tanh GELU (SigLIP)
  vit-op14.onnx   opset 14: LayerNorm decomposed by the exporter, erf GELU
  pixel_values.npy              the input image, float32 [1, 3, 32, 32]
  vit-op17.embeddings.npy       PyTorch's output of each model, float32
  vit-op14.embeddings.npy       [1, 16, 32]
  bad-sin.onnx    MatMul then Sin: a node import-onnx must refuse by name
  vit-cls.onnx    opset 17, batch 2: a ViT with a class token (Hugging Face
                  ViTModel's form: Expand, Concat on the token axis, a
                  [1, T, D] position Add), pooled by picking token 0
                  (x[:, 0]: Gather) after the final LayerNorm, a linear
                  classifier
  vit-cls-op14.onnx  the same at opset 14 (LayerNorm decomposed), pooled
                  by x[:, :1] (Slice) then squeeze(1)
  vit-cls.pixel_values.npy      their input, float32 [2, 3, 32, 32]
  vit-cls.logits.npy, vit-cls-op14.logits.npy
                                PyTorch's outputs, float32 [2, 10]

The model is what tilec's import-onnx must recognize in real exports: a
patch-embedding convolution (stride = kernel) flattened and transposed,
a learned position embedding, pre-norm layers with separate q, k and v
projections, attention through reshape/transpose/matmul/softmax with the
1/sqrt(head_dim) scale on the scores, an MLP with GELU, a post-LayerNorm and
a linear head on every token. Weights are random (seeded), biases and
LayerNorm parameters too, so that no term of the graph is trivially 0 or 1.

  --so400m PATH   instead, one model with SigLIP so400m/14's shapes (384 px,
                  729 tokens, width 1152, MLP 4304, 16 heads, 27 layers),
                  random weights, opset 17, written to PATH (about 1.7 GB;
                  not committed) for import-onnx's time and memory.

Needs Debian's python3-torch and python3-numpy (bad-sin.onnx, written last, also
python3-onnx); not run in CI.
"""
import argparse
import math
import os

import numpy as np
import torch
from torch import nn


class Attention(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.head_dim = width // heads
        self.scale = self.head_dim ** -0.5
        self.q_proj = nn.Linear(width, width)
        self.k_proj = nn.Linear(width, width)
        self.v_proj = nn.Linear(width, width)
        self.out_proj = nn.Linear(width, width)

    def forward(self, x):
        b, t, w = x.shape

        def heads(y):
            return y.reshape(b, t, self.heads, self.head_dim).transpose(1, 2)

        q, k, v = heads(self.q_proj(x)), heads(self.k_proj(x)), heads(self.v_proj(x))
        scores = torch.matmul(q, k.transpose(2, 3)) * self.scale
        probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
        ctx = torch.matmul(probs, v).transpose(1, 2).reshape(b, t, w)
        return self.out_proj(ctx)


class Layer(nn.Module):
    def __init__(self, width, mlp_width, heads, eps, gelu):
        super().__init__()
        self.layer_norm1 = nn.LayerNorm(width, eps=eps)
        self.self_attn = Attention(width, heads)
        self.layer_norm2 = nn.LayerNorm(width, eps=eps)
        self.fc1 = nn.Linear(width, mlp_width)
        self.fc2 = nn.Linear(mlp_width, width)
        self.gelu = gelu

    def forward(self, x):
        x = x + self.self_attn(self.layer_norm1(x))
        h = nn.functional.gelu(self.fc1(self.layer_norm2(x)), approximate=self.gelu)
        return x + self.fc2(h)


class VisionEncoder(nn.Module):
    def __init__(self, image, patch, width, mlp_width, heads, layers, head_width,
                 eps=1e-6, gelu="tanh"):
        super().__init__()
        tokens = (image // patch) ** 2
        self.patch_embedding = nn.Conv2d(3, width, kernel_size=patch, stride=patch)
        self.position_embedding = nn.Parameter(torch.randn(1, tokens, width) * 0.02)
        self.layers = nn.ModuleList(
            [Layer(width, mlp_width, heads, eps, gelu) for _ in range(layers)])
        self.post_layernorm = nn.LayerNorm(width, eps=eps)
        self.head = nn.Linear(width, head_width)

    def forward(self, pixel_values):
        x = self.patch_embedding(pixel_values).flatten(2).transpose(1, 2)
        x = x + self.position_embedding
        for layer in self.layers:
            x = layer(x)
        return self.head(self.post_layernorm(x))


class ClassTokenViT(nn.Module):
    """Hugging Face ViTModel's embeddings and pooling around the same layers:
    the class token expanded over the batch and concatenated before the
    patches, positions for patches + 1 tokens, token 0 after the final
    LayerNorm into a linear classifier."""

    def __init__(self, image, patch, width, mlp_width, heads, layers, classes,
                 eps=1e-6, gelu="none", pool="gather"):
        super().__init__()
        self.pool = pool
        tokens = (image // patch) ** 2 + 1
        self.patch_embedding = nn.Conv2d(3, width, kernel_size=patch, stride=patch)
        self.cls_token = nn.Parameter(torch.randn(1, 1, width))
        self.position_embedding = nn.Parameter(torch.randn(1, tokens, width) * 0.02)
        self.layers = nn.ModuleList(
            [Layer(width, mlp_width, heads, eps, gelu) for _ in range(layers)])
        self.layer_norm = nn.LayerNorm(width, eps=eps)
        self.classifier = nn.Linear(width, classes)

    def forward(self, pixel_values):
        x = self.patch_embedding(pixel_values).flatten(2).transpose(1, 2)
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        x = torch.cat((cls, x), dim=1) + self.position_embedding
        for layer in self.layers:
            x = layer(x)
        x = self.layer_norm(x)
        x = x[:, 0, :] if self.pool == "gather" else x[:, :1, :].squeeze(1)
        return self.classifier(x)


def randomize(model, seed):
    """Seeded weights with the spread of trained ones (no exact 0 or 1)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "layer_norm" in name and name.endswith("weight"):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            elif p.dim() == 1:
                p.copy_(0.05 * torch.randn(p.shape, generator=g))
            else:
                fan_in = p[0].numel()
                p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(fan_in))


def export(model, image, path, opset, output="embeddings"):
    model.eval()
    torch.onnx.export(model, (image,), path, opset_version=opset,
                      input_names=["pixel_values"], output_names=[output],
                      do_constant_folding=True)


def write_bad_sin(path):
    import onnx
    from onnx import TensorProto, helper
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])
    w = helper.make_tensor("w", TensorProto.FLOAT, [8, 8], [0.01 * i for i in range(64)])
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"], name="proj"),
         helper.make_node("Sin", ["h"], ["y"], name="activation")],
        "sin", [x], [y], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="tilec-test")
    onnx.checker.check_model(model)
    onnx.save(model, path)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out_dir", nargs="?", default=os.path.dirname(os.path.abspath(__file__)))
    parser.add_argument("--so400m", metavar="PATH")
    args = parser.parse_args()
    torch.manual_seed(0)
    if args.so400m:
        model = VisionEncoder(384, 14, 1152, 4304, 16, 27, 1152)
        randomize(model, 400)
        export(model, torch.randn(1, 3, 384, 384), args.so400m, 17)
        return
    image = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(7))
    np.save(os.path.join(args.out_dir, "pixel_values.npy"), image.numpy())
    for name, opset, gelu in (("vit-op17", 17, "tanh"), ("vit-op14", 14, "none")):
        model = VisionEncoder(32, 8, 64, 128, 4, 2, 32, gelu=gelu)
        randomize(model, opset)
        export(model, image, os.path.join(args.out_dir, name + ".onnx"), opset)
        with torch.no_grad():
            out = model.eval()(image).numpy()
        np.save(os.path.join(args.out_dir, name + ".embeddings.npy"), out)
    # Batch 2, fixed at export: the position table is broadcast per image.
    images = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(11))
    np.save(os.path.join(args.out_dir, "vit-cls.pixel_values.npy"), images.numpy())
    for name, opset, pool, seed in (("vit-cls", 17, "gather", 21),
                                    ("vit-cls-op14", 14, "slice", 22)):
        model = ClassTokenViT(32, 8, 32, 64, 4, 2, 10, pool=pool)
        randomize(model, seed)
        export(model, images, os.path.join(args.out_dir, name + ".onnx"), opset,
               "logits")
        with torch.no_grad():
            out = model.eval()(images).numpy()
        np.save(os.path.join(args.out_dir, name + ".logits.npy"), out)
    write_bad_sin(os.path.join(args.out_dir, "bad-sin.onnx"))


if __name__ == "__main__":
    main()
