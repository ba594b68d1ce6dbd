#!/usr/bin/env python3
"""PyTorch's CLIP vision tower with projection on a safetensors checkpoint.

  clip_torch.py CKPT PIXELS.npy WIDTH HEADS LAYERS OUT.npy

Reads the checkpoint safetensors_checkpoint.py write-clip made (Hugging
Face's CLIPVisionModelWithProjection names) and the image run-reference
generated (its --all dump's pixel_values.npy), runs the model as Hugging
Face's CLIP does (bias-free patch convolution, class token, positions,
pre_layrnorm, pre-norm layers with quick GELU, post_layernorm of the class
token, visual_projection) in float64, and writes the [B, 768] embedding as
float32 .npy. Run once by hand (Debian's python3-torch) when the
checkpoint's contents change, as
  clip_torch.py ckpt-clip.safetensors dump/pixel_values.npy 32 2 2 \
      clip-torch-expected.npy
on safetensors_test.sh's files; the test compares import-model's graph
with the saved output.
"""
import json
import struct
import sys

import torch
import torch.nn.functional as F


def read_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    n = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8:8 + n])
    data = blob[8 + n:]
    tensors = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        assert e["dtype"] == "F32", (name, e["dtype"])
        begin, end = e["data_offsets"]
        values = struct.unpack("<%df" % ((end - begin) // 4), data[begin:end])
        tensors[name] = torch.tensor(values, dtype=torch.float64).reshape(e["shape"])
    return tensors


def read_npy(path):
    with open(path, "rb") as f:
        blob = f.read()
    n = struct.unpack("<H", blob[8:10])[0]
    header = blob[10:10 + n].decode()
    assert "'<f4'" in header, header
    shape = tuple(int(d) for d in header.split("(")[1].split(")")[0].split(",") if d.strip())
    data = blob[10 + n:]
    values = struct.unpack("<%df" % (len(data) // 4), data)
    return torch.tensor(values, dtype=torch.float64).reshape(shape)


def write_npy(path, t):
    t = t.to(torch.float32).contiguous()
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': (%s), }" % (
        "".join("%d, " % d for d in t.shape))
    header += " " * (-(len(header) + 11) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
        f.write(struct.pack("<%df" % t.numel(), *t.flatten().tolist()))


def forward(w, pixels, heads, layers):
    v = "vision_model."
    patch = w[v + "embeddings.patch_embedding.weight"]
    x = F.conv2d(pixels, patch, stride=patch.shape[-1])  # no bias in CLIP
    x = x.flatten(2).transpose(1, 2)  # [B, P, width]
    b, _, width = x.shape
    cls = w[v + "embeddings.class_embedding"].expand(b, 1, width)
    x = torch.cat([cls, x], dim=1) + w[v + "embeddings.position_embedding.weight"]
    ln = lambda t, name: F.layer_norm(t, (width,), w[name + ".weight"], w[name + ".bias"], 1e-5)
    lin = lambda t, name: F.linear(t, w[name + ".weight"], w.get(name + ".bias"))
    x = ln(x, v + "pre_layrnorm")
    d = width // heads
    for n in range(layers):
        p = v + "encoder.layers.%d." % n
        h = ln(x, p + "layer_norm1")
        split = lambda t: t.reshape(b, -1, heads, d).transpose(1, 2)
        q, k, vv = (split(lin(h, p + "self_attn.%s_proj" % s)) for s in "qkv")
        a = torch.softmax(q @ k.transpose(-1, -2) * d ** -0.5, dim=-1) @ vv
        x = x + lin(a.transpose(1, 2).reshape(b, -1, width), p + "self_attn.out_proj")
        h = lin(ln(x, p + "layer_norm2"), p + "mlp.fc1")
        x = x + lin(h * torch.sigmoid(1.702 * h), p + "mlp.fc2")  # quick GELU
    pooled = ln(x[:, 0, :], v + "post_layernorm")
    return pooled @ w["visual_projection.weight"].T


if __name__ == "__main__":
    ckpt, pixels, width, heads, layers, out = sys.argv[1:]
    w = read_safetensors(ckpt)
    assert w["vision_model.pre_layrnorm.weight"].shape[0] == int(width)
    write_npy(out, forward(w, read_npy(pixels), int(heads), int(layers)))
