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

def tilec_stage(name, tool, args = [], input = None, data = [], **kwargs):
    """A genrule that runs one tilec tool: `tool args [input] -o <name>.tilec`.

    Test inputs are made by the tools themselves, so a change of an earlier
    stage shows up in the goldens of the later ones. The tool's stderr (its
    summary line) is shown only when it fails.

    Args:
      name: rule name; the output is <name>.tilec.
      tool: label of the tool binary.
      args: tool arguments ($(location) of `data` is expanded).
      input: optional input module label, passed as the last argument.
      data: other files the arguments name.
      **kwargs: passed to genrule (e.g. visibility).
    """
    tool = _full_label(tool)
    words = ["$(location %s)" % tool] + args
    srcs = list(data)
    if input:
        srcs.append(input)
        words.append("$(location %s)" % input)
    native.genrule(
        name = name,
        srcs = srcs,
        outs = [name + ".tilec"],
        cmd = ("log=$$(mktemp); if %s -o $@ 2>$$log; then rm -f $$log; " +
               "else cat $$log >&2; rm -f $$log; exit 1; fi") % " ".join(words),
        tools = [tool],
        **kwargs
    )

def ir_from_json(name, **kwargs):
    """<name>.tilec from the readable <name>.json through the schema (flatc)."""
    native.genrule(
        name = name + "_gen",
        srcs = [
            name + ".json",
            "//formats:tilec.fbs",
        ],
        outs = [name + ".tilec"],
        cmd = ("$(location @system//:flatc) -b -o $(@D) " +
               "$(location //formats:tilec.fbs) $(location %s.json)") % name,
        tools = ["@system//:flatc"],
        **kwargs
    )
