#include "sim/report_json.h"

#include <cmath>
#include <cstdio>
#include <map>
#include <string_view>
#include <vector>

namespace tilec::sim {
namespace {

// Non-finite numbers, which JSON cannot spell, as the strings "nan", "inf"
// and "-inf" (inspect-program reads them back).
Json Number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;
}

std::string Format(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

std::string OpLabel(uint32_t op,
                    const std::map<uint32_t, const sim::OpReport*>& ops) {
  auto it = ops.find(op);
  std::string label = "op " + std::to_string(op);
  if (it != ops.end() && !it->second->name.empty()) {
    label += " " + it->second->name;
  }
  return label;
}

bool OneMemberPerLine(std::string_view key) { return key == "comparison"; }

bool OneElementPerLine(std::string_view key) {
  return key == "supersteps" || key == "ops" || key == "slowest_tiles" ||
         key == "outputs";
}

// `j` as the value of `key` ("" for an array's element) on a line indented
// by `indent`; the top level's members each on their own line.
void Write(const Json& j, std::string_view key, const std::string& indent,
           bool top_level, std::string* out) {
  switch (j.type()) {
    case Json::value_t::object: {
      const bool lines = top_level || OneMemberPerLine(key);
      const std::string inner = lines ? indent + "  " : indent;
      *out += lines ? "{\n" : "{";
      bool first = true;
      for (const auto& [k, v] : j.items()) {
        if (!first) *out += lines ? ",\n" : ", ";
        first = false;
        if (lines) *out += inner;
        *out += JsonString(k) + ": ";
        Write(v, k, inner, false, out);
      }
      *out += lines ? "\n" + indent + "}" : "}";
      return;
    }
    case Json::value_t::array: {
      if (OneElementPerLine(key)) {
        *out += "[\n";
        for (size_t i = 0; i < j.size(); ++i) {
          *out += indent + "  ";
          Write(j[i], "", indent + "  ", false, out);
          *out += i + 1 < j.size() ? ",\n" : "\n";
        }
        *out += indent + "]";
        return;
      }
      *out += "[";
      for (size_t i = 0; i < j.size(); ++i) {
        if (i) *out += ", ";
        Write(j[i], "", indent, false, out);
      }
      *out += "]";
      return;
    }
    case Json::value_t::string:
      *out += JsonString(j.get<std::string>());
      return;
    case Json::value_t::number_float:
      *out += Format("%.9g", j.get<double>());
      return;
    default:  // integers, booleans, null
      *out += j.dump();
      return;
  }
}

// One comparison (of an output against the reference or a saved file).
Json ChecksJson(const std::vector<OutputCheck>& checks) {
  Json out = Json::array();
  for (const OutputCheck& c : checks) out.push_back(c);
  return out;
}

}  // namespace

void to_json(Json& j, const SuperstepReport& s) {
  j = Json::object();
  j["index"] = s.index;
  if (s.iteration >= 0) j["iteration"] = s.iteration;
  j["label"] = s.label;
  j["update_cycles"] = s.update_cycles;
  j["compute_cycles"] = s.compute_cycles;
  j["exchange_bound_cycles"] = s.exchange_bound_cycles;
  j["exchange_scheduled_cycles"] = s.exchange_scheduled_cycles;
  j["sync_cycles"] = s.sync_cycles;
  j["exchange_cycles"] = s.exchange_cycles;
  j["slowest_tile"] = s.slowest_tile;
  j["exchange_slowest_tile"] = s.exchange_slowest_tile;
  j["kernel_calls"] = s.kernel_calls;
  j["transfers"] = s.transfers;
  j["pieces"] = s.pieces;
  j["bytes_sent"] = s.bytes_sent;
  j["bytes_received"] = s.bytes_received;
}

void to_json(Json& j, const OpReport& o) {
  j = Json::object();
  j["op"] = o.op;
  j["name"] = o.name;
  j["kind"] = o.kind;
  j["compute_cycles"] = o.compute_cycles;
  j["exchange_cycles"] = o.exchange_cycles;
  j["update_cycles"] = o.update_cycles;
  j["kernel_calls"] = o.kernel_calls;
  j["transfers"] = o.transfers;
  j["pieces"] = o.pieces;
  j["bytes_sent"] = o.bytes_sent;
  j["bytes_received"] = o.bytes_received;
  j["macs"] = o.macs;
  j["slow_path_calls"] = o.slow_path_calls;
}

void to_json(Json& j, const TileReport& t) {
  j = Json::object();
  j["tile"] = t.tile;
  j["busy_cycles"] = t.busy_cycles;
  j["compute_cycles"] = t.compute_cycles;
  j["exchange_cycles"] = t.exchange_cycles;
  j["kernel_calls"] = t.kernel_calls;
  j["memory_bytes"] = t.memory_bytes;
}

void to_json(Json& j, const SlowPathReport& s) {
  j = Json::object();
  j["kernel"] = s.kernel;
  j["calls"] = s.calls;
  j["extra_cycles"] = s.extra_cycles;
}

void to_json(Json& j, const SimResult::RepeatReport& r) {
  j = Json::object();
  j["first"] = r.first;
  j["count"] = r.count;
  j["iteration_cycles"] = r.iteration_cycles;
}

void to_json(Json& j, const OutputCheck& c) {
  const Comparison& m = c.comparison;
  j = Json::object();
  j["value"] = c.value;
  j["name"] = c.name;
  j["type"] = c.type;
  j["pass"] = m.pass;
  j["elements"] = m.elements;
  j["scale"] = Number(m.scale);
  j["max_abs_err"] = Number(m.max_abs_err);
  j["max_rel_err"] = Number(m.max_rel_err);
  j["cosine"] = Number(m.cosine);
  j["mismatches"] = m.mismatches;
  j["nonfinite"] = m.nonfinite;
  j["worst_index"] = m.worst_index;
  j["worst_sim"] = Number(m.worst_sim);
  j["worst_ref"] = Number(m.worst_ref);
}

bool ExpectedPass(const SimulateDeviceReport& report) {
  for (const OutputCheck& c : report.expected) {
    if (!c.comparison.pass) return false;
  }
  return true;
}

Json ReportToJson(const SimResult& r, const SimulateDeviceReport& report) {
  Json o = Json::object();
  o["module"] = report.module_name;
  o["target"] = r.target;
  o["tiles"] = r.tiles;
  o["clock_hz"] = Number(r.clock_hz);
  o["total_cycles"] = r.total_cycles;
  o["seconds"] = Number(r.seconds);
  o["compute_cycles"] = r.compute_cycles;
  o["exchange_cycles"] = r.exchange_cycles;
  o["exchange_bound_cycles"] = r.exchange_bound_cycles;
  o["exchange_scheduled_cycles"] = r.exchange_scheduled_cycles;
  o["sync_cycles"] = r.sync_cycles;
  o["update_cycles"] = r.update_cycles;
  o["exchange_phases"] = r.exchange_phases;
  o["kernel_calls"] = r.kernel_calls;
  o["gemm_macs"] = r.gemm_macs;
  o["transfers"] = r.transfers;
  o["pieces"] = r.pieces;
  o["bytes_sent"] = r.bytes_sent;
  o["bytes_received"] = r.bytes_received;
  o["code_bytes_max"] = r.code_bytes_max;
  o["exchange_code_bytes_max"] = r.exchange_code_bytes_max;
  o["tensor_bytes"] = r.tensor_bytes;
  o["exchange_code_bytes"] = r.exchange_code_bytes;
  o["peak_memory_bytes"] = r.peak_memory_bytes;
  o["peak_memory_tile"] = r.peak_memory_tile;
  o["slow_path_calls"] = r.slow_path_calls;
  o["slow_paths"] = r.slow_paths;
  if (!r.repeats.empty()) o["repeats"] = r.repeats;
  o["supersteps"] = r.supersteps;
  o["ops"] = r.ops;
  o["slowest_tiles"] = r.slowest_tiles;
  if (!report.expect_dir.empty()) {
    // The tolerance is written here too: with --compare=false there is no
    // "comparison" to read it from.
    Json& e = o["expected"];
    e["dir"] = report.expect_dir;
    e["atol"] = Number(report.tolerance.atol);
    e["rtol"] = Number(report.tolerance.rtol);
    e["min_cosine"] = Number(report.tolerance.min_cosine);
    e["pass"] = ExpectedPass(report);
    e["outputs"] = ChecksJson(report.expected);
  }
  if (!report.compared) {
    o["comparison"] = nullptr;
    return o;
  }
  Json& c = o["comparison"];
  c["atol"] = Number(report.tolerance.atol);
  c["rtol"] = Number(report.tolerance.rtol);
  c["min_cosine"] = Number(report.tolerance.min_cosine);
  c["fp8_defaults"] = report.fp8;
  c["pass"] = report.pass;
  c["outputs"] = ChecksJson(report.checks);
  return o;
}

std::string ReportJsonText(const Json& report) {
  std::string out;
  Write(report, "", "", /*top_level=*/true, &out);
  return out + "\n";
}

std::string ReportJson(const SimResult& result,
                       const SimulateDeviceReport& report) {
  return ReportJsonText(ReportToJson(result, report));
}

// ---------------------------------------------------------------- trace

std::string TraceJson(const sim::SimResult& r) {
  // Chrome trace-event format (Perfetto and chrome://tracing open it):
  // times in microseconds at the target's clock.
  const double us_per_cycle = r.clock_hz > 0 ? 1e6 / r.clock_hz : 0;
  std::map<uint32_t, const sim::OpReport*> ops;
  for (const sim::OpReport& o : r.ops) ops[o.op] = &o;
  std::vector<std::string> events;
  auto meta = [&](int tid, const std::string& name, int sort) {
    events.push_back(
        "{\"ph\": \"M\", \"pid\": 1, \"tid\": " + std::to_string(tid) +
        ", \"name\": \"thread_name\", \"args\": {\"name\": " +
        JsonString(name) + "}}");
    events.push_back(
        "{\"ph\": \"M\", \"pid\": 1, \"tid\": " + std::to_string(tid) +
        ", \"name\": \"thread_sort_index\", \"args\": "
        "{\"sort_index\": " +
        std::to_string(sort) + "}}");
  };
  auto span = [&](int tid, const std::string& name, const std::string& cat,
                  int64_t start, int64_t cycles, const std::string& args) {
    if (cycles <= 0) return;
    events.push_back(
        "{\"ph\": \"X\", \"pid\": 1, \"tid\": " + std::to_string(tid) +
        ", \"name\": " + JsonString(name) + ", \"cat\": " + JsonString(cat) +
        ", \"ts\": " + Format("%.6f", start * us_per_cycle) +
        ", \"dur\": " + Format("%.6f", cycles * us_per_cycle) +
        ", \"args\": {\"cycles\": " + std::to_string(cycles) +
        (args.empty() ? "" : ", " + args) + "}}");
  };
  events.push_back(
      "{\"ph\": \"M\", \"pid\": 1, \"name\": \"process_name\", \"args\": "
      "{\"name\": " +
      JsonString("simulate-device " + r.target) + "}}");
  meta(1, "supersteps", 1);
  meta(2, "ops (slowest tile; exchange by bytes)", 2);
  for (size_t i = 0; i < r.slowest_tiles.size(); ++i) {
    meta(100 + r.slowest_tiles[i].tile,
         "tile " + std::to_string(r.slowest_tiles[i].tile), 3 + int(i));
  }
  for (const sim::SuperstepReport& s : r.supersteps) {
    const std::string step = "superstep " + std::to_string(s.index) +
                             (s.label.empty() ? "" : " " + s.label);
    const int64_t xstart = s.start_cycle + s.compute_cycles;
    span(1, step + " compute", "compute", s.start_cycle, s.compute_cycles,
         "\"slowest_tile\": " + std::to_string(s.slowest_tile));
    span(1, step + " exchange", "exchange", xstart, s.exchange_cycles,
         "\"bytes_received\": " + std::to_string(s.bytes_received) +
             ", \"slowest_tile\": " + std::to_string(s.exchange_slowest_tile));
    int64_t at = s.start_cycle;
    for (const sim::SuperstepReport::Span& sp : s.compute_spans) {
      span(2, OpLabel(sp.op, ops) + " " + sp.kernel, "compute", at, sp.cycles,
           "\"op\": " + std::to_string(sp.op) +
               ", \"calls\": " + std::to_string(sp.calls));
      at += sp.cycles;
    }
    at = xstart;
    for (const auto& [op, cycles] : s.exchange_split) {
      span(2, OpLabel(op, ops) + " exchange", "exchange", at, cycles,
           "\"op\": " + std::to_string(op));
      at += cycles;
    }
    for (const sim::TileReport& t : r.slowest_tiles) {
      const size_t i = static_cast<size_t>(s.index);
      span(100 + t.tile, step + " compute", "compute", s.start_cycle,
           t.step_compute_cycles[i], "");
      span(100 + t.tile, step + " exchange", "exchange", xstart,
           t.step_exchange_cycles[i], "");
    }
  }
  std::string out = "{\"displayTimeUnit\": \"ns\", \"traceEvents\": [\n";
  for (size_t i = 0; i < events.size(); ++i) {
    out += "  " + events[i] + (i + 1 < events.size() ? ",\n" : "\n");
  }
  return out + "]}\n";
}

}  // namespace tilec::sim
