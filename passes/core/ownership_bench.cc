// Micro benchmark of the ownership algebra on SigLIP-sized values over the
// ipu21 target: the transfer computation a planner calls thousands of times.
//
//   bazel run //passes/core:ownership_bench [-- [--schema=PATH]
//       [--target=PATH] [--only=SUBSTRING]]
//
// --only runs the redistributions whose text contains SUBSTRING (for perf).
// Prints, per redistribution, the time of PlanTransfers and of the cost-only
// EstimateTransferCost, and the plan's cost summary. Timings, not assertions.

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "flatbuffers/idl.h"
#include "flatbuffers/util.h"
#include "formats/tilec_generated.h"
#include "passes/core/ownership.h"

namespace tilec::passes {
namespace {

// The target's numbers come from the preset, through the schema, so the
// benchmark prices exchanges exactly as the tools do.
bool LoadTarget(const char* schema_path, const char* json_path,
                fb::TargetT* target) {
  std::string schema, json;
  if (!flatbuffers::LoadFile(schema_path, false, &schema) ||
      !flatbuffers::LoadFile(json_path, false, &json)) {
    std::fprintf(stderr, "ownership_bench: cannot read %s or %s\n", schema_path,
                 json_path);
    return false;
  }
  flatbuffers::Parser parser;
  if (!parser.Parse(schema.c_str()) || !parser.SetRootType("Target") ||
      !parser.Parse(json.c_str())) {
    std::fprintf(stderr, "ownership_bench: %s: %s\n", json_path,
                 parser.error_.c_str());
    return false;
  }
  flatbuffers::GetRoot<fb::Target>(parser.builder_.GetBufferPointer())
      ->UnPackTo(target);
  return true;
}

fb::OwnershipT Parse(const char* text) {
  std::string error;
  std::optional<fb::OwnershipT> o = ParseOwnership(text, &error);
  if (!o) {
    std::fprintf(stderr, "%s\n", error.c_str());
    std::exit(1);
  }
  return *o;
}

// Mean microseconds per call of fn, over at least 0.2 s and 10 calls.
template <typename Fn>
double MicrosPerCall(Fn&& fn) {
  using Clock = std::chrono::steady_clock;
  fn();  // warm up
  int64_t calls = 0;
  const auto start = Clock::now();
  auto elapsed = Clock::duration::zero();
  while (calls < 10 || elapsed < std::chrono::milliseconds(200)) {
    fn();
    ++calls;
    elapsed = Clock::now() - start;
  }
  return std::chrono::duration<double, std::micro>(elapsed).count() / calls;
}

int Main(int argc, char** argv) {
  std::string schema = "formats/tilec.fbs";
  std::string target_json = "formats/targets/ipu21.json";
  std::string only;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&](const char* flag) -> std::optional<std::string> {
      const std::string prefix = std::string(flag) + "=";
      if (arg.rfind(prefix, 0) != 0) return std::nullopt;
      return arg.substr(prefix.size());
    };
    if (auto v = value("--schema")) {
      schema = *v;
    } else if (auto v = value("--target")) {
      target_json = *v;
    } else if (auto v = value("--only")) {
      only = *v;
    } else {
      std::fprintf(stderr,
                   "usage: ownership_bench [--schema=PATH] [--target=PATH] "
                   "[--only=SUBSTRING]\n");
      return 2;
    }
  }
  fb::TargetT target;
  if (!LoadTarget(schema.c_str(), target_json.c_str(), &target)) return 2;

