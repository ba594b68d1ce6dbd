#include "passes/inspect/simulation_report.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

namespace tilec::inspect {
namespace {

using ::testing::HasSubstr;

// The shape of simulate-device --report=json (testdata/simulate-device/
// report-json.golden), with fields the page does not read left out.
const char kReport[] = R"({
  "module": "split-gemm-bias.tilec",
  "target": "tiny",
  "tiles": 16,
  "clock_hz": 1.5e+09,
  "total_cycles": 2364,
  "compute_cycles": 1700,
  "exchange_cycles": 664,
  "slow_paths": [],
  "supersteps": [
    {"index": 0, "label": "mm", "compute_cycles": 998},
    {"index": 1, "label": "reduce+bias", "compute_cycles": 702}
  ],
  "ops": [
    {"op": 1, "name": "mm", "compute_cycles": 1436, "exchange_cycles": 664},
    {"op": 2, "name": "bias", "compute_cycles": 264, "exchange_cycles": 0}
  ],
  "comparison": {
    "atol": 0.02, "rtol": 0.01, "min_cosine": 0.9999, "fp8_defaults": false,
    "pass": false,
    "outputs": [
      {"value": 4, "name": "z", "type": "f16[4,32]", "pass": false,
       "elements": 128, "scale": 2.63085938, "max_abs_err": "inf",
       "max_rel_err": "nan", "cosine": 1, "mismatches": 3, "nonfinite": 1}
    ]
  }
})";

TEST(SimulationReport, ReadsTotalsOpsAndComparison) {
  SimulationReport r;
  const Status s = ParseSimulationReport(kReport, &r);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(r.module, "split-gemm-bias.tilec");
  EXPECT_EQ(r.tiles, 16);
  EXPECT_EQ(r.total_cycles, 2364);
  EXPECT_EQ(r.exchange_cycles, 664);
  EXPECT_EQ(r.supersteps, 2);
  ASSERT_EQ(r.ops.size(), 2u);
  EXPECT_EQ(r.ops[0].op, 1u);
  EXPECT_EQ(r.ops[0].compute_cycles, 1436);
  EXPECT_EQ(r.ops[1].exchange_cycles, 0);
  ASSERT_TRUE(r.compared);
  EXPECT_FALSE(r.pass);
  EXPECT_DOUBLE_EQ(r.min_cosine, 0.9999);
  ASSERT_EQ(r.outputs.size(), 1u);
  EXPECT_EQ(r.outputs[0].type, "f16[4,32]");
  EXPECT_EQ(r.outputs[0].mismatches, 3);
  EXPECT_TRUE(std::isinf(r.outputs[0].max_abs_err));
  EXPECT_TRUE(std::isnan(r.outputs[0].max_rel_err));
  EXPECT_DOUBLE_EQ(r.outputs[0].cosine, 1.0);
}

TEST(SimulationReport, WithoutComparison) {
  std::string json = kReport;
  json = json.substr(0, json.find("\"comparison\"")) + "\"comparison\": null}";
  SimulationReport r;
  const Status s = ParseSimulationReport(json, &r);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_FALSE(r.compared);
  EXPECT_TRUE(r.outputs.empty());
}

