#include "passes/inspect/program_report.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "formats/print.h"
#include "formats/target.h"
#include "kernels/cost.h"
#include "kernels/fb_dtype.h"
#include "kernels/kernel_names.h"
#include "kernels/registry.h"
#include "sim/simulator.h"
#include "passes/inspect/amp.h"
#include "passes/inspect/device_module.h"
#include "passes/inspect/exchange_totals.h"
#include "passes/inspect/memory_use.h"
#include "passes/inspect/page_assets.h"
#include "passes/inspect/tile_list.h"

namespace tilec::inspect {
namespace {

// ---------------------------------------------------------------- JSON text

// '<' is escaped too, so the data can sit inside a <script> element.
std::string Quote(const std::string& s) {
  static const char kHex[] = "0123456789abcdef";
  std::string out = "\"";
  for (char c : s) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (u < 0x20 || c == '<') {
      out += "\\u00";
      out += kHex[u >> 4];
      out += kHex[u & 15];
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string Int(int64_t v) { return std::to_string(v); }

// Shortest text that reads back exactly; null where JSON has no number.
std::string Number(double v) {
  return std::isfinite(v) ? ir::NumberText(v) : "null";
}

std::string Bool(bool v) { return v ? "true" : "false"; }

template <typename T, typename F>
std::string List(const std::vector<T>& items, F text) {
  std::string out = "[";
  for (size_t i = 0; i < items.size(); ++i) {
    out += (i ? "," : "") + text(items[i]);
  }
  return out + "]";
}

std::string Ints(const std::vector<int64_t>& v) { return List(v, Int); }

// Rows of a table, one per line so that goldens diff row by row.
std::string Rows(const std::vector<std::string>& rows) {
  std::string out = "[";
  for (size_t i = 0; i < rows.size(); ++i) {
    out += std::string(i ? ",\n" : "\n") + rows[i];
  }
  return out + (rows.empty() ? "]" : "\n]");
}

std::string Columns(std::initializer_list<const char*> names) {
  std::string out = "[";
  for (const char* n : names) out += (out.size() > 1 ? "," : "") + Quote(n);
  return out + "]";
}

// Per-tile arrays, run-length encoded ([value, count, value, count, ...])
// and stored once: supersteps and ops that load the tiles alike share one.
class TileMaps {
 public:
  int Add(const std::vector<int64_t>& per_tile) {
    std::vector<int64_t> runs;
    for (size_t t = 0; t < per_tile.size();) {
      size_t u = t;
      while (u < per_tile.size() && per_tile[u] == per_tile[t]) ++u;
      runs.push_back(per_tile[t]);
      runs.push_back(static_cast<int64_t>(u - t));
      t = u;
    }
    const std::string text = Ints(runs);
    auto [it, added] = index_.emplace(text, static_cast<int>(maps_.size()));
    if (added) maps_.push_back(text);
    return it->second;
  }
  std::string Json() const { return Rows(maps_); }

 private:
  std::map<std::string, int> index_;
  std::vector<std::string> maps_;
};

// ---------------------------------------------------------------- figures

// What the page needs beyond the simulator's timing and the two tables of
// memory and exchange: per op, what the program's computes say.
struct OpWork {
  int64_t calls = 0;
  std::set<int> tiles;
  int64_t gemm_cycles = 0;  // every GEMM call's cycles, all tiles
  int amp_macs_per_cycle = 0;
  int first_step = -1;
  int last_step = -1;
};

struct StepOp {
  int64_t calls = 0;
};


struct Figures {
  sim::SimResult timing;
  MemoryUse memory;
  ExchangeTotals exchange;
  std::map<uint32_t, OpWork> work;
  std::vector<std::map<uint32_t, StepOp>> step_ops;  // per superstep
  std::vector<int64_t> code_reserved;  // per tile: whole elements of code
};

void Touch(OpWork* w, int step) {
  if (w->first_step < 0) w->first_step = step;
  w->last_step = step;
}

// GEMM calls are priced with the registry's formula on their operands'
// dtypes (the simulator's own count; it reports MACs, not per-call cycles).
Status CountWork(const fb::ModuleT& module, Figures* f) {
  StatusOr<kernels::CostModel> model =
      kernels::CostModel::Create(*module.target);
  if (!model.ok()) return Status::BadInput(model.status().message());
  std::map<uint32_t, const fb::BufferT*> buffers;
  for (const auto& b : module.program->buffers) buffers[b->id] = b.get();
  const auto& steps = module.program->supersteps;
  f->step_ops.resize(steps.size());
  for (size_t s = 0; s < steps.size(); ++s) {
    const int step = static_cast<int>(s);
    for (const auto& c : steps[s]->compute) {
      OpWork& w = f->work[c->op];
      ++w.calls;
      w.tiles.insert(static_cast<int>(c->tile));
      Touch(&w, step);
      ++f->step_ops[s][c->op].calls;
      if (c->kernel != kernels::names::kGemm) continue;
      std::vector<kernels::Operand> operands;
      for (const auto& a : c->args) {
        auto it = buffers.find(a->buffer);
        if (it == buffers.end()) {
          return Status::Internal("buffer #" + std::to_string(a->buffer) +
                                  " passed the simulator's checks undeclared");
        }
        StatusOr<kernels::DType> dtype =
            kernels::DTypeFromFb(it->second->dtype);
        if (!dtype.ok()) return dtype.status();
        operands.push_back(
            {nullptr, a->bytes, *dtype, it->second->fp8_scale_exp});
      }
      StatusOr<int64_t> cycles =
          kernels::Cycles(*model, c->kernel, operands, c->params, c->fparams);
      if (!cycles.ok()) return cycles.status();
      w.gemm_cycles += *cycles;
      if (w.amp_macs_per_cycle == 0 && !c->args.empty()) {
        w.amp_macs_per_cycle =
            AmpMacsPerCycle(*module.target, buffers[c->args[0]->buffer]->dtype);
      }
    }
    for (const auto& t : steps[s]->exchange) Touch(&f->work[t->op], step);
  }
  return Status::Ok();
}

// The module's own figures; errors are the module's.
Status ProgramFigures(const fb::ModuleT& module, const ReportOptions& options,
                      Figures* f) {
  TILEC_RETURN_IF_ERROR(RequireDeviceProgram(module));
  sim::SimOptions timing;
  timing.execute = false;
  timing.threads = options.threads;
  TILEC_RETURN_IF_ERROR(sim::Simulate(module, {}, timing, &f->timing));
  StatusOr<MemoryUse> memory = MemoryOverTime(module);
  if (!memory.ok()) return memory.status();
  f->memory = std::move(*memory);
  StatusOr<ExchangeTotals> exchange =
      ExchangesByStep(module, options.largest_transfers);
  if (!exchange.ok()) return exchange.status();
  f->exchange = std::move(*exchange);
  for (const fb::TileCode& c : module.program->code) {
    f->code_reserved.push_back(c.reserved_bytes());
  }
  return CountWork(module, f);
}

std::string Mismatch(const std::string& what, int64_t report, int64_t program) {
  return what + " is " + std::to_string(report) + " in the report but " +
         std::to_string(program) +
         " for this program: a report of another program (or of an older "
         "build of it)";
}

// kBadInput unless the report's tile count, number of supersteps, total,
// compute and exchange cycles and every op's compute and exchange cycles
// equal `timing`'s (the same program's cycles counted without data).
Status CheckReportMatches(const sim::SimResult& r,
                          const sim::SimResult& timing) {
  const std::pair<const char*, std::pair<int64_t, int64_t>> totals[] = {
      {"the tile count", {r.tiles, timing.tiles}},
      {"the number of supersteps",
       {static_cast<int64_t>(r.supersteps.size()),
        static_cast<int64_t>(timing.supersteps.size())}},
      {"total_cycles", {r.total_cycles, timing.total_cycles}},
      {"compute_cycles", {r.compute_cycles, timing.compute_cycles}},
      {"exchange_cycles", {r.exchange_cycles, timing.exchange_cycles}},
      {"the number of ops",
       {static_cast<int64_t>(r.ops.size()),
        static_cast<int64_t>(timing.ops.size())}},
  };
  for (const auto& [what, values] : totals) {
    if (values.first != values.second) {
      return Status::BadInput(Mismatch(what, values.first, values.second));
    }
  }
  std::map<uint32_t, const sim::OpReport*> ops;
  for (const sim::OpReport& o : timing.ops) ops[o.op] = &o;
  for (const sim::OpReport& o : r.ops) {
    auto it = ops.find(o.op);
    if (it == ops.end()) {
      return Status::BadInput("op " + std::to_string(o.op) +
                              " is in the report but not in this program: a "
                              "report of another program");
    }
    const std::string op = "op " + std::to_string(o.op) + "'s ";
    if (o.compute_cycles != it->second->compute_cycles) {
      return Status::BadInput(Mismatch(op + "compute_cycles", o.compute_cycles,
                                       it->second->compute_cycles));
    }
    if (o.exchange_cycles != it->second->exchange_cycles) {
      return Status::BadInput(Mismatch(op + "exchange_cycles",
                                       o.exchange_cycles,
                                       it->second->exchange_cycles));
    }
  }
  return Status::Ok();
}

// Errors name the file they are about: the module, or the simulation
// report that does not describe it.
Status ComputeFigures(const fb::ModuleT& module, const ReportOptions& options,
                      Figures* f) {
  TILEC_RETURN_IF_ERROR(
      ProgramFigures(module, options, f).WithContext(options.module_name));
  if (options.simulation == nullptr) return Status::Ok();
  return CheckReportMatches(options.simulation->result, f->timing)
      .WithContext(options.simulation_name);
}

// ---------------------------------------------------------------- sections

std::string ModuleJson(const fb::ModuleT& m, const ReportOptions& options) {
  return "{\"name\":" + Quote(options.module_name) +
         ",\"producer\":" + Quote(m.producer) +
         ",\"model\":" + (m.model ? Quote(ir::ModelText(*m.model)) : "null") +
         "}";
}

std::string TargetJson(const fb::TargetT& t) {
  return "{\"name\":" + Quote(t.name) + ",\"tiles\":" + Int(t.tiles) +
         ",\"clock_hz\":" + Number(t.clock_hz) +
         ",\"sram_bytes\":" + Int(t.sram_bytes) +
         ",\"runtime_code_bytes\":" + Int(t.runtime_code_bytes) +
         ",\"tensor_bytes\":" + Int(ir::MaxTileTensorBytes(t)) +
         ",\"element_bytes\":" + Int(t.element_bytes) +
         ",\"standard_elements\":" + Int(t.standard_elements) +
         ",\"interleaved_element_bytes\":" + Int(t.interleaved_element_bytes) +
         ",\"amp_macs_fp8\":" + Int(t.amp_macs_fp8) +
         ",\"amp_macs_f16\":" + Int(t.amp_macs_f16) +
         ",\"amp_macs_f32\":" + Int(t.amp_macs_f32) +
         ",\"sync_cycles\":" + Int(t.sync_cycles) + "}";
}

std::string HostJson(const ReportOptions& o) {
  auto seconds = [](double s) { return s < 0 ? "null" : Number(s); };
  return "{\"compile_seconds\":" + seconds(o.compile_seconds) +
         ",\"simulate_seconds\":" + seconds(o.simulate_seconds) + "}";
}

std::string SummaryJson(const fb::ModuleT& m, const Figures& f) {
  const sim::SimResult& r = f.timing;
  int64_t estimate = 0;
  for (const auto& op : m.ops) {
    if (op->estimate) estimate += op->estimate->cycles;
  }
  const auto& peak = f.memory.peak_live;
  const int peak_tile = static_cast<int>(
      std::max_element(peak.begin(), peak.end()) - peak.begin());
  std::string busy;
  for (const sim::TileReport& t : r.slowest_tiles) {
    busy += std::string(busy.empty() ? "" : ",") + "[" + Int(t.tile) + "," +
            Int(t.busy_cycles) + "," + Int(t.compute_cycles) + "," +
            Int(t.exchange_cycles) + "," + Int(t.kernel_calls) + "]";
  }
  return "{\"cycles\":" + Int(r.total_cycles) +
         ",\"compute_cycles\":" + Int(r.compute_cycles) +
         ",\"exchange_cycles\":" + Int(r.exchange_cycles) +
         ",\"exchange_bound_cycles\":" + Int(r.exchange_bound_cycles) +
         ",\"exchange_scheduled_cycles\":" +
         Int(r.exchange_scheduled_cycles) +
         ",\"sync_cycles\":" + Int(r.sync_cycles) +
         ",\"update_cycles\":" + Int(r.update_cycles) +
         ",\"exchange_phases\":" + Int(r.exchange_phases) +
         ",\"supersteps\":" + Int(static_cast<int64_t>(r.supersteps.size())) +
         ",\"estimate_cycles\":" + Int(estimate) +
         ",\"kernel_calls\":" + Int(r.kernel_calls) +
         ",\"transfers\":" + Int(r.transfers) + ",\"pieces\":" + Int(r.pieces) +
         ",\"bytes_sent\":" + Int(r.bytes_sent) +
         ",\"bytes_received\":" + Int(r.bytes_received) +
         ",\"gemm_macs\":" + Int(r.gemm_macs) +
         ",\"slow_path_calls\":" + Int(r.slow_path_calls) +
         ",\"buffers\":" + Int(static_cast<int64_t>(f.memory.buffers.size())) +
         ",\"never_live_buffers\":" + Int(f.memory.never_live) +
         ",\"peak_live_bytes\":" + Int(peak.empty() ? 0 : peak[peak_tile]) +
         ",\"peak_live_tile\":" + Int(peak.empty() ? -1 : peak_tile) +
         ",\"highest_end_bytes\":" + Int(r.peak_memory_bytes) +
         ",\"highest_end_tile\":" + Int(r.peak_memory_tile) +
         ",\"code_bytes_max\":" + Int(r.code_bytes_max) +
         ",\"exchange_code_bytes_max\":" + Int(r.exchange_code_bytes_max) +
         ",\"tensor_bytes\":" + Int(r.tensor_bytes) +
         ",\"busy_columns\":" +
         Columns({"tile", "busy", "compute", "exchange", "calls"}) +
         ",\"busiest_tiles\":[" + busy + "]}";
}

std::string OutputsJson(const std::vector<sim::OutputCheck>& checks) {
  return List(checks, [](const sim::OutputCheck& x) {
    const sim::Comparison& c = x.comparison;
    return "{\"value\":" + Int(x.value) + ",\"name\":" + Quote(x.name) +
           ",\"type\":" + Quote(x.type) + ",\"pass\":" + Bool(c.pass) +
           ",\"elements\":" + Int(c.elements) +
           ",\"mismatches\":" + Int(c.mismatches) +
           ",\"nonfinite\":" + Int(c.nonfinite) +
           ",\"scale\":" + Number(c.scale) +
           ",\"max_abs_err\":" + Number(c.max_abs_err) +
           ",\"max_rel_err\":" + Number(c.max_rel_err) +
           ",\"cosine\":" + Number(c.cosine) + "}";
  });
}

// simulate-device --expect's comparison, null without it.
std::string ExpectedJson(const sim::SimulateDeviceReport& s) {
  if (s.expect_dir.empty()) return "null";
  const sim::Tolerance& t = s.tolerance;
  return "{\"dir\":" + Quote(s.expect_dir) +
         ",\"pass\":" + Bool(sim::ExpectedPass(s)) +
         ",\"atol\":" + Number(t.atol) + ",\"rtol\":" + Number(t.rtol) +
         ",\"min_cosine\":" + Number(t.min_cosine) +
         ",\"outputs\":" + OutputsJson(s.expected) + "}";
}

std::string SimulationJson(const ReportOptions& o) {
  if (o.simulation == nullptr) return "null";
  const sim::SimulateDeviceReport& s = o.simulation->device;
  std::string out = "{\"file\":" + Quote(o.simulation_name) +
                    ",\"module\":" + Quote(s.module_name) +
                    ",\"compared\":" + Bool(s.compared);
  if (s.compared) {
    out += ",\"pass\":" + Bool(s.pass) +
           ",\"atol\":" + Number(s.tolerance.atol) +
           ",\"rtol\":" + Number(s.tolerance.rtol) +
           ",\"min_cosine\":" + Number(s.tolerance.min_cosine) +
           ",\"fp8_defaults\":" + Bool(s.fp8) +
           ",\"outputs\":" + OutputsJson(s.checks);
  }
  return out + ",\"expected\":" + ExpectedJson(s) + "}";
}

std::string OwnersOf(const fb::ModuleT& m, const fb::OperationT& op) {
  if (op.results.empty()) return "";
  for (const auto& v : m.values) {
    if (v->id == op.results[0] && v->ownership) {
      return ir::OwnershipText(*v->ownership);
    }
  }
  return "";
}

std::string OpsJson(const fb::ModuleT& m, const Figures& f) {
  std::map<uint32_t, const sim::OpReport*> simulated;
  for (const sim::OpReport& o : f.timing.ops) simulated[o.op] = &o;
  // Graph ops in execution order, then any op only the program names.
  std::vector<uint32_t> order;
  std::map<uint32_t, const fb::OperationT*> graph;
  for (const auto& op : m.ops) {
    order.push_back(op->id);
    graph[op->id] = op.get();
  }
  for (const sim::OpReport& o : f.timing.ops) {
    if (!graph.count(o.op)) order.push_back(o.op);
  }
  std::vector<std::string> rows;
  for (uint32_t id : order) {
    const fb::OperationT* op = graph.count(id) ? graph[id] : nullptr;
    const sim::OpReport empty;
    const sim::OpReport& s = simulated.count(id) ? *simulated[id] : empty;
    const OpWork none;
    const OpWork& w = f.work.count(id) ? f.work.at(id) : none;
    const fb::EstimateT no_estimate;
    const fb::EstimateT& e =
        op != nullptr && op->estimate ? *op->estimate : no_estimate;
    rows.push_back("[" + Int(id) + "," + Quote(op ? op->name : s.name) + "," +
                   Quote(op ? ir::OpKindText(op->kind) : s.kind) + "," +
                   Quote(op ? OwnersOf(m, *op) : "") + "," +
                   Quote(op && op->recipe ? ir::RecipeText(*op->recipe) : "") +
                   "," + Int(e.cycles) + "," + Int(e.compute_cycles) + "," +
                   Int(e.exchange_cycles) + "," + Int(e.exchange_bytes) + "," +
                   Int(e.peak_bytes) + "," + Int(s.compute_cycles) + "," +
                   Int(s.exchange_cycles) + "," + Int(s.kernel_calls) + "," +
                   Int(static_cast<int64_t>(w.tiles.size())) + "," +
                   Int(s.transfers) + "," + Int(s.pieces) + "," +
                   Int(s.bytes_received) + "," + Int(s.macs) + "," +
                   Int(w.gemm_cycles) + "," + Int(w.amp_macs_per_cycle) + "," +
                   Int(s.slow_path_calls) + "," + Int(w.first_step) + "," +
                   Int(w.last_step) + "]");
  }
  return "{\"columns\":" +
         Columns({"id",
                  "name",
                  "kind",
                  "owners",
                  "recipe",
                  "est_cycles",
                  "est_compute",
                  "est_exchange",
                  "est_exchange_bytes",
                  "est_peak_bytes",
                  "compute",
                  "exchange",
                  "calls",
                  "compute_tiles",
                  "transfers",
                  "pieces",
                  "bytes_received",
                  "macs",
                  "gemm_cycles",
                  "amp_macs_per_cycle",
                  "slow_calls",
                  "first_step",
                  "last_step"}) +
         ",\"rows\":" + Rows(rows) + "}";
}

std::string StepsJson(const Figures& f, TileMaps* maps) {
  std::vector<std::string> rows;
  for (size_t s = 0; s < f.timing.supersteps.size(); ++s) {
    // Run steps: a repeat's supersteps appear once per iteration.
    const sim::SuperstepReport& r = f.timing.supersteps[s];
    const StepExchange& x = f.exchange.steps[r.index];
    std::string spans;
    for (const sim::SuperstepReport::Span& sp : r.compute_spans) {
      spans += std::string(spans.empty() ? "" : ",") + "[" + Int(sp.op) + "," +
               Quote(sp.kernel) + "," + Int(sp.cycles) + "," + Int(sp.calls) +
               "]";
    }
    std::string split;
    for (const auto& [op, cycles] : r.exchange_split) {
      split += std::string(split.empty() ? "" : ",") + "[" + Int(op) + "," +
               Int(cycles) + "]";
    }
    // Every op with work in the superstep, hidden behind the slowest tile
    // or not: [op, kernel calls, transfers, bytes received].
    std::map<uint32_t, std::vector<int64_t>> present;
    for (const auto& [op, so] : f.step_ops[r.index]) {
      present[op] = {so.calls, 0, 0};
    }
    for (const OpExchange& o : x.ops) {
      std::vector<int64_t>& p = present[o.op];
      p.resize(3, 0);
      p[1] = o.transfers;
      p[2] = o.bytes_received;
    }
    std::string ops;
    for (const auto& [op, p] : present) {
      ops += std::string(ops.empty() ? "" : ",") + "[" + Int(op) + "," +
             Int(p[0]) + "," + Int(p[1]) + "," + Int(p[2]) + "]";
    }
    const bool moved = x.transfers > 0;
    const std::string label =
        r.iteration < 0 ? r.label
                        : "[iteration " + std::to_string(r.iteration) + "] " +
                              r.label;
    rows.push_back("[" + Quote(label) + "," + Int(r.start_cycle) + "," +
                   Int(r.compute_cycles) + "," + Int(r.exchange_cycles) + "," +
                   Int(r.slowest_tile) + "," + Int(r.exchange_slowest_tile) +
                   "," + Int(r.kernel_calls) + "," + Int(r.transfers) + "," +
                   Int(r.pieces) + "," + Int(r.bytes_received) + "," +
                   Int(x.fragments) + ",[" + spans + "],[" + split + "],[" +
                   ops + "]," + Int(moved ? maps->Add(x.tiles.received) : -1) +
                   "," + Int(moved ? maps->Add(x.tiles.fragments) : -1) + "," +
                   Int(r.exchange_bound_cycles) + "," +
                   Int(r.exchange_scheduled_cycles) + "," +
                   Int(r.sync_cycles) + "," + Int(r.update_cycles) + "]");
  }
  return "{\"columns\":" +
         Columns({"label", "start", "compute", "exchange", "slowest_tile",
                  "exchange_slowest_tile", "calls", "transfers", "pieces",
                  "bytes_received", "fragments", "compute_spans",
                  "exchange_split", "ops", "received_map", "fragments_map",
                  "exchange_bound", "exchange_scheduled", "sync", "update"}) +
         ",\"span_columns\":" + Columns({"op", "kernel", "cycles", "calls"}) +
         ",\"split_columns\":" + Columns({"op", "cycles"}) +
         ",\"op_columns\":" +
         Columns({"op", "calls", "transfers", "bytes_received"}) +
         ",\"rows\":" + Rows(rows) + "}";
}

// The tiles whose buffers are laid out: the `busiest` with the most live
// bytes (ties: lower tile) and every requested one.
StatusOr<std::vector<int>> DetailTiles(const MemoryUse& memory,
                                       const ReportOptions& options) {
  const int tiles = static_cast<int>(memory.peak_live.size());
  std::vector<int> order(tiles);
  for (int t = 0; t < tiles; ++t) order[t] = t;
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return memory.peak_live[a] > memory.peak_live[b];
  });
  std::set<int> chosen(
      order.begin(),
      order.begin() + std::clamp(options.busiest_tiles, 0, tiles));
  for (int t : options.tiles) {
    if (t < 0 || t >= tiles) {
      return Status::BadInput("--tiles: tile " + std::to_string(t) +
                              " is outside the target's " +
                              std::to_string(tiles) + " tiles");
    }
    chosen.insert(t);
  }
  return std::vector<int>(chosen.begin(), chosen.end());
}

std::string BufferRow(const BufferLife& b) {
  const int flags =
      (b.host_written ? 1 : 0) | (b.weight ? 2 : 0) | (b.host_read ? 4 : 0);
  return "[" + Int(b.id) + "," + Int(b.offset) + "," + Int(b.bytes) + "," +
         Int(b.first) + "," + Int(b.last) + "," + Int(b.op) + "," +
         Int(b.value) + "," + Int(flags) + "," + Quote(b.name) + "]";
}

StatusOr<std::string> MemoryJson(const Figures& f, const ReportOptions& options,
                                 TileMaps* maps) {
  const MemoryUse& m = f.memory;
  StatusOr<std::vector<int>> detail = DetailTiles(m, options);
  if (!detail.ok()) return detail.status();
  std::vector<std::vector<const BufferLife*>> by_tile(m.peak_live.size());
  for (const BufferLife& b : m.buffers) by_tile[b.tile].push_back(&b);
  std::vector<std::string> tiles;
  for (int t : *detail) {
    std::vector<std::string> buffers;
    for (const BufferLife* b : by_tile[t]) {
      if (b->live()) buffers.push_back(BufferRow(*b));
    }
    tiles.push_back("{\"tile\":" + Int(t) + ",\"live\":" + Ints(m.live[t]) +
                    ",\"buffers\":" + Rows(buffers) + "}");
  }
  std::vector<int64_t> peak_step(m.peak_step.begin(), m.peak_step.end());
  return "{\"code_map\":" + Int(maps->Add(f.code_reserved)) +
         ",\"exchange_code_map\":" +
         Int(maps->Add(f.timing.exchange_code_bytes)) +
         ",\"peak_live_map\":" + Int(maps->Add(m.peak_live)) +
         ",\"peak_step_map\":" + Int(maps->Add(peak_step)) +
         ",\"highest_end_map\":" + Int(maps->Add(m.highest_end)) +
         ",\"buffer_columns\":" +
         Columns({"id", "offset", "bytes", "first", "last", "op", "value",
                  "flags", "name"}) +
         ",\"flags\":{\"host_written\":1,\"weight\":2,\"host_read\":4}" +
         ",\"tiles\":" + Rows(tiles) + "}";
}

std::string TransferRow(const TransferInfo& t) {
  return "[" + Int(t.step) + "," + Int(t.op) + "," + Int(t.index) + "," +
         Int(t.src_tile) + "," + Int(t.src_buffer) + "," + Int(t.bytes) + "," +
         Int(t.rows) + "," + Int(static_cast<int64_t>(t.destinations.size())) +
         "," + Quote(ir::DTypeText(t.dtype)) + "," +
         Quote(TileListText(t.destinations)) + "]";
}

std::string ExchangeJson(const Figures& f, TileMaps* maps) {
  const ExchangeTotals& x = f.exchange;
  std::vector<std::string> by_op, per_step_op, largest;
  for (const auto& [op, received] : x.received_by_op) {
    by_op.push_back("[" + Int(op) + "," + Int(maps->Add(received)) + "]");
  }
  for (size_t s = 0; s < x.steps.size(); ++s) {
    for (const OpExchange& o : x.steps[s].ops) {
      std::string dtypes;
      for (fb::DType d : o.dtypes) {
        dtypes += (dtypes.empty() ? "" : ",") + ir::DTypeText(d);
      }
      per_step_op.push_back(
          "[" + Int(static_cast<int64_t>(s)) + "," + Int(o.op) + "," +
          Int(o.transfers) + "," + Int(o.pieces) + "," + Int(o.fragments) +
          "," + Int(o.bytes_sent) + "," + Int(o.bytes_received) + "," +
          Int(o.source_tiles) + "," + Int(o.destination_tiles) + "," +
          Quote(dtypes) + "]");
      for (const TransferInfo& t : o.largest) largest.push_back(TransferRow(t));
    }
  }
  return "{\"received_map\":" + Int(maps->Add(x.program.received)) +
         ",\"sent_map\":" + Int(maps->Add(x.program.sent)) +
         ",\"fragments_map\":" + Int(maps->Add(x.program.fragments)) +
         ",\"op_received\":" + Rows(by_op) + ",\"step_op_columns\":" +
         Columns({"step", "op", "transfers", "pieces", "fragments",
                  "bytes_sent", "bytes_received", "source_tiles",
                  "destination_tiles", "dtypes"}) +
         ",\"step_ops\":" + Rows(per_step_op) + ",\"transfer_columns\":" +
         Columns({"step", "op", "index", "src_tile", "src_buffer", "bytes",
                  "rows", "destinations", "dtype", "destination_tiles"}) +
         ",\"largest\":" + Rows(largest) + "}";
}

std::string PassesJson(const fb::ModuleT& m) {
  std::vector<std::string> runs;
  for (const auto& run : m.log) {
    std::vector<std::string> decisions;
    for (const auto& d : run->decisions) {
      std::vector<int64_t> ops(d->ops.begin(), d->ops.end());
      decisions.push_back("[" + Ints(ops) + "," + Quote(d->action) + "," +
                          Quote(fb::EnumNameOutcome(d->outcome)) + "," +
                          Quote(d->reason) + "," + Int(d->cycles_before) + "," +
                          Int(d->cycles_after) + "," + Int(d->bytes_before) +
                          "," + Int(d->bytes_after) + "]");
    }
    runs.push_back("{\"pass\":" + Quote(run->pass) +
                   ",\"flags\":" + List(run->flags, Quote) +
                   ",\"decisions\":" + Rows(decisions) + "}");
  }
  return "{\"decision_columns\":" +
         Columns({"ops", "action", "outcome", "reason", "cycles_before",
                  "cycles_after", "bytes_before", "bytes_after"}) +
         ",\"runs\":" + Rows(runs) + "}";
}

}  // namespace

Status ReportData(const fb::ModuleT& module, const ReportOptions& options,
                  std::string* json) {
  Figures f;
  TILEC_RETURN_IF_ERROR(ComputeFigures(module, options, &f));
  TileMaps maps;
  // Sections that add tile maps come before the maps themselves.
  const std::string steps = StepsJson(f, &maps);
  StatusOr<std::string> memory = MemoryJson(f, options, &maps);
  if (!memory.ok()) return memory.status();
  const std::string exchange = ExchangeJson(f, &maps);
  *json = "{\"format\":\"tilec-program-report\",\"version\":1,\n\"module\":" +
          ModuleJson(module, options) +
          ",\n\"target\":" + TargetJson(*module.target) +
          ",\n\"host\":" + HostJson(options) +
          ",\n\"summary\":" + SummaryJson(module, f) +
          ",\n\"simulation\":" + SimulationJson(options) +
          ",\n\"ops\":" + OpsJson(module, f) + ",\n\"steps\":" + steps +
          ",\n\"memory\":" + *memory + ",\n\"exchange\":" + exchange +
          ",\n\"passes\":" + PassesJson(module) +
          ",\n\"tile_maps\":" + maps.Json() + "}\n";
  return Status::Ok();
}

std::string ReportPage(const std::string& data_json) {
  const std::pair<const char*, std::string> parts[] = {
      {"<!--tilec:style-->",
       std::string("<style>\n") + kPageStyle + "</style>"},
      {"<!--tilec:data-->",
       "<script type=\"application/json\" id=\"tilec-data\">\n" + data_json +
           "</script>"},
      {"<!--tilec:script-->",
       std::string("<script>\n") + kPageScript + "</script>"},
  };
  std::string page = kPageHtml;
  for (const auto& [marker, text] : parts) {
    const size_t at = page.find(marker);
    if (at != std::string::npos)
      page.replace(at, std::string(marker).size(), text);
  }
  return page;
}

}  // namespace tilec::inspect
