#!/usr/bin/env python3
"""Small checkpoints in exactly the safetensors layout, and their check.

  safetensors_checkpoint.py write DIR WIDTH MLP LAYERS
      DIR/ckpt-{F32,F16,BF16}.safetensors: a SigLIP vision tower's tensors
      (Hugging Face names, "vision_model." prefix, PyTorch's [out, in]
      Linear weights, embeddings, post_layernorm and head included) with
      deterministic contents; and broken copies of the F32 one:
      missing.safetensors (no layers.1.mlp.fc2.bias), shape.safetensors
      (layers.0.mlp.fc1.weight [in, out]), dtype.safetensors
      (layers.0.layer_norm1.weight as I64), truncated.safetensors (the last
      byte cut), offsets.safetensors (layers.0.self_attn.k_proj.bias's range
      past the end of the data), overlap.safetensors (two tensors sharing
      bytes).
  safetensors_checkpoint.py write-clip DIR WIDTH MLP LAYERS
      DIR/ckpt-clip.safetensors: a CLIPVisionModelWithProjection's tensors
      (class embedding, bias-free patch convolution, 17 positions,
      "pre_layrnorm", post_layernorm, the layers, and visual_projection
      outside the "vision_model." prefix), F32.
  safetensors_checkpoint.py write-vit DIR WIDTH MLP LAYERS
      DIR/ckpt-vit.safetensors: a ViTForImageClassification's tensors
      (Hugging Face's names: "vit." prefix, embeddings.cls_token and
      position_embeddings as [1, T, w], patch_embeddings.projection,
      encoder.layer.N.{layernorm_before, attention.attention.{query, key,
      value}, attention.output.dense, layernorm_after, intermediate.dense,
      output.dense}, layernorm, and the 1000-class classifier beside the
      tower), F32; and broken copies: vit-missing.safetensors (no
      vit.encoder.layer.1.output.dense.bias), vit-shape.safetensors
      (vit.embeddings.cls_token as [w]).
  safetensors_checkpoint.py check CKPT DUMP_DIR WIDTH MLP LAYERS
      DUMP_DIR holds run-reference --all --out_dir's .npy files of a graph
      import-model built with --weights=CKPT: every weight must be the
      checkpoint's tensor in tilec's orientation ([in, out], q|k|v side by
      side), rounded to F16, exactly; with a whole model's dumps also the
      patch and position embeddings, post-LayerNorm and the MAP head (q and
      kv cut from in_proj), or CLIP's class token, ln_pre and projection.

Only the standard library: the safetensors header is JSON, the data little
endian; F16 through struct's 'e' format, BF16 by rounding float32 bits.
"""
import json
import os
import struct
import sys
import zlib


def values(name, count, dtype):
    """Deterministic contents in [-0.25, 0.25) (LayerNorm weights around 1),
    with at most 7 significant bits: exact in F32, F16 and BF16 alike."""
    h = zlib.crc32(name.encode())
    if name.endswith("layer_norm1.weight") or name.endswith("layer_norm2.weight"):
        return [1.0 + ((h + 7919 * i) % 64 - 32) / 128.0 for i in range(count)]
    return [((h + 7919 * i) % 256 - 128) / 512.0 for i in range(count)]


def tower(width, mlp, layers):
    """name -> shape of a SigLIP vision tower (patch 4, 16 tokens)."""
    t = {
        "vision_model.embeddings.patch_embedding.weight": [width, 3, 4, 4],
        "vision_model.embeddings.patch_embedding.bias": [width],
        "vision_model.embeddings.position_embedding.weight": [16, width],
        "vision_model.post_layernorm.weight": [width],
        "vision_model.post_layernorm.bias": [width],
        "vision_model.head.probe": [1, 1, width],
        "vision_model.head.attention.in_proj_weight": [3 * width, width],
        "vision_model.head.attention.in_proj_bias": [3 * width],
        "vision_model.head.attention.out_proj.weight": [width, width],
        "vision_model.head.attention.out_proj.bias": [width],
        "vision_model.head.layernorm.weight": [width],
        "vision_model.head.layernorm.bias": [width],
        "vision_model.head.mlp.fc1.weight": [mlp, width],
        "vision_model.head.mlp.fc1.bias": [mlp],
        "vision_model.head.mlp.fc2.weight": [width, mlp],
        "vision_model.head.mlp.fc2.bias": [width],
    }
    for n in range(layers):
        p = "vision_model.encoder.layers.%d." % n
        for ln in ("layer_norm1", "layer_norm2"):
            t[p + ln + ".weight"] = [width]
            t[p + ln + ".bias"] = [width]
        for proj in ("q_proj", "k_proj", "v_proj", "out_proj"):
            t[p + "self_attn.%s.weight" % proj] = [width, width]
            t[p + "self_attn.%s.bias" % proj] = [width]
        t[p + "mlp.fc1.weight"] = [mlp, width]
        t[p + "mlp.fc1.bias"] = [mlp]
        t[p + "mlp.fc2.weight"] = [width, mlp]
        t[p + "mlp.fc2.bias"] = [width]
    return t


