#include "passes/inspect/exchanges.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>

#include "formats/print.h"
#include "kernels/cost.h"
#include "passes/core/decisions.h"
#include "sim/simulator.h"
#include "passes/inspect/tile_list.h"
#include "passes/lower/lowering.h"

namespace tilec::inspect {
namespace {

using passes::Thousands;

struct Xfer {
  int step = 0;
  uint32_t op = 0;
  int src = 0;
  std::vector<int> dsts;
  int64_t bytes = 0;  // of each piece
  int64_t rows = 1;   // pieces: each one fragment at the sender and at
                      // every destination
  fb::DType dtype = fb::DType::F32;
  int64_t Bytes() const { return rows * bytes; }
};

struct Step {
  int index = 0;
  std::string label;
  // Its exchange phase: the endpoint bound and the schedule's length, both
  // without sync (a program's recorded schedule; a planned graph's as
  // emit-device would make it for the lowering's transfers).
  int64_t bound = 0;
  int64_t scheduled = 0;
};

Status FromProgram(const fb::ModuleT& m, std::vector<Step>* steps,
                   std::vector<Xfer>* xfers) {
  const fb::DeviceProgramT& p = *m.program;
  std::map<uint32_t, uint32_t> tile_of;  // buffer -> tile (checked)
  for (const auto& b : p.buffers) tile_of[b->id] = b->tile;
  for (size_t s = 0; s < p.supersteps.size(); ++s) {
    const fb::SuperstepT& step = *p.supersteps[s];
    steps->push_back({static_cast<int>(s), step.label,
                      step.schedule ? int64_t{step.schedule->bound} : 0,
                      step.schedule ? int64_t{step.schedule->length} : 0});
    for (const auto& t : step.exchange) {
      Xfer x;
      x.step = static_cast<int>(s);
      x.op = t->op;
      x.src = static_cast<int>(t->src_tile);
      x.bytes = t->bytes;
      x.rows = t->rows;
      x.dtype = t->dtype;
      for (const auto& d : t->destinations) x.dsts.push_back(static_cast<int>(d->tile));
      xfers->push_back(std::move(x));
    }
  }
  return Status::Ok();
}

// --op and --superstep must name something that exists: an empty report
// for a typo would read as "no traffic".
Status CheckSelection(const InspectOptions& options, bool program,
                      const std::vector<Step>& steps,
                      const std::vector<Xfer>& xfers,
                      const std::map<uint32_t, std::string>& op_names) {
  if (options.superstep >= static_cast<int64_t>(steps.size()) ||
      options.superstep < -1) {
    return Status::BadInput(
        "--superstep=" + std::to_string(options.superstep) + ": the " +
        (program ? "program has " + std::to_string(steps.size()) +
                       " supersteps"
                 : "planned graph has " + std::to_string(steps.size()) +
                       " exchange phases") +
        " (0 to " + std::to_string(static_cast<int64_t>(steps.size()) - 1) +
        ")");
  }
  if (options.op < -1) {
    return Status::BadInput("--op=" + std::to_string(options.op) +
                            ": not an op id");
  }
  if (options.op >= 0 && !op_names.count(static_cast<uint32_t>(options.op))) {
    bool moves = false;
    for (const Xfer& x : xfers) moves = moves || x.op == options.op;
    if (!moves) {
      return Status::BadInput("--op=" + std::to_string(options.op) +
                              ": no op of the module has this id");
    }
  }
  return Status::Ok();
}

Status FromPlan(const fb::ModuleT& m, const kernels::CostModel& model,
                std::vector<Step>* steps, std::vector<Xfer>* xfers) {
  for (const auto& v : m.values) {
    if (!v->ownership) {
      return Status::BadInput("value %" + std::to_string(v->id) + " (" +
                              v->name +
                              ") has no ownership: neither a device program "
                              "nor a planned graph (run plan-ownership)");
    }
  }
  lower::Lowering lowering(m, model);
  for (const auto& op : m.ops) {
    StatusOr<lower::OpProgram> p = lowering.Lower(*op);
    if (!p.ok()) return p.status();
    int phase = 0;
    for (const lower::Phase& ph : p->phases) {
      if (ph.kind != lower::Phase::Kind::kExchange) continue;
      const int index = static_cast<int>(steps->size());
      std::vector<const lower::VTransfer*> moved;
      for (const lower::VTransfer& t : ph.transfers) moved.push_back(&t);
      const lower::ExchangeCost timed = lower::CostOfExchange(model, moved);
      steps->push_back({index,
                        std::to_string(op->id) + ":" + ph.label + " (phase " +
                            std::to_string(phase++) + " of op " +
                            std::to_string(op->id) + ")",
                        timed.bound, timed.scheduled});
      for (const lower::VTransfer& t : ph.transfers) {
        Xfer x;
        x.step = index;
        x.op = t.op;
        x.src = t.src_tile;
        x.bytes = t.src.bytes;
        x.rows = t.rows;
        x.dtype = t.dtype;
        for (const lower::VDestination& d : t.destinations) x.dsts.push_back(d.tile);
        xfers->push_back(std::move(x));
      }
    }
  }
  return Status::Ok();
}

struct Load {
  int64_t sent = 0, received = 0, fragments = 0, transfers = 0;
};

std::string Heat(double t) {
  // White -> yellow -> red.
  int r = 255, g, b;
  if (t < 0.5) {
    g = 255;
    b = static_cast<int>(std::lround(255 * (1 - 2 * t)));
  } else {
    g = static_cast<int>(std::lround(255 * (2 - 2 * t)));
    b = 0;
  }
  char buf[16];
  std::snprintf(buf, sizeof buf, "#%02x%02x%02x", r, g, b);
  return buf;
}

std::string Svg(const std::vector<Load>& load, HeatMetric metric,
                const std::string& title) {
  const int tiles = static_cast<int>(load.size());
  const int cols = std::max(1, static_cast<int>(std::lround(std::sqrt(tiles * 1.5))));
  const int rows = (tiles + cols - 1) / cols;
  const int cell = 14, margin = 10, top = 40, legend = 40;
  auto value = [&](const Load& l) {
    switch (metric) {
      case HeatMetric::kSent:
        return l.sent;
      case HeatMetric::kReceived:
        return l.received;
      case HeatMetric::kTotal:
        break;
    }
    return l.sent + l.received;
  };
  int64_t most = 0;
  for (const Load& l : load) most = std::max(most, value(l));
  const int width = 2 * margin + cols * cell;
  const int height = top + rows * cell + legend + margin;
  std::string out =
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + std::to_string(width) +
      "\" height=\"" + std::to_string(height) + "\" font-family=\"sans-serif\" "
      "font-size=\"11\">\n";
  out += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  out += "<text x=\"" + std::to_string(margin) + "\" y=\"16\">" + title +
         "</text>\n";
  const char* what = metric == HeatMetric::kSent       ? "bytes sent"
                     : metric == HeatMetric::kReceived ? "bytes received"
                                                       : "bytes sent + received";
  out += "<text x=\"" + std::to_string(margin) + "\" y=\"32\">" +
         std::string(what) + " per tile, " + std::to_string(cols) +
         " tiles per row; busiest " + Thousands(most) + " B</text>\n";
  for (int t = 0; t < tiles; ++t) {
    const int x = margin + (t % cols) * cell, y = top + (t / cols) * cell;
    const int64_t v = value(load[t]);
    const std::string fill =
        v == 0 ? "#eeeeee" : Heat(most > 0 ? double(v) / double(most) : 0);
    out += "<rect x=\"" + std::to_string(x) + "\" y=\"" + std::to_string(y) +
           "\" width=\"" + std::to_string(cell - 1) + "\" height=\"" +
           std::to_string(cell - 1) + "\" fill=\"" + fill + "\"><title>tile " +
           std::to_string(t) + ": sent " + Thousands(load[t].sent) +
           " B, received " + Thousands(load[t].received) + " B, " +
           std::to_string(load[t].fragments) + " fragments</title></rect>\n";
  }
  const int ly = top + rows * cell + 12;
  for (int i = 0; i <= 10; ++i) {
    out += "<rect x=\"" + std::to_string(margin + i * 20) + "\" y=\"" +
           std::to_string(ly) + "\" width=\"20\" height=\"10\" fill=\"" +
           (i == 0 ? std::string("#eeeeee") : Heat(i / 10.0)) + "\"/>\n";
  }
  out += "<text x=\"" + std::to_string(margin) + "\" y=\"" +
         std::to_string(ly + 24) + "\">0</text>\n";
  out += "<text x=\"" + std::to_string(margin + 190) + "\" y=\"" +
         std::to_string(ly + 24) + "\">" + Thousands(most) + " B</text>\n";
  return out + "</svg>\n";
}

// The transfers that --op and --superstep select; every tile in range.
StatusOr<std::vector<const Xfer*>> Select(const std::vector<Xfer>& all,
                                          const InspectOptions& options,
                                          int tiles) {
  std::vector<const Xfer*> selected;
  for (const Xfer& x : all) {
    if (options.op >= 0 && x.op != options.op) continue;
    if (options.superstep >= 0 && x.step != options.superstep) continue;
    if (x.src < 0 || x.src >= tiles) {
      return Status::BadInput("transfer from tile " + std::to_string(x.src) +
                              " outside the target's " + std::to_string(tiles));
    }
    for (int d : x.dsts) {
      if (d < 0 || d >= tiles) {
        return Status::BadInput("transfer to tile " + std::to_string(d) +
                                " outside the target's " +
                                std::to_string(tiles));
      }
    }
    selected.push_back(&x);
  }
  return selected;
}

std::string HeaderText(const fb::ModuleT& m, const InspectOptions& options,
                       bool program) {
  std::string out =
      "inspect-exchanges: " +
      std::string(program ? "device program"
                          : "planned graph (no device program: the exchange "
                            "phases of each op's lowering, as emit-device "
                            "would build them, before supersteps are shared)") +
      " on target " + m.target->name + " (" + std::to_string(m.target->tiles) +
      " tiles)\n";
  if (options.op >= 0 || options.superstep >= 0) {
    out += "selection:";
    if (options.op >= 0) out += " op " + std::to_string(options.op);
    if (options.superstep >= 0) {
      out += std::string(program ? " superstep " : " exchange phase ") +
             std::to_string(options.superstep);
    }
    out += "\n";
  }
  return out;
}

// Sums over the selected phases, and each tile's over all of them.
struct Totals {
  explicit Totals(int tiles) : per_tile(tiles) {}
  std::vector<Load> per_tile;
  int64_t phases = 0, transfers = 0, pieces = 0, fragments = 0, sent = 0,
          received = 0, cycles = 0, bound = 0, scheduled = 0;
};

// One op's transfers in one phase: the summary line and, with `list`, one
// line per transfer.
std::string OpText(uint32_t op, const std::string& name,
                   const std::vector<const Xfer*>& xs, bool list) {
  std::set<int> srcs, dsts;
  std::set<std::string> dtypes;
  int64_t b_sent = 0, b_received = 0, op_pieces = 0, frags = 0;
  for (const Xfer* x : xs) {
    srcs.insert(x->src);
    dsts.insert(x->dsts.begin(), x->dsts.end());
    dtypes.insert(ir::DTypeText(x->dtype));
    b_sent += x->Bytes();
    b_received += x->Bytes() * static_cast<int64_t>(x->dsts.size());
    op_pieces += x->rows;
    frags += x->rows * (1 + static_cast<int64_t>(x->dsts.size()));
  }
  std::string dtype_text;
  for (const std::string& d : dtypes) {
    dtype_text += (dtype_text.empty() ? "" : ",") + d;
  }
  std::string body = "  op " + std::to_string(op) + " " + name + ": " +
                     Thousands(static_cast<int64_t>(xs.size())) +
                     " transfers, " + Thousands(op_pieces) + " pieces, " +
                     Thousands(frags) + " fragments, " + Thousands(b_sent) +
                     " B sent, " + Thousands(b_received) + " B received, " +
                     dtype_text + ", " + std::to_string(srcs.size()) +
                     " source tiles -> " + std::to_string(dsts.size()) +
                     " destination tiles\n";
  if (!list) return body;
  for (const Xfer* x : xs) {
    // A strided transfer: its pieces, each a fragment at every end.
    const std::string size =
        x->rows == 1 ? Thousands(x->bytes) + " B "
                     : Thousands(x->rows) + " pieces x " + Thousands(x->bytes) +
                           " B = " + Thousands(x->Bytes()) + " B ";
    body += "    tile " + std::to_string(x->src) + " -> " +
            TileListText(x->dsts) + ": " + size + ir::DTypeText(x->dtype) +
            ", " +
            Thousands(x->rows * (1 + static_cast<int64_t>(x->dsts.size()))) +
            " fragments\n";
  }
  return body;
}

// One phase's transfers `here`: its line, its ops' lines; adds it to
// `totals`. A phase costs sync plus its busiest tile.
std::string PhaseText(const Step& step, const std::vector<const Xfer*>& here,
                      const kernels::CostModel& model, bool program, bool list,
                      const std::map<uint32_t, std::string>& op_names,
                      Totals* totals) {
  const int tiles = static_cast<int>(totals->per_tile.size());
  const kernels::ExchangeModel x_model =
      kernels::ExchangeModel::FromTarget(model.target());
  std::vector<Load> load(tiles);
  std::map<uint32_t, std::vector<const Xfer*>> by_op;
  for (const Xfer* x : here) {
    by_op[x->op].push_back(x);
    load[x->src].sent += x->Bytes();
    load[x->src].fragments += x->rows;
    ++load[x->src].transfers;
    for (int d : x->dsts) {
      load[d].received += x->Bytes();
      load[d].fragments += x->rows;
    }
  }
  int64_t step_sent = 0, step_received = 0, step_fragments = 0, busiest = 0;
  int busiest_tile = -1;
  for (int t = 0; t < tiles; ++t) {
    step_sent += load[t].sent;
    step_received += load[t].received;
    step_fragments += load[t].fragments;
    Load& total = totals->per_tile[t];
    total.sent += load[t].sent;
    total.received += load[t].received;
    total.fragments += load[t].fragments;
    total.transfers += load[t].transfers;
    if (load[t].fragments == 0) continue;
    const int64_t c = kernels::EndpointTileCycles(
        x_model, load[t].sent, load[t].received, load[t].fragments);
    if (c > busiest || busiest_tile < 0) {
      busiest = c;
      busiest_tile = t;
    }
  }
  const int64_t step_cycles = step.scheduled + x_model.sync_cycles;
  int64_t step_pieces = 0;
  for (const Xfer* x : here) step_pieces += x->rows;
  ++totals->phases;
  totals->transfers += static_cast<int64_t>(here.size());
  totals->pieces += step_pieces;
  totals->fragments += step_fragments;
  totals->sent += step_sent;
  totals->received += step_received;
  totals->cycles += step_cycles;
  totals->bound += step.bound;
  totals->scheduled += step.scheduled;
  std::string body =
      std::string(program ? "superstep " : "exchange phase ") +
      std::to_string(step.index) + " \"" + step.label +
      "\": " + Thousands(static_cast<int64_t>(here.size())) + " transfers, " +
      Thousands(step_pieces) + " pieces, " + Thousands(step_fragments) +
      " fragments, " + Thousands(step_sent) + " B sent, " +
      Thousands(step_received) + " B received, " + Thousands(step_cycles) +
      " cycles (scheduled " + Thousands(step.scheduled) + " + sync " +
      Thousands(x_model.sync_cycles) + "; endpoint bound " +
      Thousands(step.bound) + "; busiest tile " + std::to_string(busiest_tile) +
      ": sent " +
      Thousands(load[busiest_tile].sent) + " B, received " +
      Thousands(load[busiest_tile].received) + " B, " +
      std::to_string(load[busiest_tile].fragments) + " fragments)\n";
  for (const auto& [op, xs] : by_op) {
    auto name = op_names.find(op);
    body += OpText(op, name == op_names.end() ? "" : name->second, xs, list);
  }
  return body;
}

std::string TotalsText(const Totals& t) {
  return "totals: " + passes::Count(t.phases, "exchange phase") + ", " +
         passes::Count(t.transfers, "transfer") + ", " +
         passes::Count(t.pieces, "piece") + ", " +
         passes::Count(t.fragments, "fragment") + ", " + Thousands(t.sent) +
         " B sent, " + Thousands(t.received) + " B received, " +
         Thousands(t.cycles) + " cycles (each phase its schedule's length + "
         "sync; scheduled " + Thousands(t.scheduled) +
         ", endpoint bounds " + Thousands(t.bound) + ")\n";
}

// A repeat's supersteps run once per iteration (docs/repeat.md); this
// report reads the program as written.
std::string RepeatsText(const fb::DeviceProgramT& program) {
  std::string out;
  for (const auto& r : program.repeats) {
    out += "repeat: supersteps " + std::to_string(r->first) + ".." +
           std::to_string(r->first + r->count - 1) + " run " +
           std::to_string(r->iterations.size()) +
           " times; the figures here count each superstep once "
           "(simulate-device counts every run)\n";
  }
  return out;
}

// " tile 3 1,024 B; tile 7 512 B" for the `top` tiles sending (or
// receiving) the most, " none" when none does.
std::string BusiestText(const std::vector<Load>& total, bool by_sent, int top) {
  const int tiles = static_cast<int>(total.size());
  std::vector<int> order;
  for (int t = 0; t < tiles; ++t) {
    if ((by_sent ? total[t].sent : total[t].received) > 0) order.push_back(t);
  }
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return by_sent ? total[a].sent > total[b].sent
                   : total[a].received > total[b].received;
  });
  std::string line;
  for (int i = 0; i < std::min<int>(top, order.size()); ++i) {
    const int t = order[i];
    line += (line.empty() ? " " : "; ") + std::string("tile ") +
            std::to_string(t) + " " +
            Thousands(by_sent ? total[t].sent : total[t].received) + " B";
  }
  return line.empty() ? std::string(" none") : line;
}

