#include "passes/inspect/program_report.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <map>
#include <set>
#include <string_view>

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
#include "passes/inspect/throughput.h"
#include "passes/inspect/tile_list.h"

namespace tilec::inspect {
namespace {

// ---------------------------------------------------------------- JSON text

using Json = nlohmann::ordered_json;

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

// Null where JSON has no number.
Json Number(double v) { return std::isfinite(v) ? Json(v) : Json(nullptr); }

Json Columns(std::initializer_list<const char*> names) {
  Json out = Json::array();
  for (const char* n : names) out.push_back(n);
  return out;
}

// Arrays of table rows (and of tiles, pass runs and tile maps): one
// element per line, so that goldens diff row by row.
bool OneElementPerLine(std::string_view key) {
  static const std::string_view kKeys[] = {
      "rows",    "tiles", "buffers",   "op_received", "step_ops",
      "largest", "runs",  "decisions", "tile_maps"};
  return std::find(std::begin(kKeys), std::end(kKeys), key) != std::end(kKeys);
}

// `j`, the value of `key` ("" for an array's element), as the data has
// always been written: without spaces; strings by Quote; floating-point
// numbers as the shortest text that reads back exactly (ir::NumberText,
// not nlohmann's formatting); rows one per line; at the top level every
// member after the format line ("format" and "version") on its own line.
void Write(const Json& j, std::string_view key, bool top_level,
           std::string* out) {
  switch (j.type()) {
    case Json::value_t::object: {
      *out += "{";
      bool first = true;
      for (const auto& [k, v] : j.items()) {
        if (!first) *out += top_level && k != "version" ? ",\n" : ",";
        first = false;
        *out += Quote(k) + ":";
        Write(v, k, false, out);
      }
      *out += "}";
      return;
    }
    case Json::value_t::array: {
      const bool lines = OneElementPerLine(key) && !j.empty();
      *out += lines ? "[\n" : "[";
      for (size_t i = 0; i < j.size(); ++i) {
        if (i) *out += lines ? ",\n" : ",";
        Write(j[i], "", false, out);
      }
      *out += lines ? "\n]" : "]";
      return;
    }
    case Json::value_t::string:
      *out += Quote(j.get_ref<const std::string&>());
      return;
    case Json::value_t::number_float:
      *out += ir::NumberText(j.get<double>());
      return;
    default:  // integers, booleans, null
      *out += j.dump();
      return;
  }
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
    auto [it, added] = index_.emplace(runs, static_cast<int>(maps_.size()));
    if (added) maps_.push_back(runs);
    return it->second;
  }
  const Json& maps() const { return maps_; }