# The projection's width: clip-vit-l14-224's, which no flag overrides.
CLIP_PROJECTION = 768


def clip_tower(width, mlp, layers):
    """name -> shape of a CLIP vision tower with projection (patch 4,
    16 patches and the class token)."""
    t = {
        "vision_model.embeddings.class_embedding": [width],
        "vision_model.embeddings.patch_embedding.weight": [width, 3, 4, 4],
        "vision_model.embeddings.position_embedding.weight": [17, width],
        "vision_model.pre_layrnorm.weight": [width],
        "vision_model.pre_layrnorm.bias": [width],
        "vision_model.post_layernorm.weight": [width],
        "vision_model.post_layernorm.bias": [width],
        "visual_projection.weight": [CLIP_PROJECTION, width],
    }
    for name, shape in tower(width, mlp, layers).items():
        if ".encoder." in name:
            t[name] = shape
    return t


# vit-b16-224's classes, which no flag overrides.
VIT_CLASSES = 1000


def vit_tower(width, mlp, layers):
    """name -> shape of a ViTForImageClassification (patch 4, 16 patches and
    the class token)."""
    t = {
        "vit.embeddings.cls_token": [1, 1, width],
        "vit.embeddings.position_embeddings": [1, 17, width],
        "vit.embeddings.patch_embeddings.projection.weight": [width, 3, 4, 4],
        "vit.embeddings.patch_embeddings.projection.bias": [width],
        "vit.layernorm.weight": [width],
        "vit.layernorm.bias": [width],
        "classifier.weight": [VIT_CLASSES, width],
        "classifier.bias": [VIT_CLASSES],
    }
    for n in range(layers):
        p = "vit.encoder.layer.%d." % n
        for module, shape in (
                ("layernorm_before", [width]),
                ("attention.attention.query", [width, width]),
                ("attention.attention.key", [width, width]),
                ("attention.attention.value", [width, width]),
                ("attention.output.dense", [width, width]),
                ("layernorm_after", [width]),
                ("intermediate.dense", [mlp, width]),
                ("output.dense", [width, mlp])):
            t[p + module + ".weight"] = shape
            t[p + module + ".bias"] = [shape[0]]
    return t


def main_write_vit(out, width, mlp, layers):
    t = vit_tower(width, mlp, layers)
    write(os.path.join(out, "ckpt-vit.safetensors"), t, "F32")
    missing = dict(t)
    del missing["vit.encoder.layer.1.output.dense.bias"]
    write(os.path.join(out, "vit-missing.safetensors"), missing, "F32")
    shape = dict(t)
    shape["vit.embeddings.cls_token"] = [width]
    write(os.path.join(out, "vit-shape.safetensors"), shape, "F32")


def encode(vals, dtype):
    if dtype == "F32":
        return struct.pack("<%df" % len(vals), *vals)
    if dtype == "F16":
        return struct.pack("<%de" % len(vals), *vals)
    if dtype == "BF16":  # the values are exact in bfloat16
        bits = struct.unpack("<%dI" % len(vals), struct.pack("<%df" % len(vals), *vals))
        return struct.pack("<%dH" % len(vals), *[b >> 16 for b in bits])
    if dtype == "I64":
        return struct.pack("<%dq" % len(vals), *[int(v * 1000) for v in vals])
    raise ValueError(dtype)