std::string SvgTitle(const fb::ModuleT& m, const InspectOptions& options,
                     bool program) {
  std::string title =
      std::string(program ? "device program" : "planned graph") + " on " +
      m.target->name;
  if (options.superstep >= 0) {
    title += std::string(program ? ", superstep " : ", exchange phase ") +
             std::to_string(options.superstep);
  } else {
    title += ", whole program";
  }
  if (options.op >= 0) title += ", op " + std::to_string(options.op);
  return title;
}

}  // namespace

Status InspectExchanges(const fb::ModuleT& m, const InspectOptions& options,
                        std::string* report, std::string* svg) {
  if (!m.target) return Status::BadInput("module has no target description");
  StatusOr<kernels::CostModel> model = kernels::CostModel::Create(*m.target);
  if (!model.ok()) {
    return Status::BadInput("target '" + m.target->name +
                            "': " + model.status().message());
  }
  const int tiles = m.target->tiles;
  std::vector<Step> steps;
  std::vector<Xfer> all;
  const bool program = m.program != nullptr;
  // The simulator's checks, so that no total is made of a program it
  // would refuse (tiles out of range, transfers outside their buffers).
  if (program) TILEC_RETURN_IF_ERROR(sim::VerifyDeviceProgram(m));
  TILEC_RETURN_IF_ERROR(program ? FromProgram(m, &steps, &all)
                                : FromPlan(m, *model, &steps, &all));
  std::map<uint32_t, std::string> op_names;
  for (const auto& op : m.ops) op_names[op->id] = op->name;
  TILEC_RETURN_IF_ERROR(CheckSelection(options, program, steps, all, op_names));
  StatusOr<std::vector<const Xfer*>> selected = Select(all, options, tiles);
  if (!selected.ok()) return selected.status();
  const bool list =
      options.listing == TransferListing::kAll ||
      (options.listing == TransferListing::kAuto &&
       static_cast<int64_t>(selected->size()) <= options.auto_limit);

  Totals totals(tiles);
  std::string body;
  for (const Step& step : steps) {
    std::vector<const Xfer*> here;
    for (const Xfer* x : *selected) {
      if (x->step == step.index) here.push_back(x);
    }
    if (here.empty()) continue;
    body += PhaseText(step, here, *model, program, list, op_names, &totals);
  }
  std::string out = HeaderText(m, options, program) + TotalsText(totals);
  if (program) out += RepeatsText(*m.program);
  if (!list && !selected->empty()) {
    out += "(" + Thousands(static_cast<int64_t>(selected->size())) +
           " transfers: per-transfer lines omitted above " +
           Thousands(options.auto_limit) + "; --transfers=all lists them)\n";
  }
  out += "\n" + body;
  out += "\nbusiest senders:" +
         BusiestText(totals.per_tile, /*by_sent=*/true, options.top) + "\n";
  out += "busiest receivers:" +
         BusiestText(totals.per_tile, /*by_sent=*/false, options.top) + "\n";
  *report = out;
  if (svg != nullptr) {
    *svg = Svg(totals.per_tile, options.metric, SvgTitle(m, options, program));
  }
  return Status::Ok();
}

}  // namespace tilec::inspect
