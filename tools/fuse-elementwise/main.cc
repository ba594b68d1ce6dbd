// fuse-elementwise: fused elementwise regions of a planned module, by cost
// (passes/fuse/fuse.h, docs/fusion.md).

#include <gflags/gflags.h>

#include <sstream>
#include <string>

#include "passes/fuse/fuse.h"
#include "passes/lower/verify_planned.h"
#include "tools/common/pass_tool.h"

namespace {

// --placements' names of FuseOptions' placements, in the flag's order.
struct Placement {
  const char* name;
  bool tilec::fuse::FuseOptions::*allowed;
};
constexpr Placement kPlacements[] = {
    {"producer", &tilec::fuse::FuseOptions::producer_owners},
    {"consumer", &tilec::fuse::FuseOptions::consumer_owners},
    {"proposals", &tilec::fuse::FuseOptions::proposals},
};

// The placements `options` allows, comma separated.
std::string PlacementsText(const tilec::fuse::FuseOptions& options) {
  std::string text;
  for (const Placement& placement : kPlacements) {
    if (!(options.*placement.allowed)) continue;
    if (!text.empty()) text += ",";
    text += placement.name;
  }
  return text;
}

const std::string kDefaultPlacements =
    PlacementsText(tilec::fuse::FuseOptions{});

}  // namespace

DEFINE_string(placements, kDefaultPlacements.c_str(),
              "Which placements of a fused region may be chosen, comma "
              "separated: producer (the producer's owners, the copy after "
              "the region), consumer (the consumer's owners, the copy "
              "before it), proposals (every layout the planner's proposal "
              "generator offers for the region).");

int main(int argc, char** argv) {
  return tilec::tools::PassToolMain(
      argc, argv, tilec::passes::kFuseElementwiseInfo,
      [](tilec::passes::PassOptions common)
          -> tilec::StatusOr<std::unique_ptr<tilec::passes::Pass>> {
        tilec::fuse::FuseOptions options;
        for (const Placement& placement : kPlacements) {
          options.*placement.allowed = false;
        }
        std::stringstream list(FLAGS_placements);
        std::string item;
        while (std::getline(list, item, ',')) {
          const Placement* named = nullptr;
          for (const Placement& placement : kPlacements) {
            if (item == placement.name) named = &placement;
          }
          if (!named) {
            return tilec::Status::BadInput(
                "--placements: unknown placement '" + item +
                "' (producer, consumer, proposals)");
          }
          options.*named->allowed = true;
        }
        return std::unique_ptr<tilec::passes::Pass>(
            new tilec::fuse::FuseElementwisePass(options, std::move(common)));
      },
      tilec::lower::VerifyPlanned);
}
