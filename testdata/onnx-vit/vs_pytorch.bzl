"""tilec against PyTorch on the exported encoder (vs_pytorch_test.sh)."""

# The default pipeline's tools with import-onnx, run-reference and
# simulate-device (also what run_onnx_test.sh needs).
PIPELINE_TOOLS = [
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

# What run_expect_test.sh needs besides its model and files (scripts/run.sh
# with prebuilt tools).
RUN_EXPECT_DATA = [
    "//scripts:compile.sh",
    "//scripts:pipeline_lib",
    "//scripts:run.sh",
    "//tools/dump-ir",
    "//tools/import-model",
    "//tools/inspect-program",
] + PIPELINE_TOOLS

def vs_pytorch_test(name, mode, pixels = "pixel_values.npy",
                    output = "embeddings", abs_factor = 1, tags = []):
    """<name>-<mode>-vs-pytorch: MODE is reference, pipeline-f16 or pipeline-fp8.

    PIXELS is the exported input image, <name>.<output>.npy PyTorch's output;
    ABS_FACTOR scales the max-abs limits (vs_pytorch_test.sh).
    """
    expected = "%s.%s.npy" % (name, output)
    native.sh_test(
        name = name + "-" + mode + "-vs-pytorch",
        size = "small",
        srcs = ["vs_pytorch_test.sh"],
        args = [
            "tools",
            "$(rootpath :npy_compare)",
            "$(rootpath %s.onnx)" % name,
            "$(rootpath %s)" % pixels,
            "$(rootpath %s)" % expected,
            mode,
            str(abs_factor),
        ],
        data = PIPELINE_TOOLS + [
            "//scripts:pipeline_lib",
            ":npy_compare",
            name + ".onnx",
            expected,
            pixels,
        ],
        tags = tags,
    )
