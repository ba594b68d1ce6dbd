"""Golden-file tests: run one tool on a saved input, compare with a file.

The tool's output goes through dump-ir (unless raw = True) so goldens are
the stable text form. scripts/update-goldens.sh rewrites every golden.
"""

def _full_label(label):
    if label.startswith("//") and ":" not in label:
        return label + ":" + label.split("/")[-1]
    return label

def golden_test(name, tool, golden, args = [], input = None, raw = False,
                expect_exit = 0, data = [], **kwargs):
    """Declares <name>: `tool args [input] | dump-ir` must equal `golden`.

    Args:
      name: test name.
      tool: label of the tool binary.
      golden: the expected text file.
      args: tool arguments ($(location) is expanded).
      input: optional input file label, passed as the last argument.
      raw: compare the tool's stdout (and stderr) directly instead of dump-ir.
      expect_exit: the tool's expected exit code (e.g. 2 for bad input).
      data: other files the tool reads.
      **kwargs: passed to sh_test.
    """
    srcs_data = [golden] + data
    for label in [_full_label(tool), "//tools/dump-ir:dump-ir"]:
        if label not in srcs_data:
            srcs_data.append(label)
    input_arg = ""
    if input:
        srcs_data.append(input)
        input_arg = "$(rootpath %s)" % input
    native.sh_test(
        name = name,
        srcs = ["//tools/testing:golden_test.sh"],
        args = [
            "$(rootpath %s)" % tool,
            "$(rootpath //tools/dump-ir)",
            "$(rootpath %s)" % golden,
            "1" if raw else "0",
            str(expect_exit),
            input_arg,
        ] + args,
        data = srcs_data,
        tags = kwargs.pop("tags", []) + ["golden"],
        **kwargs
    )