 private:
  std::map<std::vector<int64_t>, int> index_;
  Json maps_ = Json::array();
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
  sim::SimOptions timing;
  timing.execute = false;
  timing.threads = options.threads;
  sim::Simulator simulator(module, timing);
  StatusOr<VerifiedProgram> program =
      VerifiedProgram::Verify(module, &simulator);
  if (!program.ok()) return program.status();
  TILEC_RETURN_IF_ERROR(simulator.Run(sim::HostTensors{}, &f->timing));
  StatusOr<MemoryUse> memory = MemoryOverTime(*program);
  if (!memory.ok()) return memory.status();
  f->memory = std::move(*memory);
  f->exchange = ExchangesByStep(*program, options.largest_transfers);
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

Json ModuleJson(const fb::ModuleT& m, const ReportOptions& options) {
  Json j;
  j["name"] = options.module_name;
  j["producer"] = m.producer;
  j["model"] = m.model ? Json(ir::ModelText(*m.model)) : Json(nullptr);
  return j;
}

Json TargetJson(const fb::TargetT& t) {
  Json j;
  j["name"] = t.name;
  j["tiles"] = t.tiles;
  j["clock_hz"] = Number(t.clock_hz);
  j["sram_bytes"] = t.sram_bytes;
  j["runtime_code_bytes"] = t.runtime_code_bytes;
  j["tensor_bytes"] = ir::MaxTileTensorBytes(t);
  j["element_bytes"] = t.element_bytes;
  j["standard_elements"] = t.standard_elements;
  j["interleaved_element_bytes"] = t.interleaved_element_bytes;
  j["amp_macs_fp8"] = t.amp_macs_fp8;
  j["amp_macs_f16"] = t.amp_macs_f16;
  j["amp_macs_f32"] = t.amp_macs_f32;
  j["sync_cycles"] = t.sync_cycles;
  return j;
}

Json HostJson(const ReportOptions& o) {
  auto seconds = [](double s) { return s < 0 ? Json(nullptr) : Number(s); };
  Json j;
  j["compile_seconds"] = seconds(o.compile_seconds);
  j["simulate_seconds"] = seconds(o.simulate_seconds);
  return j;
}

Json SummaryJson(const fb::ModuleT& m, const Figures& f) {
  const sim::SimResult& r = f.timing;
  int64_t estimate = 0;
  for (const auto& op : m.ops) {
    if (op->estimate) estimate += op->estimate->cycles;
  }
  const auto& peak = f.memory.peak_live;
  const int peak_tile = static_cast<int>(
      std::max_element(peak.begin(), peak.end()) - peak.begin());
  Json busy = Json::array();
  for (const sim::TileReport& t : r.slowest_tiles) {
    busy.push_back(Json::array({t.tile, t.busy_cycles, t.compute_cycles,
                                t.exchange_cycles, t.kernel_calls}));
  }
  Json j;
  j["cycles"] = r.total_cycles;
  j["compute_cycles"] = r.compute_cycles;
  j["exchange_cycles"] = r.exchange_cycles;
  j["exchange_bound_cycles"] = r.exchange_bound_cycles;
  j["exchange_scheduled_cycles"] = r.exchange_scheduled_cycles;
  j["sync_cycles"] = r.sync_cycles;
  j["update_cycles"] = r.update_cycles;
  j["exchange_phases"] = r.exchange_phases;
  j["supersteps"] = r.supersteps.size();
  j["estimate_cycles"] = estimate;
  j["kernel_calls"] = r.kernel_calls;
  j["transfers"] = r.transfers;
  j["pieces"] = r.pieces;
  j["bytes_sent"] = r.bytes_sent;
  j["bytes_received"] = r.bytes_received;
  j["gemm_macs"] = r.gemm_macs;
  j["slow_path_calls"] = r.slow_path_calls;
  j["buffers"] = f.memory.buffers.size();
  j["never_live_buffers"] = f.memory.never_live;
  j["peak_live_bytes"] = peak.empty() ? 0 : peak[peak_tile];
  j["peak_live_tile"] = peak.empty() ? -1 : peak_tile;
  j["highest_end_bytes"] = r.peak_memory_bytes;
  j["highest_end_tile"] = r.peak_memory_tile;
  j["code_bytes_max"] = r.code_bytes_max;
  j["exchange_code_bytes_max"] = r.exchange_code_bytes_max;
  j["tensor_bytes"] = r.tensor_bytes;
  j["busy_columns"] = Columns({"tile", "busy", "compute", "exchange", "calls"});
  j["busiest_tiles"] = std::move(busy);
  return j;
}

// Per-image figures are null when the module records no batch.
Json ThroughputJson(const Throughput& t) {
  auto per_image = [&](double v) {
    return t.batch > 0 ? Number(v) : Json(nullptr);
  };
  Json j;
  j["batch"] = t.batch > 0 ? Json(t.batch) : Json(nullptr);
  j["gemm_macs"] = t.gemm_macs;
  j["cycles_per_image"] = per_image(t.cycles_per_image);
  j["images_per_second"] = per_image(t.images_per_second);
  j["fp8_peak_macs_per_cycle"] = t.fp8_peak_macs_per_cycle;
  j["fp8_peak_fraction"] = Number(t.fp8_peak_fraction);
  return j;
}

Json OutputsJson(const std::vector<sim::OutputCheck>& checks) {
  Json out = Json::array();
  for (const sim::OutputCheck& x : checks) {
    const sim::Comparison& c = x.comparison;
    Json& j = out.emplace_back();
    j["value"] = x.value;
    j["name"] = x.name;
    j["type"] = x.type;
    j["pass"] = c.pass;
    j["elements"] = c.elements;
    j["mismatches"] = c.mismatches;
    j["nonfinite"] = c.nonfinite;
    j["scale"] = Number(c.scale);
    j["max_abs_err"] = Number(c.max_abs_err);
    j["max_rel_err"] = Number(c.max_rel_err);
    j["cosine"] = Number(c.cosine);
  }
  return out;
}

// simulate-device --expect's comparison, null without it.
Json ExpectedJson(const sim::SimulateDeviceReport& s) {
  if (s.expect_dir.empty()) return nullptr;
  Json j;
  j["dir"] = s.expect_dir;
  j["pass"] = sim::ExpectedPass(s);
  j["atol"] = Number(s.tolerance.atol);
  j["rtol"] = Number(s.tolerance.rtol);
  j["min_cosine"] = Number(s.tolerance.min_cosine);
  j["outputs"] = OutputsJson(s.expected);
  return j;
}

Json SimulationJson(const ReportOptions& o) {
  if (o.simulation == nullptr) return nullptr;
  const sim::SimulateDeviceReport& s = o.simulation->device;
  Json j;
  j["file"] = o.simulation_name;
  j["module"] = s.module_name;
  j["compared"] = s.compared;
  if (s.compared) {
    j["pass"] = s.pass;
    j["atol"] = Number(s.tolerance.atol);
    j["rtol"] = Number(s.tolerance.rtol);
    j["min_cosine"] = Number(s.tolerance.min_cosine);
    j["fp8_defaults"] = s.fp8;
    j["outputs"] = OutputsJson(s.checks);
  }
  j["expected"] = ExpectedJson(s);
  return j;
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

Json OpsJson(const fb::ModuleT& m, const Figures& f) {
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
  Json rows = Json::array();
  for (uint32_t id : order) {
    const fb::OperationT* op = graph.count(id) ? graph[id] : nullptr;
    const sim::OpReport empty;
    const sim::OpReport& s = simulated.count(id) ? *simulated[id] : empty;
    const OpWork none;
    const OpWork& w = f.work.count(id) ? f.work.at(id) : none;
    const fb::EstimateT no_estimate;
    const fb::EstimateT& e =
        op != nullptr && op->estimate ? *op->estimate : no_estimate;
    rows.push_back(Json::array(
        {id, op ? op->name : s.name, op ? ir::OpKindText(op->kind) : s.kind,
         op ? OwnersOf(m, *op) : "",
         op && op->recipe ? ir::RecipeText(*op->recipe) : "", e.cycles,
         e.compute_cycles, e.exchange_cycles, e.exchange_bytes, e.peak_bytes,
         s.compute_cycles, s.exchange_cycles, s.kernel_calls, w.tiles.size(),
         s.transfers, s.pieces, s.bytes_received, s.macs, w.gemm_cycles,
         w.amp_macs_per_cycle, s.slow_path_calls, w.first_step,
         w.last_step}));
  }
  Json j;
  j["columns"] = Columns({"id",
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
                          "last_step"});
  j["rows"] = std::move(rows);
  return j;
}

// Every op with work in the superstep, hidden behind the slowest tile or
// not: [op, kernel calls, transfers, bytes received].
Json StepOpsJson(const std::map<uint32_t, StepOp>& computes,
                 const StepExchange& x) {
  std::map<uint32_t, std::vector<int64_t>> present;
  for (const auto& [op, so] : computes) present[op] = {so.calls, 0, 0};
  for (const OpExchange& o : x.ops) {
    std::vector<int64_t>& p = present[o.op];
    p.resize(3, 0);
    p[1] = o.transfers;
    p[2] = o.bytes_received;
  }
  Json ops = Json::array();
  for (const auto& [op, p] : present) {
    ops.push_back(Json::array({op, p[0], p[1], p[2]}));
  }
  return ops;
}

Json StepsJson(const Figures& f, TileMaps* maps) {
  Json rows = Json::array();
  for (size_t s = 0; s < f.timing.supersteps.size(); ++s) {
    // Run steps: a repeat's supersteps appear once per iteration.
    const sim::SuperstepReport& r = f.timing.supersteps[s];
    const StepExchange& x = f.exchange.steps[r.index];
    Json spans = Json::array();
    for (const sim::SuperstepReport::Span& sp : r.compute_spans) {
      spans.push_back(Json::array({sp.op, sp.kernel, sp.cycles, sp.calls}));
    }
    Json split = Json::array();
    for (const auto& [op, cycles] : r.exchange_split) {
      split.push_back(Json::array({op, cycles}));
    }
    const bool moved = x.transfers > 0;
    // The fragments' map is added before the received bytes' (the maps'
    // numbering as the data has always had it).
    const int fragments_map = moved ? maps->Add(x.tiles.fragments) : -1;
    const int received_map = moved ? maps->Add(x.tiles.received) : -1;
    const std::string label =
        r.iteration < 0 ? r.label
                        : "[iteration " + std::to_string(r.iteration) + "] " +
                              r.label;
    rows.push_back(Json::array(
        {label, r.start_cycle, r.compute_cycles, r.exchange_cycles,
         r.slowest_tile, r.exchange_slowest_tile, r.kernel_calls, r.transfers,
         r.pieces, r.bytes_received, x.fragments, std::move(spans),
         std::move(split), StepOpsJson(f.step_ops[r.index], x), received_map,
         fragments_map, r.exchange_bound_cycles, r.exchange_scheduled_cycles,
         r.sync_cycles, r.update_cycles}));
  }
  Json j;
  j["columns"] = Columns({"label", "start", "compute", "exchange",
                          "slowest_tile", "exchange_slowest_tile", "calls",
                          "transfers", "pieces", "bytes_received", "fragments",
                          "compute_spans", "exchange_split", "ops",
                          "received_map", "fragments_map", "exchange_bound",
                          "exchange_scheduled", "sync", "update"});
  j["span_columns"] = Columns({"op", "kernel", "cycles", "calls"});
  j["split_columns"] = Columns({"op", "cycles"});
  j["op_columns"] = Columns({"op", "calls", "transfers", "bytes_received"});
  j["rows"] = std::move(rows);
  return j;
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

Json BufferRow(const BufferLife& b) {
  const int flags =
      (b.host_written ? 1 : 0) | (b.weight ? 2 : 0) | (b.host_read ? 4 : 0);
  return Json::array({b.id, b.offset, b.bytes, b.first, b.last, b.op, b.value,
                      flags, b.name});
}

StatusOr<Json> MemoryJson(const Figures& f, const ReportOptions& options,
                          TileMaps* maps) {
  const MemoryUse& m = f.memory;
  StatusOr<std::vector<int>> detail = DetailTiles(m, options);
  if (!detail.ok()) return detail.status();
  std::vector<std::vector<const BufferLife*>> by_tile(m.peak_live.size());
  for (const BufferLife& b : m.buffers) by_tile[b.tile].push_back(&b);
  Json tiles = Json::array();
  for (int t : *detail) {
    Json buffers = Json::array();
    for (const BufferLife* b : by_tile[t]) {
      if (b->live()) buffers.push_back(BufferRow(*b));
    }
    Json& tile = tiles.emplace_back();
    tile["tile"] = t;
    tile["live"] = m.live[t];
    tile["buffers"] = std::move(buffers);
  }
  // Added last to first (the maps' numbering as the data has always had
  // it).
  const std::vector<int64_t> peak_step(m.peak_step.begin(), m.peak_step.end());
  const int highest_end_map = maps->Add(m.highest_end);
  const int peak_step_map = maps->Add(peak_step);
  const int peak_live_map = maps->Add(m.peak_live);
  const int exchange_code_map = maps->Add(f.timing.exchange_code_bytes);
  const int code_map = maps->Add(f.code_reserved);
  Json j;
  j["code_map"] = code_map;
  j["exchange_code_map"] = exchange_code_map;
  j["peak_live_map"] = peak_live_map;
  j["peak_step_map"] = peak_step_map;
  j["highest_end_map"] = highest_end_map;
  j["buffer_columns"] = Columns({"id", "offset", "bytes", "first", "last",
                                 "op", "value", "flags", "name"});
  j["flags"] = {{"host_written", 1}, {"weight", 2}, {"host_read", 4}};
  j["tiles"] = std::move(tiles);
  return j;
}

Json TransferRow(const TransferInfo& t) {
  return Json::array({t.step, t.op, t.index, t.src_tile, t.src_buffer, t.bytes,
                      t.rows, t.destinations.size(), ir::DTypeText(t.dtype),
                      TileListText(t.destinations)});
}

Json ExchangeJson(const Figures& f, TileMaps* maps) {
  const ExchangeTotals& x = f.exchange;
  Json by_op = Json::array(), per_step_op = Json::array(),
       largest = Json::array();
  for (const auto& [op, received] : x.received_by_op) {
    by_op.push_back(Json::array({op, maps->Add(received)}));
  }
  for (size_t s = 0; s < x.steps.size(); ++s) {
    for (const OpExchange& o : x.steps[s].ops) {
      std::string dtypes;
      for (fb::DType d : o.dtypes) {
        dtypes += (dtypes.empty() ? "" : ",") + ir::DTypeText(d);
      }
      per_step_op.push_back(Json::array(
          {s, o.op, o.transfers, o.pieces, o.fragments, o.bytes_sent,
           o.bytes_received, o.source_tiles, o.destination_tiles, dtypes}));
      for (const TransferInfo& t : o.largest) largest.push_back(TransferRow(t));
    }
  }
  // Added last to first (the maps' numbering as the data has always had
  // it).
  const int fragments_map = maps->Add(x.program.fragments);
  const int sent_map = maps->Add(x.program.sent);
  const int received_map = maps->Add(x.program.received);
  Json j;
  j["received_map"] = received_map;
  j["sent_map"] = sent_map;
  j["fragments_map"] = fragments_map;
  j["op_received"] = std::move(by_op);
  j["step_op_columns"] =
      Columns({"step", "op", "transfers", "pieces", "fragments", "bytes_sent",
               "bytes_received", "source_tiles", "destination_tiles",
               "dtypes"});
  j["step_ops"] = std::move(per_step_op);
  j["transfer_columns"] =
      Columns({"step", "op", "index", "src_tile", "src_buffer", "bytes",
               "rows", "destinations", "dtype", "destination_tiles"});
  j["largest"] = std::move(largest);
  return j;
}

Json PassesJson(const fb::ModuleT& m) {
  Json runs = Json::array();
  for (const auto& run : m.log) {
    Json decisions = Json::array();
    for (const auto& d : run->decisions) {
      decisions.push_back(Json::array(
          {Json(std::vector<int64_t>(d->ops.begin(), d->ops.end())),
           d->action, fb::EnumNameOutcome(d->outcome), d->reason,
           d->cycles_before, d->cycles_after, d->bytes_before,
           d->bytes_after}));
    }
    Json& r = runs.emplace_back();
    r["pass"] = run->pass;
    r["flags"] = run->flags;
    r["decisions"] = std::move(decisions);
  }
  Json j;
  j["decision_columns"] =
      Columns({"ops", "action", "outcome", "reason", "cycles_before",
               "cycles_after", "bytes_before", "bytes_after"});
  j["runs"] = std::move(runs);
  return j;
}

}  // namespace

Status ReportData(const fb::ModuleT& module, const ReportOptions& options,
                  std::string* json) {
  Figures f;
  TILEC_RETURN_IF_ERROR(ComputeFigures(module, options, &f));
  StatusOr<Throughput> throughput = ThroughputOf(module, f.timing.total_cycles);
  if (!throughput.ok()) {
    return throughput.status().WithContext(options.module_name);
  }
  TileMaps maps;
  // Sections that add tile maps come before the maps themselves.
  Json steps = StepsJson(f, &maps);
  StatusOr<Json> memory = MemoryJson(f, options, &maps);
  if (!memory.ok()) return memory.status();
  Json exchange = ExchangeJson(f, &maps);
  Json data;
  data["format"] = "tilec-program-report";
  data["version"] = 1;
  data["module"] = ModuleJson(module, options);
  data["target"] = TargetJson(*module.target);
  data["host"] = HostJson(options);
  data["summary"] = SummaryJson(module, f);
  data["throughput"] = ThroughputJson(*throughput);
  data["simulation"] = SimulationJson(options);
  data["ops"] = OpsJson(module, f);
  data["steps"] = std::move(steps);
  data["memory"] = std::move(*memory);
  data["exchange"] = std::move(exchange);
  data["passes"] = PassesJson(module);
  data["tile_maps"] = maps.maps();
  json->clear();
  Write(data, "", /*top_level=*/true, json);
  *json += "\n";
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
