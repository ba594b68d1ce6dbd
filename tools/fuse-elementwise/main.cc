// fuse-elementwise: fused elementwise regions of a planned module, by cost
// (passes/fuse/fuse.h, docs/fusion.md).

#include <gflags/gflags.h>

#include <sstream>

#include "passes/fuse/fuse.h"
#include "passes/lower/verify_planned.h"
#include "tools/common/pass_tool.h"

DEFINE_string(placements, "producer,consumer,proposals",
              "Which placements of a fused region may be chosen, comma "
              "separated: producer (the producer's owners, the copy after "
              "the region), consumer (the consumer's owners, the copy "
              "before it), proposals (every layout the planner's proposal "
              "generator offers for the region).");

int main(int argc, char** argv) {
  return tilec::tools::PassToolMain(
      argc, argv,
      "fuse-elementwise [flags] [INPUT|-] [-o OUT]: fuse chains of "
      "elementwise ops of a planned module into Fused ops where that lowers "
      "the plan's cycles and fits tile memory",
      [](tilec::passes::PassOptions common)
          -> tilec::StatusOr<std::unique_ptr<tilec::passes::Pass>> {
        tilec::fuse::FuseOptions options;
        options.producer_owners = options.consumer_owners =
            options.proposals = false;
        std::stringstream list(FLAGS_placements);
        std::string item;
        while (std::getline(list, item, ',')) {
          if (item == "producer") {
            options.producer_owners = true;
          } else if (item == "consumer") {
            options.consumer_owners = true;
          } else if (item == "proposals") {
            options.proposals = true;
          } else {
            return tilec::Status::BadInput(
                "--placements: unknown placement '" + item +
                "' (producer, consumer, proposals)");
          }
        }
        return std::unique_ptr<tilec::passes::Pass>(
            new tilec::fuse::FuseElementwisePass(options, std::move(common)));
      },
      tilec::lower::VerifyPlanned);
}
