"""Build rules shared by the FlatBuffers schemas and the pricing fingerprint."""

def flatc_cpp(name, schema, flags = []):
    """`name`: the C++ header of `schema` (NAME.fbs -> NAME_generated.h), from Debian's flatc."""
    native.genrule(
        name = name,
        srcs = [schema],
        outs = [schema.replace(".fbs", "_generated.h")],
        cmd = "$(location @system//:flatc) --cpp --scoped-enums " + " ".join(flags) +
              " -o $(@D) $(location %s)" % schema,
        tools = ["@system//:flatc"],
    )

def pricing_sources():
    """The package's sources the planner's prices may depend on (tests aside), as the filegroup
    `pricing_sources` that passes/plan's price fingerprint hashes (passes/plan/BUILD)."""
    native.filegroup(
        name = "pricing_sources",
        srcs = native.glob(
            ["*.h", "*.cc", "*.fbs"],
            exclude = ["*_test.cc"],
        ),
        visibility = ["//passes/plan:__pkg__"],
    )
