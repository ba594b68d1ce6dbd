#include "sim/simulate_device.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace tilec::sim {
namespace {

using ::testing::HasSubstr;

// A hand-filled result: the report and trace only format what they get.
sim::SimResult SampleResult() {
  sim::SimResult r;
  r.target = "tiny";
  r.tiles = 16;
  r.clock_hz = 1.5e9;
  r.total_cycles = 1500;
  r.compute_cycles = 900;
  r.exchange_cycles = 600;
  r.exchange_phases = 1;
  sim::SuperstepReport s;
  s.label = "only";
  s.compute_cycles = 900;
  s.exchange_cycles = 600;
  s.slowest_tile = 3;
  s.compute_spans.push_back({5, "add", 900, 2});
  s.exchange_split.push_back({5, 600});
  r.supersteps.push_back(s);
  sim::OpReport o;
  o.op = 5;
  o.name = "residual";
  o.kind = "add";
  o.compute_cycles = 900;
  o.exchange_cycles = 600;
  o.slow_path_calls = 1;
  r.ops.push_back(o);
  r.slow_paths.push_back({"add", 1, 64});
  r.slow_path_calls = 1;
  sim::TileReport t;
  t.tile = 3;
  t.busy_cycles = 1000;
  t.compute_cycles = 900;
  t.exchange_cycles = 100;
  t.step_compute_cycles = {900};
  t.step_exchange_cycles = {100};
  r.slowest_tiles.push_back(t);
  return r;
}

TEST(ReportTest, TextNamesSlowPathsOpsAndFailures) {
  SimulateDeviceReport report;
  report.module_name = "m.tilec";
  report.compared = true;
  report.tolerance = sim::DefaultTolerance(false);
  report.pass = false;
  OutputCheck check;
  check.value = 4;
  check.name = "z";
  check.type = "f16[4,32]";
  check.comparison.pass = false;
  check.comparison.worst_index = 7;
  check.comparison.worst_sim = 1.5f;
  check.comparison.worst_ref = 1.0f;
  report.checks.push_back(check);
  const std::string text = ReportText(SampleResult(), report);
  EXPECT_THAT(text, HasSubstr("total: 1500 cycles = 1.000 us"));
  EXPECT_THAT(text, HasSubstr("slow path (binary inputs sharing a memory "
                              "element): add 1 calls +64 cycles\n"));
  EXPECT_THAT(text, HasSubstr("add residual\n"));
  EXPECT_THAT(text, HasSubstr("%4 z f16[4,32]: FAIL"));
  EXPECT_THAT(text, HasSubstr("worst [7] sim 1.5 ref 1\n"));
  EXPECT_THAT(text, HasSubstr("result: FAIL\n"));
}

TEST(ReportTest, JsonSpellsNonFiniteErrorsAsStrings) {
  SimulateDeviceReport report;
  report.compared = true;
  OutputCheck check;
  check.comparison.max_abs_err = INFINITY;
  report.checks.push_back(check);
  const std::string json = ReportJson(SampleResult(), report);
  EXPECT_THAT(json, HasSubstr("\"max_abs_err\": \"inf\""));
  EXPECT_THAT(json, HasSubstr("\"slow_paths\": [{\"kernel\": \"add\", "
                              "\"calls\": 1, \"extra_cycles\": 64}]"));
}

TEST(TraceTest, PhasesOpsAndTilesInMicroseconds) {
  const std::string trace = TraceJson(SampleResult());
  // 900 cycles at 1.5 GHz = 0.6 us, exchange from 0.6 us for 0.4 us.
  EXPECT_THAT(trace, HasSubstr("\"name\": \"superstep 0 only compute\", "
                               "\"cat\": \"compute\", \"ts\": 0.000000, "
                               "\"dur\": 0.600000"));
  EXPECT_THAT(trace, HasSubstr("\"name\": \"op 5 residual exchange\", "
                               "\"cat\": \"exchange\", \"ts\": 0.600000, "
                               "\"dur\": 0.400000"));
  EXPECT_THAT(trace, HasSubstr("\"tid\": 103, \"name\": \"superstep 0 only "
                               "exchange\", \"cat\": \"exchange\", \"ts\": "
                               "0.600000, \"dur\": 0.066667"));
}

}  // namespace
}  // namespace tilec::sim
