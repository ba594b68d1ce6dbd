#include "sim/simulate_device.h"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <map>
#include <memory>
#include <set>
#include <thread>

#include "formats/ir.h"
#include "formats/op_shapes.h"
#include "formats/print.h"
#include "sim/inputs.h"
#include "sim/reference.h"
#include "sim/tensor_data.h"

namespace tilec::sim {
namespace {

std::string Format(const char* format, ...) {
  va_list args;
  va_start(args, format);
  char buf[512];
  std::vsnprintf(buf, sizeof buf, format, args);
  va_end(args);
  return buf;
}

std::string G(double v) { return Format("%.6g", v); }

std::string Micros(int64_t cycles, double clock_hz) {
  return Format("%.3f", clock_hz > 0 ? cycles / clock_hz * 1e6 : 0.0);
}

}  // namespace

// ---------------------------------------------------------------- text

namespace {

// The header: target, totals, work, memory and slow paths.
std::string SummaryText(const sim::SimResult& r,
                        const SimulateDeviceReport& report) {
  std::string out;
  out += "simulate-device: " + report.module_name + " on target " + r.target +
         " (" + std::to_string(r.tiles) + " tiles, " + G(r.clock_hz / 1e9) +
         " GHz)\n";
  out += "total: " + std::to_string(r.total_cycles) +
         " cycles = " + Micros(r.total_cycles, r.clock_hz) + " us (compute " +
         std::to_string(r.compute_cycles) + ", exchange " +
         std::to_string(r.exchange_cycles) + " in " +
         std::to_string(r.exchange_phases) +
         (r.exchange_phases == 1 ? " phase" : " phases") +
         (r.update_cycles > 0
              ? ", repeat address updates " + std::to_string(r.update_cycles)
              : std::string()) +
         "; " + std::to_string(r.supersteps.size()) + " supersteps)\n";
  out += "exchange: scheduled " + std::to_string(r.exchange_scheduled_cycles) +
         " + sync " + std::to_string(r.sync_cycles) +
         " (the endpoint bound would be " +
         std::to_string(r.exchange_bound_cycles) + " + sync)\n";
  out += "work: " + std::to_string(r.kernel_calls) + " kernel calls, " +
         std::to_string(r.gemm_macs) + " GEMM MACs, " +
         std::to_string(r.transfers) + " transfers (" +
         std::to_string(r.pieces) + " pieces), " +
         std::to_string(r.bytes_sent) + " B sent, " +
         std::to_string(r.bytes_received) + " B received\n";
  out += "memory: highest buffer end " + std::to_string(r.peak_memory_bytes) +
         " B (tile " + std::to_string(r.peak_memory_tile) + "); code up to " +
         std::to_string(r.code_bytes_max) + " B a tile, exchange tables up to " +
         std::to_string(r.exchange_code_bytes_max) + " B; " +
         std::to_string(r.tensor_bytes) +
         " B left for tensors on the tile with the most code\n";
  for (size_t k = 0; k < r.repeats.size(); ++k) {
    const sim::SimResult::RepeatReport& rep = r.repeats[k];
    const auto [low, high] = std::minmax_element(rep.iteration_cycles.begin(),
                                                 rep.iteration_cycles.end());
    int64_t all = 0;
    for (int64_t c : rep.iteration_cycles) all += c;
    out += "repeat " + std::to_string(k) + ": supersteps " +
           std::to_string(rep.first) + ".." +
           std::to_string(rep.first + rep.count - 1) + " x" +
           std::to_string(rep.iteration_cycles.size()) + ", " +
           std::to_string(all) + " cycles (per iteration " +
           std::to_string(*low) +
           (*high != *low ? " to " + std::to_string(*high) : std::string()) +
           ")\n";
  }
  if (r.slow_paths.empty()) {
    out += "slow path: none\n";
  } else {
    out += "slow path (binary inputs sharing a memory element):";
    for (const sim::SlowPathReport& s : r.slow_paths) {
      out += " " + s.kernel + " " + std::to_string(s.calls) + " calls +" +
             std::to_string(s.extra_cycles) + " cycles;";
    }
    out.back() = '\n';
  }
  return out;
}

std::string SuperstepsText(const sim::SimResult& r) {
  std::string out;
  out += "\nsupersteps:\n";
  out += Format("  %5s %7s %10s %10s %8s %8s %8s %8s %6s %9s %9s %10s  %s\n",
                "step", "update", "compute", "exchange", "bound", "sched",
                "slowest", "xslowest", "calls", "transfers", "pieces",
                "bytes_recv", "label");
  for (const sim::SuperstepReport& s : r.supersteps) {
    out +=
        Format("  %5d %7lld %10lld %10lld %8lld %8lld %8d %8d %6lld %9lld "
               "%9lld %10lld  ",
               s.index, static_cast<long long>(s.update_cycles),
               static_cast<long long>(s.compute_cycles),
               static_cast<long long>(s.exchange_cycles),
               static_cast<long long>(s.exchange_bound_cycles),
               static_cast<long long>(s.exchange_scheduled_cycles),
               s.slowest_tile,
               s.exchange_slowest_tile, static_cast<long long>(s.kernel_calls),
               static_cast<long long>(s.transfers),
               static_cast<long long>(s.pieces),
               static_cast<long long>(s.bytes_received)) +
        (s.iteration >= 0 ? "[iteration " + std::to_string(s.iteration) + "] "
                          : std::string()) +
        s.label + "\n";
  }
  return out;
}

std::string OpsText(const sim::SimResult& r) {
  std::string out;
  out +=
      "\nops (cycles attributed: compute of the slowest tile, exchange by "
      "bytes received):\n";
  out +=
      Format("  %5s %10s %10s %7s %10s %6s %6s %9s %9s %10s %12s %5s  %s\n",
             "op", "compute", "exchange", "update", "total", "share", "calls",
             "transfers", "pieces", "bytes_recv", "macs", "slow", "kind name");
  for (const sim::OpReport& o : r.ops) {
    const int64_t total = o.compute_cycles + o.exchange_cycles + o.update_cycles;
    const double share =
        r.total_cycles > 0 ? 100.0 * total / r.total_cycles : 0.0;
    out += Format(
               "  %5u %10lld %10lld %7lld %10lld %5.1f%% %6lld %9lld %9lld "
               "%10lld %12lld %5lld  ",
               o.op, static_cast<long long>(o.compute_cycles),
               static_cast<long long>(o.exchange_cycles),
               static_cast<long long>(o.update_cycles),
               static_cast<long long>(total), share,
               static_cast<long long>(o.kernel_calls),
               static_cast<long long>(o.transfers),
               static_cast<long long>(o.pieces),
               static_cast<long long>(o.bytes_received),
               static_cast<long long>(o.macs),
               static_cast<long long>(o.slow_path_calls)) +
           (o.kind.empty() ? "-" : o.kind) + " " +
           (o.name.empty() ? "-" : o.name) + "\n";
  }
  return out;
}

std::string SlowestTilesText(const sim::SimResult& r) {
  std::string out;
  out +=
      "\nslowest tiles (by busy cycles = own kernel + own exchange "
      "cycles):\n";
  out += Format("  %5s %10s %10s %10s %6s %6s %10s\n", "tile", "busy",
                "compute", "exchange", "busy%", "calls", "memory");
  for (const sim::TileReport& t : r.slowest_tiles) {
    const double busy =
        r.total_cycles > 0 ? 100.0 * t.busy_cycles / r.total_cycles : 0.0;
    out += Format("  %5d %10lld %10lld %10lld %5.1f%% %6lld %10lld\n", t.tile,
                  static_cast<long long>(t.busy_cycles),
                  static_cast<long long>(t.compute_cycles),
                  static_cast<long long>(t.exchange_cycles), busy,
                  static_cast<long long>(t.kernel_calls),
                  static_cast<long long>(t.memory_bytes));
  }
  return out;
}

// "  %70 embeddings f16[16,32]: PASS max_abs_err ...": one output's
// comparison, with the worst element when it fails.
std::string CheckLine(const OutputCheck& c) {
  const sim::Comparison& m = c.comparison;
  std::string out =
      "  %" + std::to_string(c.value) + " " + c.name + " " + c.type + ": " +
      (m.pass ? "PASS" : "FAIL") + " max_abs_err " + G(m.max_abs_err) +
      " (scale " + G(m.scale) + ") max_rel_err " + G(m.max_rel_err) +
      " cosine " + Format("%.9f", m.cosine) + " mismatches " +
      std::to_string(m.mismatches) + "/" + std::to_string(m.elements) +
      (m.nonfinite ? " nonfinite " + std::to_string(m.nonfinite) : "");
  if (!m.pass && m.worst_index >= 0) {
    out += " worst [" + std::to_string(m.worst_index) + "] sim " +
           G(m.worst_sim) + " ref " + G(m.worst_ref);
  }
  return out + "\n";
}

// --expect: each simulated output against the given expected one.
std::string ExpectedText(const SimulateDeviceReport& report) {
  if (report.expect_dir.empty()) return "";
  std::string out = "\ncomparison with the expected outputs in " +
                    report.expect_dir + " (the tolerance above):\n";
  for (const OutputCheck& c : report.expected) out += CheckLine(c);
  return out;
}

// Each output against the reference (and, quantized, against the
// unquantized graph), and the verdict.
std::string ComparisonText(const SimulateDeviceReport& report) {
  std::string out;
  if (report.compared) {
    const sim::Tolerance& tol = report.tolerance;
    out += "\ncomparison with the reference (atol " + G(tol.atol) +
           " x scale, rtol " + G(tol.rtol) + ", min cosine " +
           G(tol.min_cosine) + (report.fp8 ? "; FP8 defaults" : "") + "):\n";
    for (const OutputCheck& c : report.checks) out += CheckLine(c);
    if (!report.unquantized.empty()) {
      out += "\ncomparison with the unquantized graph (min cosine " +
             G(report.floors.output) + ", branch " + G(report.floors.branch) +
             "; docs/quantize.md):\n";
      for (const OutputAccuracy& a : report.unquantized) {
        out += "  %" + std::to_string(a.value) + " " + a.name + ": " +
               (WithinUnquantizedTolerance(a, report.floors) ? "PASS "
                                                              : "FAIL ") +
               AccuracyText(a.full);
        if (a.has_branch) {
          out += "; branch (minus residual %" + std::to_string(a.residual) +
                 "): " + AccuracyText(a.branch);
        }
        out += "\n";
      }
    }
    out += ExpectedText(report);
    out += std::string("result: ") + (report.pass ? "PASS" : "FAIL") + "\n";
  } else {
    out += ExpectedText(report);
    out += report.executed
               ? "\nresult: not compared (--compare=false)\n"
               : "\nresult: cycles only, kernels not run (--execute=false)\n";
  }
  return out;
}

}  // namespace

std::string ReportText(const sim::SimResult& r,
                       const SimulateDeviceReport& report) {
  return SummaryText(r, report) + SuperstepsText(r) + OpsText(r) +
         SlowestTilesText(r) + ComparisonText(report);
}

// ---------------------------------------------------------------- tool

namespace {

// The module's device program (verified by the caller's Simulator before
// the reference or the simulator allocates anything for it).
Status ReadProgram(const SimulateDeviceOptions& options,
                   const std::string& name, fb::ModuleT* module) {
  TILEC_RETURN_IF_ERROR(ir::ReadModule(options.input, module));
  if (!module->program) {
    return Status::BadInput(name +
                            ": module has no device program (emit-device "
                            "writes one)");
  }
  return Status::Ok();
}

// A simulated output (empty if the simulator produced none).
const std::vector<float>& OutputOf(const SimResult& result, uint32_t value) {
  static const std::vector<float> kNone;
  auto it = result.outputs.find(value);
  return it == result.outputs.end() ? kNone : it->second;
}

kernels::ReferenceOptions ReferenceRunOptions(
    const SimulateDeviceOptions& options,
    const std::map<uint32_t, std::vector<float>>& given_inputs,
    const std::string& sidecar_dir) {
  kernels::ReferenceOptions ref_options;
  ref_options.provided = given_inputs;
  ref_options.sidecar_dir = sidecar_dir;
  ref_options.threads = options.threads;
  return ref_options;
}

// What the host writes for each bound input and weight: the reference's
// own contents where it kept them (moved out of the reference, which needs
// only its outputs afterwards), else the --inputs given, else, with
// `materialize_rest`, the value's seeded or sidecar contents. Without it
// the simulator makes those as it writes each (SimOptions::host_data, the
// same MaterializeValue): a whole model's weights are 1.6 GB as F32 and
// need not all live at once.
Status HostInputs(const fb::ModuleT& module, const std::string& name,
                  kernels::ReferenceResult* reference,
                  const std::map<uint32_t, std::vector<float>>& given_inputs,
                  const std::string& sidecar_dir, bool materialize_rest,
                  HostTensors* host) {
  std::set<uint32_t> outputs;
  for (const auto& binding : module.program->outputs) {
    if (binding) outputs.insert(binding->value);
  }
  for (const auto& binding : module.program->inputs) {
    if (!binding || host->count(binding->value)) continue;
    kernels::ReferenceTensor* t =
        reference != nullptr ? reference->Mutable(binding->value) : nullptr;
    // A weight the reference freed after its last read is listed empty.
    if (t != nullptr && !t->data.empty()) {
      (*host)[binding->value] = outputs.count(binding->value)
                                    ? t->data
                                    : std::move(t->data);
      continue;
    }
    if (auto given = given_inputs.find(binding->value);
        given != given_inputs.end()) {
      (*host)[binding->value] = given->second;
      continue;
    }
    if (!materialize_rest) continue;
    for (const auto& v : module.values) {
      if (v && v->id == binding->value) {
        TILEC_RETURN_IF_ERROR(
            kernels::MaterializeValue(*v, sidecar_dir, &(*host)[v->id])
                .WithContext(name));
      }
    }
  }
  return Status::Ok();
}

std::string ToleranceFailure(const OutputCheck& check, const Tolerance& tol) {
  const Comparison& m = check.comparison;
  return "output %" + std::to_string(check.value) + " \"" + check.name +
         "\" is outside tolerance: max_abs_err " + G(m.max_abs_err) +
         " (atol " + G(tol.atol) + " x scale " + G(m.scale) + "), cosine " +
         Format("%.9f", m.cosine) + " (min " + G(tol.min_cosine) + "), " +
         std::to_string(m.mismatches) + " of " + std::to_string(m.elements) +
         " elements mismatch" +
         (m.nonfinite ? " (" + std::to_string(m.nonfinite) + " non-finite)"
                      : std::string());
}

// Every output against the reference; the first failure's text in
// `first_failure` if it is still empty.
Status CheckOutputs(const fb::ModuleT& module, const std::string& name,
                    const SimResult& result,
                    const kernels::ReferenceResult& reference,
                    SimulateDeviceReport* report, std::string* first_failure) {
  for (const auto& binding : module.program->outputs) {
    const kernels::ReferenceTensor* ref = reference.Find(binding->value);
    if (ref == nullptr) {
      return Status::Internal(name + ": the reference has no value %" +
                              std::to_string(binding->value));
    }
    OutputCheck check;
    check.value = binding->value;
    check.name = ref->name;
    check.type = ir::DTypeText(ref->dtype, ref->fp8_scale_exp) +
                 ir::ShapeText(ref->shape);
    check.comparison = CompareTensors(OutputOf(result, binding->value),
                                      ref->data, report->tolerance);
    if (!check.comparison.pass && first_failure->empty()) {
      *first_failure = ToleranceFailure(check, report->tolerance);
    }
    report->pass = report->pass && check.comparison.pass;
    report->checks.push_back(std::move(check));
  }
  return Status::Ok();
}

// --expect: every simulated output against its expected contents, at the
// report's tolerance.
void CheckExpected(const fb::ModuleT& module, const SimResult& result,
                   const std::map<uint32_t, std::vector<float>>& expected,
                   SimulateDeviceReport* report, std::string* first_failure) {
  for (const auto& binding : module.program->outputs) {
    const fb::ValueT* value = nullptr;
    for (const auto& v : module.values) {
      if (v && v->id == binding->value) value = v.get();
    }
    auto want = expected.find(binding->value);
    if (value == nullptr || want == expected.end()) continue;
    OutputCheck check;
    check.value = binding->value;
    check.name = value->name;
    check.type = ir::DTypeText(value->dtype, value->fp8_scale_exp) +
                 ir::ShapeText(ir::DeclaredShape(*value));
    check.comparison = CompareTensors(OutputOf(result, binding->value),
                                      want->second, report->tolerance);
    if (!check.comparison.pass && first_failure->empty()) {
      *first_failure = "against " + report->expect_dir + "/" +
                       kernels::InputFileName(*value) + ": " +
                       ToleranceFailure(check, report->tolerance);
    }
    report->pass = report->pass && check.comparison.pass;
    report->expected.push_back(std::move(check));
  }
}

// The unquantized graph of `module`, whose device program is set aside
// while it is cloned: Unquantized drops the program, and copying it (most
// of a device file) only to drop it cost seconds on a whole model.
std::unique_ptr<fb::ModuleT> UnquantizedGraph(fb::ModuleT* module) {
  std::unique_ptr<fb::DeviceProgramT> program = std::move(module->program);
  std::unique_ptr<fb::ModuleT> graph = Unquantized(*module);
  module->program = std::move(program);
  return graph;
}

// The unquantized graph's reference, what CheckUnquantized compares with.
Status RunUnquantized(const fb::ModuleT& graph, const std::string& name,
                      const kernels::ReferenceOptions& ref_options,
                      kernels::ReferenceResult* unquantized) {
  // CompareOutput reads the outputs and their residual graph inputs only:
  // every weight and activation is freed after its last read.
  kernels::ReferenceOptions run = ref_options;
  run.keep = kernels::ReferenceOptions::Keep::kInputsAndOutputs;
  return kernels::RunReference(graph, run, unquantized).WithContext(name);
}

// A quantized program's outputs against the unquantized graph's reference
// (docs/quantize.md's floors).
void CheckUnquantized(const fb::ModuleT& module, const SimResult& result,
                      const kernels::ReferenceResult& unquantized,
                      SimulateDeviceReport* report,
                      std::string* first_failure) {
  for (const auto& binding : module.program->outputs) {
    OutputAccuracy a = CompareOutput(
        module, binding->value, OutputOf(result, binding->value), unquantized);
    const bool within = WithinUnquantizedTolerance(a, report->floors);
    if (!within && first_failure->empty()) {
      *first_failure =
          "output %" + std::to_string(a.value) + " \"" + a.name +
          "\" is outside the unquantized tolerance: " + AccuracyText(a.full) +
          (a.has_branch ? "; branch " + AccuracyText(a.branch) : "");
    }
    report->pass = report->pass && within;
    report->unquantized.push_back(std::move(a));
  }
}

// The references a comparison needs (the program's graph, and the
// unquantized graph's where it is quantized), made by Run, which may run on
// a thread of its own beside the simulation: both only read the module.
struct References {
  kernels::ReferenceResult reference, unquantized;
  std::unique_ptr<fb::ModuleT> unquantized_graph;  // null: not quantized
  Status status = Status::Ok();

