#include "sim/report_json.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

namespace tilec::sim {
namespace {

using ::testing::HasSubstr;

// Every member the report has, the optional ones included (a repeat's
// iteration, repeats, --expect), with non-finite and float-only numbers.
SimulationReport FullReport() {
  SimulationReport r;
  SimResult& s = r.result;
  s.target = "tiny";
  s.tiles = 16;
  s.clock_hz = 1.5e9;
  s.total_cycles = 2097;
  s.seconds = 2097 / 1.5e9;
  s.compute_cycles = 1700;
  s.exchange_cycles = 397;
  s.exchange_bound_cycles = 64;
  s.exchange_scheduled_cycles = 120;
  s.sync_cycles = 277;
  s.update_cycles = 12;
  s.exchange_phases = 1;
  s.kernel_calls = 6;
  s.gemm_macs = 8192;
  s.transfers = 2;
  s.pieces = 3;
  s.bytes_sent = 512;
  s.bytes_received = 1024;
  s.code_bytes_max = 4368;
  s.exchange_code_bytes_max = 32;
  s.tensor_bytes = 65536;
  s.exchange_code_bytes = {32, 32, 0, 0};
  s.peak_memory_bytes = 49728;
  s.peak_memory_tile = 1;
  s.slow_path_calls = 2;
  s.slow_paths.push_back({"add", 2, 64});
  s.repeats.push_back({0, 2, {1000, 1097}});
  SuperstepReport step;
  step.index = 0;
  step.iteration = 1;
  step.label = "mm \"quoted\"\n";
  step.compute_cycles = 998;
  step.exchange_cycles = 397;
  step.slowest_tile = 3;
  step.exchange_slowest_tile = -1;
  s.supersteps.push_back(step);
  step.iteration = -1;
  step.label = "";
  s.supersteps.push_back(step);
  OpReport op;
  op.op = 4000000000u;
  op.name = "mm";
  op.kind = "mat_mul";
  op.compute_cycles = 1436;
  op.macs = 8192;
  s.ops.push_back(op);
  s.slowest_tiles.push_back({0, 1820, 1700, 120, 3, 49728, {}, {}});
  SimulateDeviceReport& d = r.device;
  d.module_name = "<stdin>";
  d.compared = true;
  d.tolerance = {0.02, 0.01, 0.9999, false};
  d.fp8 = true;
  d.pass = false;
  OutputCheck check;
  check.value = 4;
  check.name = "z";
  check.type = "f16[4,32]";
  check.comparison = {128, 2.63085938, INFINITY,      NAN,  0.5,  3,
                      1,   7,          -0.970214844f, 1.5f, false};
  d.checks.push_back(check);
  d.expect_dir = "torch";
  check.comparison.max_abs_err = -INFINITY;
  d.expected.push_back(check);
  return r;
}

std::string Text(const SimulationReport& r) {
  return ReportJsonText(ReportToJson(r.result, r.device));
}

TEST(ReportFromJson, WriteReadWriteIsTheSameJson) {
  const std::string written = Text(FullReport());
  StatusOr<SimulationReport> read = ReportFromJson(written);
  ASSERT_TRUE(read.ok()) << read.status().message();
  EXPECT_EQ(Text(*read), written);
  EXPECT_EQ(read->result.ops[0].op, 4000000000u);
  EXPECT_EQ(read->result.supersteps[0].iteration, 1);
  EXPECT_EQ(read->result.supersteps[1].iteration, -1);
  EXPECT_EQ(read->device.module_name, "<stdin>");
  EXPECT_TRUE(std::isinf(read->device.checks[0].comparison.max_abs_err));
  EXPECT_TRUE(std::isnan(read->device.checks[0].comparison.max_rel_err));
  EXPECT_EQ(read->device.checks[0].comparison.worst_sim, -0.970214844f);
}

TEST(ReportFromJson, WithoutTheOptionalMembers) {
  SimulationReport r = FullReport();
  r.result.repeats.clear();
  r.device.compared = false;
  r.device.expect_dir.clear();
  const std::string written = Text(r);
  EXPECT_THAT(written, HasSubstr("\"comparison\": null"));
  StatusOr<SimulationReport> read = ReportFromJson(written);
  ASSERT_TRUE(read.ok()) << read.status().message();
  EXPECT_FALSE(read->device.compared);
  EXPECT_TRUE(read->device.expect_dir.empty());
  EXPECT_EQ(Text(*read), written);
}

// The message for `text` with `from` replaced by `to` in FullReport's text.
std::string ErrorAfter(const std::string& from, const std::string& to) {
  std::string text = Text(FullReport());
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  StatusOr<SimulationReport> read = ReportFromJson(text);
  EXPECT_FALSE(read.ok());
  EXPECT_EQ(read.status().code(), StatusCode::kBadInput);
  const std::string message = read.status().message();
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  return message;
}

TEST(ReportFromJson, BadInputNamesTheKey) {
  EXPECT_THAT(ErrorAfter("\"tiles\": 16,", ""),
              HasSubstr("key tiles is missing"));
  EXPECT_THAT(ErrorAfter("\"tiles\": 16", "\"tiles\": \"16\""),
              HasSubstr("key tiles is not an integer"));
  EXPECT_THAT(ErrorAfter("\"compute_cycles\": 1436", "\"compute_cycles\": 1.5"),
              HasSubstr("key ops[0].compute_cycles is not an integer"));
  EXPECT_THAT(ErrorAfter("\"op\": 4000000000", "\"op\": 5000000000"),
              HasSubstr("key ops[0].op is out of range"));
  EXPECT_THAT(ErrorAfter("\"worst_sim\": -0.970214844", "\"worst_sim\": -1e39"),
              HasSubstr("key expected.outputs[0].worst_sim is out of range"));
  EXPECT_THAT(ErrorAfter("\"cosine\": 0.5", "\"cosine\": \"high\""),
              HasSubstr("key expected.outputs[0].cosine is not a number"));
  EXPECT_THAT(ErrorAfter("\"fp8_defaults\": true", "\"fp8_defaults\": 1"),
              HasSubstr("key comparison.fp8_defaults is not true or false"));
  EXPECT_THAT(ErrorAfter("\"dir\": \"torch\",", ""),
              HasSubstr("key expected.dir is missing"));
  EXPECT_THAT(ErrorAfter("\"dir\": \"torch\"", "\"dir\": \"\""),
              HasSubstr("key expected.dir is empty"));
  EXPECT_THAT(ErrorAfter("\"supersteps\": [", "\"supersteps\": [1, "),
              HasSubstr("supersteps[0] is not an object"));
  EXPECT_THAT(ErrorAfter("\"slow_paths\": [", "\"slow_paths\": {\"a\": ["),
              HasSubstr("not JSON: line"));
}

TEST(ReportFromJson, NotAReport) {
  EXPECT_THAT(ReportFromJson("{\"total_cycles\": 3").status().message(),
              HasSubstr("not JSON: line 1, column 19"));
  EXPECT_EQ(ReportFromJson("{\"tiles\": 1e400}").status().message(),
            "not JSON: number overflow parsing '1e400'");
  EXPECT_THAT(ReportFromJson("[1, 2]").status().message(),
              HasSubstr("the top level is not an object"));
  EXPECT_THAT(ReportFromJson("{}").status().message(),
              HasSubstr("key module is missing (not a simulate-device "
                        "--report=json file?)"));
  // Comments are skipped, as they always were.
  const std::string text = "// a report\n" + Text(FullReport());
  EXPECT_TRUE(ReportFromJson(text).ok());
}

}  // namespace
}  // namespace tilec::sim