TEST(SimulationReport, ReadsTheExpectedComparisonWhenPresent) {
  SimulationReport r;
  ASSERT_TRUE(ParseSimulationReport(kReport, &r).ok());
  EXPECT_FALSE(r.has_expected);
  // simulate-device --expect=DIR writes it before "comparison".
  std::string json = kReport;
  json.insert(json.find("\"comparison\""),
              R"("expected": {"dir": "torch", "atol": 0.05, "rtol": 0.02,
                 "min_cosine": 0.999, "pass": false, "outputs": [
      {"value": 4, "name": "z", "type": "f16[1,4,32]", "pass": false,
       "elements": 128, "scale": 2.5, "max_abs_err": 0.25,
       "max_rel_err": 0.1, "cosine": 0.998, "mismatches": 7, "nonfinite": 0}
    ]},
  )");
  const Status s = ParseSimulationReport(json, &r);
  ASSERT_TRUE(s.ok()) << s.message();
  ASSERT_TRUE(r.has_expected);
  EXPECT_EQ(r.expected.dir, "torch");
  EXPECT_FALSE(r.expected.pass);
  EXPECT_DOUBLE_EQ(r.expected.atol, 0.05);
  EXPECT_DOUBLE_EQ(r.expected.rtol, 0.02);
  EXPECT_DOUBLE_EQ(r.expected.min_cosine, 0.999);
  ASSERT_EQ(r.expected.outputs.size(), 1u);
  EXPECT_EQ(r.expected.outputs[0].type, "f16[1,4,32]");
  EXPECT_EQ(r.expected.outputs[0].mismatches, 7);
  EXPECT_DOUBLE_EQ(r.expected.outputs[0].cosine, 0.998);
  // The reference's comparison is read apart from it.
  ASSERT_EQ(r.outputs.size(), 1u);
  EXPECT_EQ(r.outputs[0].mismatches, 3);

  json.replace(json.find("\"min_cosine\": 0.999,"), 20, "");
  EXPECT_THAT(ParseSimulationReport(json, &r).message(),
              HasSubstr("field expected.min_cosine is missing"));
}

TEST(SimulationReport, ErrorsNameTheField) {
  SimulationReport r;
  std::string json = kReport;
  json.replace(json.find("\"compute_cycles\": 1436"), 22, "\"cycles\": 1436");
  Status s = ParseSimulationReport(json, &r);
  EXPECT_EQ(s.code(), StatusCode::kBadInput);
  EXPECT_THAT(s.message(), HasSubstr("field ops[0].compute_cycles is missing "
                                     "or not an integer"));
  s = ParseSimulationReport("{\"total_cycles\": 3", &r);
  EXPECT_THAT(s.message(), HasSubstr("not JSON"));
  s = ParseSimulationReport("[1, 2]", &r);
  EXPECT_THAT(s.message(), HasSubstr("top level is not an object"));
  s = ParseSimulationReport("{}", &r);
  EXPECT_THAT(s.message(), HasSubstr("field module is missing"));
}

sim::SimResult Timing() {
  sim::SimResult t;
  t.tiles = 16;
  t.total_cycles = 2364;
  t.compute_cycles = 1700;
  t.exchange_cycles = 664;
  t.supersteps.resize(2);
  t.ops.resize(2);
  t.ops[0].op = 1;
  t.ops[0].compute_cycles = 1436;
  t.ops[0].exchange_cycles = 664;
  t.ops[1].op = 2;
  t.ops[1].compute_cycles = 264;
  return t;
}

TEST(SimulationReport, MustDescribeTheSameProgram) {
  SimulationReport r;
  ASSERT_TRUE(ParseSimulationReport(kReport, &r).ok());
  EXPECT_TRUE(CheckReportMatches(r, Timing()).ok());

  sim::SimResult longer = Timing();
  longer.total_cycles = 2365;
  Status s = CheckReportMatches(r, longer);
  EXPECT_EQ(s.code(), StatusCode::kBadInput);
  EXPECT_THAT(s.message(), HasSubstr("total_cycles is 2364 in the report but "
                                     "2365 for this program: a report of "
                                     "another program"));

  sim::SimResult moved = Timing();
  moved.ops[0].compute_cycles = 1435;
  moved.ops[1].compute_cycles = 265;
  EXPECT_THAT(
      CheckReportMatches(r, moved).message(),
      HasSubstr("op 1's compute_cycles is 1436 in the report but 1435"));

  sim::SimResult renumbered = Timing();
  renumbered.ops[1].op = 3;
  EXPECT_THAT(CheckReportMatches(r, renumbered).message(),
              HasSubstr("op 2 is in the report but not in this program"));
}

}  // namespace
}  // namespace tilec::inspect