  void Run(const fb::ModuleT& module, const std::string& name,
           const kernels::ReferenceOptions& run) {
    status = kernels::RunReference(module, run, &reference).WithContext(name);
    if (status.ok() && unquantized_graph) {
      status = RunUnquantized(*unquantized_graph, name, run, &unquantized);
    }
  }
};

// --dump-tensors: inputs and weights as the host wrote them, simulated
// outputs under the value's name, the reference's under "<name>.reference".
Status DumpTensors(const fb::ModuleT& module, const std::string& dump_dir,
                   const HostTensors& host, const SimResult& result,
                   const kernels::ReferenceResult* reference) {
  std::vector<kernels::ReferenceTensor> tensors;
  auto find_ref = [&](uint32_t id) {
    return reference != nullptr ? reference->Find(id) : nullptr;
  };
  for (const auto& v : module.values) {
    if (!v) continue;
    const bool is_input =
        v->role == fb::ValueRole::Input || v->role == fb::ValueRole::Weight;
    auto add = [&](const std::string& tensor_name,
                   const std::vector<float>& data) {
      kernels::ReferenceTensor t;
      t.id = v->id;
      t.name = tensor_name;
      t.shape = v->shape;
      t.file_shape = v->declared_shape;
      t.dtype = v->dtype;
      t.fp8_scale_exp = v->fp8_scale_exp;
      t.role = v->role;
      t.data = data;
      tensors.push_back(std::move(t));
    };
    if (is_input) {
      // Unbound inputs (the program does not use them) come from the
      // reference, which materializes every one.
      const kernels::ReferenceTensor* ref = find_ref(v->id);
      if (auto h = host.find(v->id); h != host.end()) {
        add(v->name, h->second);
      } else if (ref != nullptr) {
        add(v->name, ref->data);
      }
    }
    if (auto out = result.outputs.find(v->id); out != result.outputs.end()) {
      add(v->name, out->second);
      const kernels::ReferenceTensor* ref = find_ref(v->id);
      if (ref != nullptr) add(v->name + ".reference", ref->data);
    }
  }
  std::vector<const kernels::ReferenceTensor*> pointers;
  for (const kernels::ReferenceTensor& t : tensors) pointers.push_back(&t);
  return kernels::WriteTensorFiles(pointers, dump_dir, nullptr);
}

}  // namespace

Status SimulateDevice(const SimulateDeviceOptions& options) {
  if (options.threads < 1) {
    return Status::BadInput("--threads=" + std::to_string(options.threads) +
                            ": must be at least 1");
  }
  const std::string name = ir::DisplayName(options.input);
  fb::ModuleT module;
  TILEC_RETURN_IF_ERROR(ReadProgram(options, name, &module));
  const std::string sidecar_dir = options.sidecar_dir.empty()
                                      ? ir::DirectoryOf(options.input)
                                      : options.sidecar_dir;
  SimOptions sim_options;
  sim_options.execute = options.execute;
  sim_options.threads = options.threads;
  sim_options.top_tiles = options.top_tiles;
  sim_options.host_data = [&](const fb::ValueT& value,
                              std::vector<float>* data) {
    return kernels::MaterializeValue(value, sidecar_dir, data)
        .WithContext(name);
  };
  auto simulator = std::make_unique<Simulator>(module, sim_options);
  TILEC_RETURN_IF_ERROR(simulator->Verify().WithContext(name));

  std::map<uint32_t, std::vector<float>> given_inputs;
  if (!options.inputs_dir.empty()) {
    TILEC_RETURN_IF_ERROR(
        kernels::LoadInputs(module, options.inputs_dir, &given_inputs));
  }
  std::map<uint32_t, std::vector<float>> expected;
  if (!options.expect_dir.empty()) {
    if (!options.execute) {
      return Status::BadInput(
          "--expect needs the outputs: it cannot be used with "
          "--execute=false");
    }
    TILEC_RETURN_IF_ERROR(
        kernels::LoadExpectedOutputs(module, options.expect_dir, &expected));
  }
  const kernels::ReferenceOptions ref_options =
      ReferenceRunOptions(options, given_inputs, sidecar_dir);
  const bool compare = options.compare && options.execute;
  // --dump writes the host's data after the run, so all of it is made up
  // front (the reference's, kept), and the reference runs first. Otherwise
  // the reference keeps only the graph's inputs and outputs, freeing each
  // weight after its last read, and the simulator makes each input's and
  // weight's data as it writes it and frees it (MaterializeValue, or the
  // --inputs given, as the reference takes them): a whole model's F32
  // weights never live at once, and the references run on a thread of
  // their own while the simulator runs (the CPU either leaves idle is the
  // other's).
  const bool dump = !options.dump_dir.empty();
  References refs;
  if (compare && IsQuantized(module)) {
    refs.unquantized_graph = UnquantizedGraph(&module);
  }
  kernels::ReferenceOptions run = ref_options;
  run.keep = dump ? kernels::ReferenceOptions::Keep::kSourcesAndOutputs
                  : kernels::ReferenceOptions::Keep::kInputsAndOutputs;
  // Joined wherever this returns (it reads `module` and `refs`).
  std::jthread beside;
  if (compare && dump) {
    refs.Run(module, name, run);
    TILEC_RETURN_IF_ERROR(refs.status);
  } else if (compare) {
    beside = std::jthread([&] { refs.Run(module, name, run); });
  }
  const kernels::ReferenceResult* ran = compare ? &refs.reference : nullptr;
  HostTensors host;
  if (options.execute) {
    TILEC_RETURN_IF_ERROR(
        HostInputs(module, name, dump && compare ? &refs.reference : nullptr,
                   given_inputs, sidecar_dir,
                   /*materialize_rest=*/dump, &host));
  }

  SimResult result;
  const Status simulated = (dump ? simulator->Run(host, &result)
                                 : simulator->Run(std::move(host), &result))
                               .WithContext(name);
  simulator.reset();  // its plans are not needed by the checks below
  if (beside.joinable()) beside.join();
  // A reference that fails is reported first, as when it ran first.
  TILEC_RETURN_IF_ERROR(refs.status);
  TILEC_RETURN_IF_ERROR(simulated);

  SimulateDeviceReport report;
  report.module_name = name;
  report.compared = compare;
  report.executed = options.execute;
  report.fp8 = ModuleHasFp8(module);
  report.tolerance = DefaultTolerance(report.fp8);
  if (options.atol >= 0) report.tolerance.atol = options.atol;
  if (options.rtol >= 0) report.tolerance.rtol = options.rtol;
  if (options.min_cosine >= 0) report.tolerance.min_cosine = options.min_cosine;
  report.tolerance.allow_nonfinite = options.allow_nonfinite;
  if (options.min_unquantized_cosine >= 0) {
    report.floors.output = options.min_unquantized_cosine;
  }
  if (options.min_branch_cosine >= 0) {
    report.floors.branch = options.min_branch_cosine;
  }
  std::string first_failure;
  if (compare) {
    TILEC_RETURN_IF_ERROR(CheckOutputs(module, name, result, refs.reference,
                                       &report, &first_failure));
    if (refs.unquantized_graph) {
      CheckUnquantized(module, result, refs.unquantized, &report,
                       &first_failure);
    }
  }
  report.expect_dir = options.expect_dir;
  if (!options.expect_dir.empty()) {
    CheckExpected(module, result, expected, &report, &first_failure);
  }
  if (!options.dump_dir.empty()) {
    TILEC_RETURN_IF_ERROR(
        DumpTensors(module, options.dump_dir, host, result, ran));
  }
  if (!options.trace.empty()) {
    TILEC_RETURN_IF_ERROR(
        ir::WriteFileAtomically(options.trace, TraceJson(result)));
  }
  TILEC_RETURN_IF_ERROR(ir::WriteFileAtomically(
      options.output,
      options.json ? ReportJson(result, report) : ReportText(result, report)));
  if (!options.json_output.empty()) {
    TILEC_RETURN_IF_ERROR(ir::WriteFileAtomically(options.json_output,
                                                  ReportJson(result, report)));
  }
  if (!first_failure.empty()) {
    return Status::Infeasible(name + ": " + first_failure);
  }
  return Status::Ok();
}

}  // namespace tilec::sim
