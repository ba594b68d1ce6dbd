"""tilec against PyTorch on the exported encoder (vs_pytorch_test.sh)."""

load("//passes/pipeline:pipeline_tools.bzl", "pipeline_tools")

# import-onnx, every pass of passes/pipeline/PIPELINE and the two that run
# a result (also what run_expect_test.sh needs).
PIPELINE_TOOLS = pipeline_tools(
    "import-onnx",
    "run-reference",
    "simulate-device",
)

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
                    output = "embeddings", abs_factor = 1, batch = None,
                    tags = []):
    """<name>-<mode>-vs-pytorch: MODE is reference, pipeline-f16 or pipeline-fp8.

    PIXELS is the exported input image, <name>.<output>.npy PyTorch's output;
    ABS_FACTOR scales the max-abs limits (vs_pytorch_test.sh). BATCH binds a
    dynamic batch axis (import-onnx --batch): the test is then
    <name>-b<BATCH>-<mode>-vs-pytorch and PyTorch's output
    <name>.<output>.b<BATCH>.npy.
    """
    expected = "%s.%s.npy" % (name, output)
    test = name
    if batch != None:
        expected = "%s.%s.b%d.npy" % (name, output, batch)
        test = "%s-b%d" % (name, batch)
    native.sh_test(
        name = test + "-" + mode + "-vs-pytorch",
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
            str(batch or 1),
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
