#include "passes/inspect/program_report.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "passes/inspect/test_program.h"

namespace tilec::inspect {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// Two tiles, two supersteps, every number from docs/machine.md's formulas:
//   superstep 0 "mm": tile 0 runs op 1's F16 GEMM M=4 K=16 N=32 into F32 C
//     in interleaved memory: 294 + ceil(16/16) * ceil(32/16) * (4*4 + 160)
//     = 646 cycles, 2,048 MACs; then sends C (512 B, 128 words) to tile 1:
//     the Send takes effect at 2, the words arrive in [2 + 52, 182), and
//     sync adds 277: 459 cycles (endpoint bound 128).
//   superstep 1 "cast": tile 1 casts op 2's [4,32] F32 to F16:
//     200 + 10 * ceil(128/4) = 520 cycles.
// Total 646 + 459 + 520 = 1,625 cycles.
// Code: every tile has tiny's 4,096 B runtime, in element 0 (16,384 B).
//   Tile 0: superstep 0 (32) + the GEMM call (16 + 8 x 7 operands) = 104;
//     exchange tables 8 + a Send of over 64 words (8 + 4), rounded: 24.
//   Tile 1: supersteps 0 and 1 (64) + the cast (16 + 8 x 4) = 112; tables
//     8 + a receive (8) with its pointer (4), rounded: 24. Total 4,232.
TestProgram GemmThenCast() {
  TestProgram p;
  const uint32_t x =
      p.AddValue("x", {4, 16}, fb::DType::F16, fb::ValueRole::Input);
  const uint32_t w =
      p.AddValue("w", {16, 32}, fb::DType::F16, fb::ValueRole::Weight);
  const uint32_t y =
      p.AddValue("y", {4, 32}, fb::DType::F16, fb::ValueRole::Output);
  const uint32_t c32 =
      p.AddValue("c", {4, 32}, fb::DType::F32, fb::ValueRole::Activation);
  p.AddOp(1, fb::OpKind::MatMul, "mm");
  p.AddOp(2, fb::OpKind::Cast, "cast");
  p.module.ops[0]->operands = {x, w};
  p.module.ops[0]->results = {c32};
  p.module.ops[1]->operands = {c32};
  p.module.ops[1]->results = {y};
  p.module.ops[0]->estimate = std::make_unique<fb::EstimateT>();
  p.module.ops[0]->estimate->cycles = 1300;
  const uint32_t a = p.AddBuffer(0, 0, 128);
  const uint32_t b = p.AddBuffer(0, 16384, 1024);
  const uint32_t c = p.AddBuffer(0, 32768, 512, fb::DType::F32);
  const uint32_t r = p.AddBuffer(1, 32768, 512, fb::DType::F32);
  const uint32_t out = p.AddBuffer(1, 0, 256);
  p.AddStep("mm");
  p.AddStep("cast");
  p.AddCompute(0, 0, "gemm", {a, b, c}, {4, 16, 32, 0}, 1);
  p.AddTransfer(0, 0, c, 512, 1, {{1, r}}, 1);
  p.AddCompute(1, 1, "cast", {r, out}, {4, 32}, 2);
  p.BindInput(x, 0, a);
  p.BindInput(w, 0, b);
  p.BindOutput(y, 1, out);
  return p;
}

std::string Data(const TestProgram& p, const ReportOptions& options = {}) {
  std::string json;
  const Status s = ReportData(p.Completed(), options, &json);
  EXPECT_TRUE(s.ok()) << s.message();
  return json;
}

TEST(ProgramReport, SummaryCyclesAndMemory) {
  const std::string json = Data(GemmThenCast());
  EXPECT_THAT(json, HasSubstr("\"summary\":{\"cycles\":1625,"
                              "\"compute_cycles\":1166,"
                              "\"exchange_cycles\":459,"
                              "\"exchange_bound_cycles\":128,"
                              "\"exchange_scheduled_cycles\":182,"
                              "\"sync_cycles\":277,\"update_cycles\":0,"
                              "\"exchange_phases\":1,"
                              "\"supersteps\":2,\"estimate_cycles\":1300,"));
  EXPECT_THAT(json, HasSubstr("\"code_bytes_max\":4232,"
                              "\"exchange_code_bytes_max\":24,"
                              "\"tensor_bytes\":65536,"));
  // Tile 0 holds x, w and C in superstep 0 (1,664 B); tile 1 the received
  // C and the output (768 B in superstep 1).
  EXPECT_THAT(json, HasSubstr("\"peak_live_bytes\":1664,\"peak_live_tile\":0"));
  EXPECT_THAT(json, HasSubstr("{\"tile\":0,\"live\":[1664,1024],"));
  EXPECT_THAT(json, HasSubstr("{\"tile\":1,\"live\":[512,768],"));
}

TEST(ProgramReport, OpRowsCarryEstimateSimulatedAndGemmWork) {
  const std::string json = Data(GemmThenCast());
  // id, name, kind, owners, recipe, 5 estimate fields, compute, exchange,
  // calls, compute tiles, transfers, pieces, bytes received, MACs, GEMM
  // cycles, AMP MACs per cycle (F16: 64), slow calls, first and last step.
  EXPECT_THAT(json, HasSubstr("[1,\"mm\",\"mat_mul\",\"\",\"\",1300,0,0,0,0,"
                              "646,459,1,1,1,1,512,2048,646,64,0,0,0]"));
  EXPECT_THAT(json, HasSubstr("[2,\"cast\",\"cast\",\"\",\"\",0,0,0,0,0,"
                              "520,0,1,1,0,0,0,0,0,0,0,1,1]"));
}

TEST(ProgramReport, ThroughputOfTheGraphsGemms) {
  TestProgram p = GemmThenCast();
  // No model recorded: no batch, so only the peak's fraction, 2,048 MACs
  // over 1,625 cycles x 16 tiles x 128.
  EXPECT_THAT(Data(p), HasSubstr("\"throughput\":{\"batch\":null,"
                                 "\"gemm_macs\":2048,"
                                 "\"cycles_per_image\":null,"
                                 "\"images_per_second\":null,"
                                 "\"fp8_peak_macs_per_cycle\":2048,"
                                 "\"fp8_peak_fraction\":0.0006153846153846154}"));
  // Two images: 812.5 cycles each, 1.5e9 / 812.5 a second.
  p.module.model = std::make_unique<fb::ModelT>();
  p.module.model->batch = 2;
  EXPECT_THAT(Data(p), HasSubstr("\"throughput\":{\"batch\":2,"
                                 "\"gemm_macs\":2048,"
                                 "\"cycles_per_image\":812.5,"
                                 "\"images_per_second\":1846153.8461538462,"));
}

TEST(ProgramReport, TimelineAndExchangeBySuperstep) {
  const std::string json = Data(GemmThenCast());
  // label, start, compute, exchange, slowest tile, exchange's slowest tile,
  // calls, transfers, pieces, bytes received, fragments, spans, split, ops,
  // received map, fragments map, exchange bound, scheduled, sync, update.
  // Tile 1 receives last.
  EXPECT_THAT(json, HasSubstr("[\"mm\",0,646,459,0,1,1,1,1,512,2,"
                              "[[1,\"gemm\",646,1]],[[1,459]],[[1,1,1,512]],"));
  EXPECT_THAT(json, HasSubstr(",128,182,277,0]"));
  EXPECT_THAT(json, HasSubstr("[\"cast\",1105,520,0,1,-1,1,0,0,0,0,"
                              "[[2,\"cast\",520,1]],[],[[2,1,0,0]],-1,-1,"
                              "0,0,0,0]"));
  // The largest transfer: superstep 0, op 1, transfer 0, tile 0 buffer #2,
  // 512 B in 1 piece to 1 destination.
  EXPECT_THAT(json, HasSubstr("[0,1,0,0,2,512,1,1,\"f32\",\"1\"]"));
}

TEST(ProgramReport, TileMapsAreRunLengthEncodedAndShared) {
  const std::string json = Data(GemmThenCast());
  // Superstep 0's received bytes per tile (512 on tile 1) and op 1's over
  // the program are the same array, stored once.
  const std::string map = "[0,1,512,1,0,14]";
  const size_t at = json.find("\"tile_maps\":");
  ASSERT_NE(at, std::string::npos);
  const std::string maps = json.substr(at);
  EXPECT_THAT(maps, HasSubstr(map));
  EXPECT_EQ(maps.find(map), maps.rfind(map));
}

TEST(ProgramReport, OptionsChooseTilesAndHostTimes) {
  ReportOptions options;
  options.busiest_tiles = 1;
  options.tiles = {5};
  options.compile_seconds = 1.5;
  const std::string json = Data(GemmThenCast(), options);
  EXPECT_THAT(json, HasSubstr("{\"tile\":0,"));
  EXPECT_THAT(json, Not(HasSubstr("{\"tile\":1,")));
  EXPECT_THAT(json, HasSubstr("{\"tile\":5,\"live\":[0,0],\"buffers\":[]}"));
  EXPECT_THAT(json, HasSubstr("\"host\":{\"compile_seconds\":1.5,"
                              "\"simulate_seconds\":null}"));
  options.tiles = {16};
  std::string ignored;
  const Status s = ReportData(GemmThenCast().Completed(), options, &ignored);
  EXPECT_EQ(s.code(), StatusCode::kBadInput);
  EXPECT_THAT(s.message(), HasSubstr("--tiles: tile 16 is outside"));
}

// simulate-device's report of GemmThenCast, as sim::ReportFromJson reads
// it: the cycles the page checks, one output compared.
sim::SimulationReport GemmThenCastReport() {
  sim::SimulationReport sim;
  sim.result.tiles = 16;
  sim.result.supersteps.resize(2);
  sim.result.total_cycles = 1625;
  sim.result.compute_cycles = 1166;
  sim.result.exchange_cycles = 459;
  sim.result.ops.resize(2);
  sim.result.ops[0].op = 1;
  sim.result.ops[0].compute_cycles = 646;
  sim.result.ops[0].exchange_cycles = 459;
  sim.result.ops[1].op = 2;
  sim.result.ops[1].compute_cycles = 520;
  sim.device.compared = true;
  sim.device.pass = true;
  sim.device.checks.push_back({});
  sim.device.checks[0].name = "y";
  sim.device.checks[0].comparison.cosine = 0.99995;
  return sim;
}

TEST(ProgramReport, SimulationReportIsShown) {
  sim::SimulationReport sim = GemmThenCastReport();
  ReportOptions options;
  options.simulation = &sim;
  options.simulation_name = "sim.json";
  EXPECT_THAT(Data(GemmThenCast(), options),
              HasSubstr("\"simulation\":{\"file\":\"sim.json\",\"module\":\"\","
                        "\"compared\":true,\"pass\":true,"));
  // Without --expect the page has no expected comparison to show.
  EXPECT_THAT(Data(GemmThenCast(), options), HasSubstr(",\"expected\":null}"));
  sim.device.expect_dir = "torch";
  sim.device.tolerance.atol = 0.05;
  sim.device.tolerance.min_cosine = 0.999;
  sim.device.expected.push_back({});
  sim.device.expected[0].name = "y";
  sim.device.expected[0].comparison.pass = false;
  sim.device.expected[0].comparison.cosine = 0.5;
  sim.device.expected[0].comparison.max_abs_err = 0.25;
  EXPECT_THAT(
      Data(GemmThenCast(), options),
      HasSubstr(",\"expected\":{\"dir\":\"torch\",\"pass\":false,"
                "\"atol\":0.05,\"rtol\":0,\"min_cosine\":0.999,\"outputs\":"
                "[{\"value\":0,\"name\":\"y\",\"type\":\"\",\"pass\":false,"));
  // Also when the run did not compare with the reference.
  sim.device.compared = false;
  EXPECT_THAT(Data(GemmThenCast(), options),
              HasSubstr("\"compared\":false,\"expected\":{\"dir\":\"torch\""));
}

// The report's error for `sim`, named "sim.json".
std::string MismatchError(const sim::SimulationReport& sim) {
  ReportOptions options;
  options.simulation = &sim;
  options.simulation_name = "sim.json";
  std::string ignored;
  const Status s = ReportData(GemmThenCast().Completed(), options, &ignored);
  EXPECT_EQ(s.code(), StatusCode::kBadInput);
  return s.message();
}

TEST(ProgramReport, SimulationReportMustMatchTheProgram) {
  sim::SimulationReport moved = GemmThenCastReport();
  moved.result.ops[1].compute_cycles = 521;
  EXPECT_THAT(MismatchError(moved),
              HasSubstr("sim.json: op 2's compute_cycles is 521 in the report "
                        "but 520 for this program"));
  sim::SimulationReport longer = GemmThenCastReport();
  longer.result.total_cycles = 1626;
  EXPECT_THAT(MismatchError(longer),
              HasSubstr("sim.json: total_cycles is 1626 in the report but "
                        "1625 for this program: a report of another program"));
  sim::SimulationReport renumbered = GemmThenCastReport();
  renumbered.result.ops[1].op = 3;
  EXPECT_THAT(MismatchError(renumbered),
              HasSubstr("op 3 is in the report but not in this program"));
}

TEST(ProgramReport, MalformedProgramIsBadInput) {
  TestProgram p = GemmThenCast();
  // C moved into standard memory: the simulator's memory rule.
  p.module.program->buffers[2]->offset = kTensorBase + 4096;
  std::string ignored;
  const Status s = ReportData(p.Completed(), {}, &ignored);
  EXPECT_EQ(s.code(), StatusCode::kBadInput);
  EXPECT_THAT(s.message(), HasSubstr("not in interleaved memory"));
}

TEST(ProgramReport, PageEmbedsTheDataWhereNothingCanCloseTheScript) {
  TestProgram p = GemmThenCast();
  p.module.ops[1]->name = "</script><b>";
  const std::string json = Data(p);
  EXPECT_THAT(json, HasSubstr("\"\\u003c/script>\\u003cb>\""));
  const std::string page = ReportPage(json);
  EXPECT_THAT(page, HasSubstr("<script type=\"application/json\" "
                              "id=\"tilec-data\">\n" +
                              json + "</script>"));
  EXPECT_THAT(page, Not(HasSubstr("<!--tilec:")));
  EXPECT_EQ(page.rfind("</html>\n"), page.size() - 8);
}

}  // namespace
}  // namespace tilec::inspect