def count(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def write(path, tensors, dtype, edit=None):
    header, data = {"__metadata__": {"format": "pt"}}, b""
    for name, shape in tensors.items():
        d = dtype
        if edit and edit.get("dtype", (None,))[0] == name:
            d = edit["dtype"][1]
        blob = encode(values(name, count(shape), d if d != "I64" else "F32"), d)
        header[name] = {"dtype": d, "shape": shape,
                        "data_offsets": [len(data), len(data) + len(blob)]}
        data += blob
    if edit and "offsets" in edit:
        header[edit["offsets"]]["data_offsets"][1] = len(data) + 8
        header[edit["offsets"]]["data_offsets"][0] += 8
    if edit and "overlap" in edit:
        a, b = edit["overlap"]
        header[b]["data_offsets"] = list(header[a]["data_offsets"])
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)  # writers pad the header to 8 bytes
    blob = struct.pack("<Q", len(text)) + text + data
    if edit and "truncate" in edit:
        blob = blob[:-1]
    with open(path, "wb") as f:
        f.write(blob)


def main_write(out, width, mlp, layers):
    t = tower(width, mlp, layers)
    for dtype in ("F32", "F16", "BF16"):
        write(os.path.join(out, "ckpt-%s.safetensors" % dtype), t, dtype)
    missing = dict(t)
    del missing["vision_model.encoder.layers.1.mlp.fc2.bias"]
    write(os.path.join(out, "missing.safetensors"), missing, "F32")
    shape = dict(t)
    shape["vision_model.encoder.layers.0.mlp.fc1.weight"] = [width, mlp]
    write(os.path.join(out, "shape.safetensors"), shape, "F32")
    p = "vision_model.encoder.layers.0."
    write(os.path.join(out, "dtype.safetensors"), t, "F32",
          {"dtype": (p + "layer_norm1.weight", "I64")})
    write(os.path.join(out, "truncated.safetensors"), t, "F32", {"truncate": True})
    write(os.path.join(out, "offsets.safetensors"), t, "F32",
          {"offsets": p + "self_attn.k_proj.bias"})
    write(os.path.join(out, "overlap.safetensors"), t, "F32",
          {"overlap": (p + "self_attn.q_proj.bias", p + "self_attn.k_proj.bias")})


