// inspect-exchanges: every exchange of a device program (or of a planned
// graph before emit-device), totals, busiest tiles and an SVG heat map
// (passes/inspect/exchanges.h).

#include <gflags/gflags.h>

#include "formats/ir.h"
#include "passes/inspect/exchanges.h"
#include "tools/common/tool.h"

DEFINE_int64(op, -1, "Only the transfers of this op id.");
DEFINE_int64(superstep, -1,
             "Only this superstep (planned graph: this exchange phase).");
DEFINE_string(transfers, "auto",
              "Per-transfer lines: all, none, or auto (all when there are at "
              "most 2,000).");
DEFINE_int32(top, 8, "Busiest senders and receivers listed.");
DEFINE_string(svg, "",
              "Write a tile-by-tile traffic heat map (SVG) of the selection to "
              "this file.");
DEFINE_string(metric, "total",
              "Heat map metric: total (sent + received), sent or received.");

namespace tilec::tools {
namespace {

Status Run(const std::vector<std::string>& args) {
  std::string input;
  TILEC_RETURN_IF_ERROR(SingleInput(args, &input));
  TILEC_RETURN_IF_ERROR(CheckOutputs({{"the input", input}},
                                     {{"-o", FLAGS_o}, {"--svg", FLAGS_svg}}));
  inspect::InspectOptions options;
  options.op = FLAGS_op;
  options.superstep = FLAGS_superstep;
  options.top = FLAGS_top;
  if (FLAGS_transfers == "all") {
    options.listing = inspect::TransferListing::kAll;
  } else if (FLAGS_transfers == "none") {
    options.listing = inspect::TransferListing::kNone;
  } else if (FLAGS_transfers != "auto") {
    return Status::BadInput("--transfers=" + FLAGS_transfers +
                            ": expected all, none or auto");
  }
  if (FLAGS_metric == "sent") {
    options.metric = inspect::HeatMetric::kSent;
  } else if (FLAGS_metric == "received") {
    options.metric = inspect::HeatMetric::kReceived;
  } else if (FLAGS_metric != "total") {
    return Status::BadInput("--metric=" + FLAGS_metric +
                            ": expected total, sent or received");
  }
  fb::ModuleT module;
  TILEC_RETURN_IF_ERROR(ir::ReadModule(input, &module));
  std::string report, svg;
  TILEC_RETURN_IF_ERROR(
      inspect::InspectExchanges(module, options, &report,
                                FLAGS_svg.empty() ? nullptr : &svg)
          .WithContext(ir::DisplayName(input)));
  if (!FLAGS_svg.empty()) {
    TILEC_RETURN_IF_ERROR(ir::WriteFileAtomically(FLAGS_svg, svg));
  }
  return ir::WriteFileAtomically(FLAGS_o, report);
}

}  // namespace
}  // namespace tilec::tools

int main(int argc, char** argv) {
  auto args = tilec::tools::InitTool(
      argc, argv,
      "inspect-exchanges [flags] [INPUT|-] [-o OUT]: list the exchanges of a "
      "device program or a planned graph, with totals, busiest tiles and an "
      "optional SVG heat map");
  return tilec::tools::RunAndFinish(
      [&] { return tilec::tools::Run(args); });
}