  const std::vector<int64_t> shape = {729, 4304};
  const int element_bytes = 2;  // F16
  const std::vector<std::pair<const char*, const char*>> cases = {
      {"blocked(9x6, rep=27)", "blocked(6x27, rep=9)"},
      {"blocked(729x2)", "flat(grain=4, tiles=1472)"},
      {"flat(grain=4, tiles=1472)", "blocked(729x2)"},
      {"blocked(9x6, rep=27)", "flat(grain=4, tiles=1472)"},
      {"flat(grain=4, tiles=1472)", "blocked(9x6, rep=27)"},
      {"flat(grain=4, tiles=1472)", "flat(grain=8, tiles=1458, first=7)"},
      {"blocked(729x2)", "blocked(9x6, rep=27)"},
      {"blocked(1x1, rep=736, stride=2)", "flat(grain=4, tiles=1472)"},
  };
  std::printf("target %s, shape [729, 4304], F16\n\n", target.name.c_str());
  int64_t sink = 0;
  for (const auto& [from_text, to_text] : cases) {
    if ((std::string(from_text) + " -> " + to_text).find(only) ==
        std::string::npos) {
      continue;
    }
    const fb::OwnershipT from = Parse(from_text);
    const fb::OwnershipT to = Parse(to_text);
    for (const fb::OwnershipT* o : {&from, &to}) {
      const std::string error = ValidateOwnership(*o, shape, target.tiles);
      if (!error.empty()) {
        std::fprintf(stderr, "%s\n", error.c_str());
        return 1;
      }
    }
    const TransferPlan plan = PlanTransfers(from, to, shape, element_bytes);
    int64_t destinations = 0;
    for (const Transfer& t : plan.transfers) {
      destinations += static_cast<int64_t>(t.destination_tiles.size());
    }
    const TransferCost cost = CostOfPlan(plan, target);
    const double plan_us = MicrosPerCall([&] {
      sink += PlanTransfers(from, to, shape, element_bytes).transfers.size();
    });
    const double estimate_us = MicrosPerCall([&] {
      sink += EstimateTransferCost(from, to, shape, element_bytes, target)
                  .phase_cycles;
    });
    std::printf("%s -> %s\n", from_text, to_text);
    std::printf("  PlanTransfers %.1f us, EstimateTransferCost %.1f us\n",
                plan_us, estimate_us);
    std::printf(
        "  %zu transfers (%lld destinations), %zu local copies; phase %lld "
        "cycles (tile %d), local copies %lld cycles\n",
        plan.transfers.size(), static_cast<long long>(destinations),
        plan.local_copies.size(), static_cast<long long>(cost.phase_cycles),
        cost.exchange_bottleneck_tile,
        static_cast<long long>(cost.local_copy_cycles));
    std::printf(
        "  sent %lld B, received %lld B, max per tile: sent %lld B, "
        "received %lld B, %lld fragments\n\n",
        static_cast<long long>(cost.bytes_sent),
        static_cast<long long>(cost.bytes_received),
        static_cast<long long>(cost.max_bytes_sent),
        static_cast<long long>(cost.max_bytes_received),
        static_cast<long long>(cost.max_fragments));
  }

  if (!only.empty()) return sink == 42 ? 3 : 0;
  const fb::OwnershipT a = Parse("blocked(9x6, rep=27)");
  const fb::OwnershipT b = Parse("blocked(6x27, rep=9)");
  size_t overlaps = 0;
  const double intersect_us = MicrosPerCall([&] {
    overlaps = Intersect(a, b, shape).size();
    sink += overlaps;
  });
  std::printf(
      "Intersect blocked(9x6, rep=27) & blocked(6x27, rep=9): %.1f us "
      "(%zu tile-pair boxes)\n",
      intersect_us, overlaps);
  const fb::OwnershipT flat = Parse("flat(grain=4, tiles=1472)");
  const double held_us = MicrosPerCall([&] {
    for (int tile = 0; tile < target.tiles; ++tile) {
      sink += HeldBoxes(flat, shape, tile).size();
    }
  });
  std::printf("HeldBoxes flat(grain=4, tiles=1472), all 1472 tiles: %.1f us\n",
              held_us);
  return sink == 42 ? 3 : 0;  // keeps the timed calls from being optimized out
}

}  // namespace
}  // namespace tilec::passes

int main(int argc, char** argv) { return tilec::passes::Main(argc, argv); }
