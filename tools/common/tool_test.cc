// ParseFlags and HelpText on flags defined here (issue 8, item 5): usage
// errors are Status values naming the flag, never gflags' exit(1).

#include "tools/common/tool.h"

#include <gflags/gflags.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <new>
#include <stdexcept>

DEFINE_int32(test_count, 3, "A count.");
DEFINE_bool(test_switch, false, "A switch.");
DEFINE_string(test_name_with_parts, "x", "A multiword name.");

namespace tilec::tools {
namespace {

Status Parse(std::vector<std::string> args, ParsedArgs* parsed) {
  args.insert(args.begin(), "tool");
  return ParseFlags(args, parsed);
}

TEST(ParseFlagsTest, SetsFlagsAndKeepsPositionals) {
  ParsedArgs parsed;
  ASSERT_TRUE(Parse({"in.tilec", "--test_count=7", "--test-switch", "-o",
                     "out.tilec", "--test-name-with-parts", "y"},
                    &parsed)
                  .ok());
  EXPECT_EQ(parsed.positional, std::vector<std::string>{"in.tilec"});
  EXPECT_EQ(FLAGS_test_count, 7);
  EXPECT_TRUE(FLAGS_test_switch);
  EXPECT_EQ(FLAGS_o, "out.tilec");
  EXPECT_EQ(FLAGS_test_name_with_parts, "y");
  ASSERT_TRUE(Parse({"--notest_switch", "--", "--not-a-flag"}, &parsed).ok());
  EXPECT_FALSE(FLAGS_test_switch);
  EXPECT_EQ(parsed.positional, std::vector<std::string>{"--not-a-flag"});
  EXPECT_TRUE(FlagGiven("test_count"));
}

TEST(ParseFlagsTest, UsageErrorsNameTheFlag) {
  ParsedArgs parsed;
  Status s = Parse({"--bogus"}, &parsed);
  EXPECT_EQ(s.code(), StatusCode::kBadInput);
  EXPECT_EQ(s.message(), "unknown flag --bogus (--help lists the flags)");
  s = Parse({"--test_count=abc"}, &parsed);
  EXPECT_EQ(s.message(), "--test_count=abc: not a valid int32 value");
  s = Parse({"in", "-o"}, &parsed);
  EXPECT_EQ(s.message(), "-o needs a value (string)");
  s = Parse({"--test_switch=maybe"}, &parsed);
  EXPECT_EQ(s.code(), StatusCode::kBadInput);
  s = Parse({"--flagfile=/nonexistent/flags"}, &parsed);
  EXPECT_EQ(s.code(), StatusCode::kBadInput);
  EXPECT_NE(s.message().find("/nonexistent/flags"), std::string::npos);
  s = Parse({"--fromenv=test_count"}, &parsed);
  EXPECT_EQ(s.code(), StatusCode::kBadInput);
}

TEST(ParseFlagsTest, ReadsFlagfiles) {
  const std::string path =
      ::testing::TempDir() + "/flags." + std::to_string(getpid());
  std::ofstream(path) << "# comment\n--test_count=11\n\n  --test_switch  \n";
  ParsedArgs parsed;
  Status s = Parse({"--flagfile=" + path}, &parsed);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(FLAGS_test_count, 11);
  EXPECT_TRUE(FLAGS_test_switch);
  std::ofstream(path) << "--test_count=1\nstray\n";
  s = Parse({"--flagfile=" + path}, &parsed);
  EXPECT_NE(s.message().find("line 2: expected a flag"), std::string::npos)
      << s.message();
  // A file that names itself ends at the nesting limit.
  std::ofstream(path) << "--flagfile=" << path << "\n";
  s = Parse({"--flagfile=" + path}, &parsed);
  EXPECT_NE(s.message().find("nested more than"), std::string::npos);
  std::remove(path.c_str());
}

TEST(ParseFlagsTest, HelpIsAskedNotFailed) {
  ParsedArgs parsed;
  EXPECT_TRUE(Parse({"--help", "--bogus"}, &parsed).code() ==
              StatusCode::kBadInput);
  EXPECT_EQ(parsed.help, ParsedArgs::Help::kTool);
  ASSERT_TRUE(Parse({"--helpfull"}, &parsed).ok());
  EXPECT_EQ(parsed.help, ParsedArgs::Help::kFull);
}

TEST(HelpTextTest, OwnAndSharedFlagsOnly) {
  const std::string help = HelpText("tool: does things", false);
  EXPECT_EQ(help.rfind("tool: does things\n", 0), 0u);
  EXPECT_NE(help.find("--test-count (int32, default 3)"), std::string::npos)
      << help;
  EXPECT_NE(help.find("  --o (string"), std::string::npos);
  EXPECT_EQ(help.find("  --vmodule ("), std::string::npos);
  EXPECT_NE(HelpText("tool", true).find("  --vmodule ("), std::string::npos);
}

TEST(EscapeTest, OneLineAlways) {
  EXPECT_EQ(EscapeForMessage(std::string("a\nb\0c\x7f", 6)),
            "a\\x0ab\\x00c\\x7f");
  EXPECT_EQ(CheckThreads(100000).message(), "--threads=100000: expected 1 to 256");
  EXPECT_TRUE(CheckThreads(2).ok());
}

TEST(RunAndFinishTest, AnEscapedExceptionIsAnInternalError) {
  EXPECT_EQ(RunAndFinish([] { return Status::BadInput("bad"); }), 2);
  EXPECT_EQ(RunAndFinish([]() -> Status { throw std::bad_alloc(); }), 1);
  EXPECT_EQ(RunAndFinish([]() -> Status { throw std::runtime_error("x"); }), 1);
}

TEST(CheckOutputsTest, RefusesAnInputOrTwoOutputsOnOnePath) {
  const std::string dir = ::testing::TempDir();
  const std::string in = dir + "/check_outputs_in";
  std::ofstream(in) << "x";
  const std::string link = dir + "/check_outputs_link";
  unlink(link.c_str());
  ASSERT_EQ(symlink(in.c_str(), link.c_str()), 0);
  EXPECT_TRUE(CheckOutputs({{"the input", in}}, {{"-o", dir + "/new"}}).ok());
  EXPECT_EQ(CheckOutputs({{"the input", in}}, {{"-o", link}}).code(),
            StatusCode::kBadInput);
  EXPECT_EQ(CheckOutputs({}, {{"-o", dir + "/a"}, {"--sidecar", dir + "/a"}})
                .code(),
            StatusCode::kBadInput);
  // Preset names, stdout and devices are no files to protect.
  EXPECT_TRUE(CheckOutputs({{"--target", "tiny"}, {"the input", "-"}},
                           {{"-o", "-"}, {"--trace", "/dev/null"}})
                  .ok());
}

TEST(CheckOutputsTest, RefusesAnOutputWithoutItsDirectory) {
  const std::string dir = ::testing::TempDir();
  EXPECT_TRUE(CheckOutputs({}, {{"-o", dir + "/report.txt"}}).ok());
  EXPECT_TRUE(CheckOutputs({}, {{"-o", "relative.txt"}}).ok());
  const Status missing = CheckOutputs(
      {}, {{"-o", dir + "/report.txt"},
           {"--json-report", dir + "/no-such-dir/report.json"}});
  EXPECT_EQ(missing.code(), StatusCode::kBadInput);
  EXPECT_EQ(missing.message(), "--json-report=" + dir +
                                   "/no-such-dir/report.json: no directory " +
                                   dir + "/no-such-dir to write it in");
}

}  // namespace
}  // namespace tilec::tools
