"""tilec against PyTorch on the exported encoder (vs_pytorch_test.sh)."""

_TOOLS = [
    "//tools/emit-device",
    "//tools/expand-reduce",
    "//tools/fuse-elementwise",
    "//tools/fuse-residual",
    "//tools/import-onnx",
    "//tools/plan-ownership",
    "//tools/quantize-fp8",
    "//tools/run-reference",
    "//tools/simulate-device",
]

def vs_pytorch_test(name, mode, tags = []):
    """<name>-<mode>-vs-pytorch: MODE is reference, pipeline-f16 or pipeline-fp8."""
    native.sh_test(
        name = name + "-" + mode + "-vs-pytorch",
        size = "small",
        srcs = ["vs_pytorch_test.sh"],
        args = [
            "tools",
            "$(rootpath :npy_compare)",
            "$(rootpath %s.onnx)" % name,
            "$(rootpath pixel_values.npy)",
            "$(rootpath %s.embeddings.npy)" % name,
            mode,
        ],
        data = _TOOLS + [
            "//scripts:pipeline_lib",
            ":npy_compare",
            name + ".onnx",
            name + ".embeddings.npy",
            "pixel_values.npy",
        ],
        tags = tags,
    )
