#include "passes/inspect/simulation_report.h"

#include <flatbuffers/flexbuffers.h>
#include <flatbuffers/idl.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <map>

namespace tilec::inspect {
namespace {

// Typed reads of one JSON object; the first problem is kept and names the
// field by its path ("ops[3].compute_cycles").
class Fields {
 public:
  Fields(flexbuffers::Map map, std::string path, Status* status)
      : map_(map), path_(std::move(path)), status_(status) {}

  int64_t Int(const char* key) {
    flexbuffers::Reference r = map_[key];
    if (!r.IsIntOrUint()) return Fail(key, "an integer"), 0;
    return r.AsInt64();
  }
  // simulate-device writes non-finite numbers as "nan", "inf" and "-inf".
  double Number(const char* key) {
    flexbuffers::Reference r = map_[key];
    if (r.IsNumeric()) return r.AsDouble();
    if (r.IsString()) {
      const std::string s = r.AsString().str();
      if (s == "nan") return std::numeric_limits<double>::quiet_NaN();
      if (s == "inf") return std::numeric_limits<double>::infinity();
      if (s == "-inf") return -std::numeric_limits<double>::infinity();
    }
    return Fail(key, "a number"), 0;
  }
  bool Bool(const char* key) {
    flexbuffers::Reference r = map_[key];
    if (!r.IsBool()) return Fail(key, "true or false"), false;
    return r.AsBool();
  }
  std::string String(const char* key) {
    flexbuffers::Reference r = map_[key];
    if (!r.IsString()) return Fail(key, "a string"), "";
    return r.AsString().str();
  }
  // Objects of an array field, each with its path.
  std::vector<Fields> Objects(const char* key) {
    std::vector<Fields> out;
    flexbuffers::Reference r = map_[key];
    if (!r.IsUntypedVector()) {
      // An empty array may come back as a typed vector.
      if (!(r.IsAnyVector() && r.AsTypedVector().size() == 0)) {
        Fail(key, "an array of objects");
      }
      return out;
    }
    flexbuffers::Vector v = r.AsVector();
    for (size_t i = 0; i < v.size(); ++i) {
      const std::string path = Path(key) + "[" + std::to_string(i) + "]";
      if (!v[i].IsMap()) {
        Set(path + " is not an object");
        return {};
      }
      out.emplace_back(v[i].AsMap(), path, status_);
    }
    return out;
  }
  bool IsNull(const char* key) { return map_[key].IsNull(); }
  Fields Object(const char* key) {
    flexbuffers::Reference r = map_[key];
    if (!r.IsMap()) Fail(key, "an object");
    return Fields(r.IsMap() ? r.AsMap() : flexbuffers::Map::EmptyMap(),
                  Path(key), status_);
  }

 private:
  std::string Path(const char* key) const {
    return path_.empty() ? key : path_ + "." + key;
  }
  void Set(const std::string& message) {
    if (status_->ok()) *status_ = Status::BadInput(message);
  }
  void Fail(const char* key, const char* what) {
    Set("field " + Path(key) + " is missing or not " + what +
        " (not a simulate-device --report=json file?)");
  }