def read_npy(path):
    with open(path, "rb") as f:
        blob = f.read()
    assert blob[:6] == b"\x93NUMPY", path
    n = struct.unpack("<H", blob[8:10])[0]
    header = blob[10:10 + n].decode()
    assert "'<f4'" in header, header
    data = blob[10 + n:]
    return list(struct.unpack("<%df" % (len(data) // 4), data))


def f16(v):
    return struct.unpack("<e", struct.pack("<e", v))[0]


def main_check(ckpt, dump, width, mlp, layers):
    def src(name, shape):
        return values(name, count(shape), "F32")

    def transposed(name, out_dim, in_dim):
        w = src(name, [out_dim, in_dim])
        return [w[o * in_dim + i] for i in range(in_dim) for o in range(out_dim)]

    checked = 0
    for n in range(layers):
        p = "vision_model.encoder.layers.%d." % n
        qkv_w, qkv_b = [0.0] * (width * 3 * width), []
        for k, proj in enumerate(("q_proj", "k_proj", "v_proj")):
            w = src(p + "self_attn.%s.weight" % proj, [width, width])
            for i in range(width):
                for o in range(width):
                    qkv_w[i * 3 * width + k * width + o] = w[o * width + i]
            qkv_b += src(p + "self_attn.%s.bias" % proj, [width])
        expected = {
            "ln1.gamma": src(p + "layer_norm1.weight", [width]),
            "ln1.beta": src(p + "layer_norm1.bias", [width]),
            "attn.qkv.w": qkv_w,
            "attn.qkv_bias.b": qkv_b,
            "attn.proj.w": transposed(p + "self_attn.out_proj.weight", width, width),
            "attn.proj_bias.b": src(p + "self_attn.out_proj.bias", [width]),
            "ln2.gamma": src(p + "layer_norm2.weight", [width]),
            "ln2.beta": src(p + "layer_norm2.bias", [width]),
            "mlp.up.w": transposed(p + "mlp.fc1.weight", mlp, width),
            "mlp.up_bias.b": src(p + "mlp.fc1.bias", [mlp]),
            "mlp.down.w": transposed(p + "mlp.fc2.weight", width, mlp),
            "mlp.down_bias.b": src(p + "mlp.fc2.bias", [width]),
        }
        checked += compare(ckpt, dump, {"l%d.%s" % (n, rest): want
                                        for rest, want in expected.items()})
    if os.path.exists(os.path.join(dump, "embed.class.npy")):
        checked += check_clip_tower(ckpt, dump, width, src, transposed)
    elif os.path.exists(os.path.join(dump, "embed.patch.w.npy")):
        checked += check_tower(ckpt, dump, width, mlp, src, transposed)
    print("%s: %d weights equal the checkpoint's tensors" % (ckpt, checked))


def compare(ckpt, dump, expected):
    for name, want in expected.items():
        got = read_npy(os.path.join(dump, name + ".npy"))
        want = [f16(v) for v in want]
        if got != want:
            bad = next(i for i in range(len(want)) if i >= len(got) or got[i] != want[i])
            sys.exit("%s (from %s): element %d is %s, expected %s" %
                     (name, ckpt, bad, got[bad] if bad < len(got) else None, want[bad]))
    return len(expected)


def check_tower(ckpt, dump, width, mlp, src, transposed):
    """The whole model's weights outside the layers (patch 4, 16 tokens)."""
    v, h = "vision_model.", "vision_model.head."
    ip = src(h + "attention.in_proj_weight", [3 * width, width])
    ib = src(h + "attention.in_proj_bias", [3 * width])
    q_w = [ip[o * width + i] for i in range(width) for o in range(width)]
    kv_w = [ip[(width + o) * width + i] for i in range(width) for o in range(2 * width)]
    expected = {
        "embed.patch.w": transposed(v + "embeddings.patch_embedding.weight", width, 48),
        "embed.patch_bias.b": src(v + "embeddings.patch_embedding.bias", [width]),
        "embed.position.w": src(v + "embeddings.position_embedding.weight", [16, width]),
        "post_ln.gamma": src(v + "post_layernorm.weight", [width]),
        "post_ln.beta": src(v + "post_layernorm.bias", [width]),
        "head.probe": src(h + "probe", [1, 1, width]),
        "head.attn.q.w": q_w,
        "head.attn.q_bias.b": ib[:width],
        "head.attn.kv.w": kv_w,
        "head.attn.kv_bias.b": ib[width:],
        "head.attn.proj.w": transposed(h + "attention.out_proj.weight", width, width),
        "head.attn.proj_bias.b": src(h + "attention.out_proj.bias", [width]),
        "head.ln2.gamma": src(h + "layernorm.weight", [width]),
        "head.ln2.beta": src(h + "layernorm.bias", [width]),
        "head.mlp.up.w": transposed(h + "mlp.fc1.weight", mlp, width),
        "head.mlp.up_bias.b": src(h + "mlp.fc1.bias", [mlp]),
        "head.mlp.down.w": transposed(h + "mlp.fc2.weight", width, mlp),
        "head.mlp.down_bias.b": src(h + "mlp.fc2.bias", [width]),
    }
    return compare(ckpt, dump, expected)


def check_clip_tower(ckpt, dump, width, src, transposed):
    """CLIP's weights outside the layers (patch 4, 17 tokens)."""
    v = "vision_model."
    expected = {
        "embed.class": src(v + "embeddings.class_embedding", [width]),
        "embed.patch.w": transposed(v + "embeddings.patch_embedding.weight", width, 48),
        "embed.position.w": src(v + "embeddings.position_embedding.weight", [17, width]),
        "pre_ln.gamma": src(v + "pre_layrnorm.weight", [width]),
        "pre_ln.beta": src(v + "pre_layrnorm.bias", [width]),
        "post_ln.gamma": src(v + "post_layernorm.weight", [width]),
        "post_ln.beta": src(v + "post_layernorm.bias", [width]),
        "head.proj.w": transposed("visual_projection.weight", CLIP_PROJECTION, width),
    }
    return compare(ckpt, dump, expected)


if __name__ == "__main__":
    cmd, a = sys.argv[1], sys.argv[2:]
    if cmd == "write":
        main_write(a[0], int(a[1]), int(a[2]), int(a[3]))
    elif cmd == "write-vit":
        main_write_vit(a[0], int(a[1]), int(a[2]), int(a[3]))
    elif cmd == "write-clip":
        write(os.path.join(a[0], "ckpt-clip.safetensors"),
              clip_tower(int(a[1]), int(a[2]), int(a[3])), "F32")
    else:
        main_check(a[0], a[1], int(a[2]), int(a[3]), int(a[4]))
