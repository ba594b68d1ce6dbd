"""The passes of passes/pipeline/PIPELINE, for BUILD files that need the
pipeline's tools as data (a test's runfiles). Starlark cannot read PIPELINE,
so this is a copy: //passes/pipeline:pipeline_tools_test fails when the two
differ."""

# In PIPELINE's order; each pass is a tool of the same name.
PIPELINE_PASSES = [
    "quantize-fp8",
    "plan-ownership",
    "fuse-elementwise",
    "fuse-residual",
    "expand-reduce",
    "emit-device",
]

def pipeline_tools(*others):
    """The //tools labels of every pipeline pass, then of the `others` tools.

    Args:
      *others: names of further tools under //tools (import-model, ...).

    Returns:
      A list of labels, e.g. "//tools/plan-ownership".
    """
    return ["//tools/%s" % name for name in PIPELINE_PASSES + list(others)]