  flexbuffers::Map map_;
  std::string path_;
  Status* status_;
};

// The per-output checks of the reference's and the expected comparison
// (simulate-device writes both with one function).
std::vector<SimulationReport::Output> ReadOutputs(Fields& c) {
  std::vector<SimulationReport::Output> outputs;
  for (Fields& o : c.Objects("outputs")) {
    SimulationReport::Output out;
    out.value = static_cast<uint32_t>(o.Int("value"));
    out.name = o.String("name");
    out.type = o.String("type");
    out.pass = o.Bool("pass");
    out.elements = o.Int("elements");
    out.mismatches = o.Int("mismatches");
    out.nonfinite = o.Int("nonfinite");
    out.scale = o.Number("scale");
    out.max_abs_err = o.Number("max_abs_err");
    out.max_rel_err = o.Number("max_rel_err");
    out.cosine = o.Number("cosine");
    outputs.push_back(std::move(out));
  }
  return outputs;
}

void ReadComparison(Fields& c, SimulationReport* r) {
  r->compared = true;
  r->atol = c.Number("atol");
  r->rtol = c.Number("rtol");
  r->min_cosine = c.Number("min_cosine");
  r->fp8_defaults = c.Bool("fp8_defaults");
  r->pass = c.Bool("pass");
  r->outputs = ReadOutputs(c);
}

void ReadExpected(Fields& e, SimulationReport* r) {
  r->has_expected = true;
  SimulationReport::Expected& x = r->expected;
  x.dir = e.String("dir");
  x.atol = e.Number("atol");
  x.rtol = e.Number("rtol");
  x.min_cosine = e.Number("min_cosine");
  x.pass = e.Bool("pass");
  x.outputs = ReadOutputs(e);
}

// FlatBuffers' "24: 16: error: expecting: ..." as "line 24, column 16:
// expecting: ...".
std::string ParserError(std::string error) {
  while (!error.empty() && error.back() == '\n') error.pop_back();
  int line = 0, column = 0, used = 0;
  if (std::sscanf(error.c_str(), "%d: %d: error: %n", &line, &column, &used) ==
          2 &&
      used > 0) {
    return "line " + std::to_string(line) + ", column " +
           std::to_string(column) + ": " + error.substr(used);
  }
  return error;
}

std::string Mismatch(const std::string& what, int64_t report, int64_t program) {
  return what + " is " + std::to_string(report) + " in the report but " +
         std::to_string(program) +
         " for this program: a report of another program (or of an older "
         "build of it)";
}

}  // namespace

Status ParseSimulationReport(const std::string& json, SimulationReport* r) {
  flatbuffers::IDLOptions options;
  options.strict_json = true;
  flatbuffers::Parser parser(options);
  flexbuffers::Builder builder;
  if (!parser.ParseFlexBuffer(json.c_str(), nullptr, &builder)) {
    return Status::BadInput("not JSON: " + ParserError(parser.error_));
  }
  flexbuffers::Reference root = flexbuffers::GetRoot(builder.GetBuffer());
  if (!root.IsMap()) {
    return Status::BadInput(
        "not a simulate-device --report=json file: the "
        "top level is not an object");
  }
  Status status;
  Fields f(root.AsMap(), "", &status);
  *r = SimulationReport();
  r->module = f.String("module");
  r->target = f.String("target");
  r->tiles = f.Int("tiles");
  r->total_cycles = f.Int("total_cycles");
  r->compute_cycles = f.Int("compute_cycles");
  r->exchange_cycles = f.Int("exchange_cycles");
  r->supersteps = static_cast<int64_t>(f.Objects("supersteps").size());
  for (Fields& o : f.Objects("ops")) {
    SimulationReport::Op op;
    op.op = static_cast<uint32_t>(o.Int("op"));
    op.compute_cycles = o.Int("compute_cycles");
    op.exchange_cycles = o.Int("exchange_cycles");
    r->ops.push_back(op);
  }
  // Absent (or null) without --expect.
  if (!f.IsNull("expected")) {
    Fields e = f.Object("expected");
    if (status.ok()) ReadExpected(e, r);
  }
  if (!f.IsNull("comparison")) {
    Fields c = f.Object("comparison");
    if (status.ok()) ReadComparison(c, r);
  }
  return status;
}

Status CheckReportMatches(const SimulationReport& r,
                          const sim::SimResult& timing) {
  if (r.tiles != timing.tiles) {
    return Status::BadInput(Mismatch("the tile count", r.tiles, timing.tiles));
  }
  if (r.supersteps != static_cast<int64_t>(timing.supersteps.size())) {
    return Status::BadInput(
        Mismatch("the number of supersteps", r.supersteps,
                 static_cast<int64_t>(timing.supersteps.size())));
  }
  if (r.total_cycles != timing.total_cycles) {
    return Status::BadInput(
        Mismatch("total_cycles", r.total_cycles, timing.total_cycles));
  }
  if (r.compute_cycles != timing.compute_cycles) {
    return Status::BadInput(
        Mismatch("compute_cycles", r.compute_cycles, timing.compute_cycles));
  }
  if (r.exchange_cycles != timing.exchange_cycles) {
    return Status::BadInput(
        Mismatch("exchange_cycles", r.exchange_cycles, timing.exchange_cycles));
  }
  std::map<uint32_t, const sim::OpReport*> ops;
  for (const sim::OpReport& o : timing.ops) ops[o.op] = &o;
  if (r.ops.size() != ops.size()) {
    return Status::BadInput(Mismatch("the number of ops",
                                     static_cast<int64_t>(r.ops.size()),
                                     static_cast<int64_t>(ops.size())));
  }
  for (const SimulationReport::Op& o : r.ops) {
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

}  // namespace tilec::inspect
