// ReportFromJson (sim/report_json.h): simulate-device's --report=json read
// back into the structs report_json.cc writes it from, key for key.

#include <cmath>
#include <cstdint>
#include <limits>

#include "sim/report_json.h"

namespace tilec::sim {
namespace {

// Whether the integer `v` is a T.
template <typename T>
bool FitsIn(const Json& v) {
  if (v.is_number_unsigned()) {
    return v.get<uint64_t>() <=
           static_cast<uint64_t>(std::numeric_limits<T>::max());
  }
  return v.get<int64_t>() >=
             static_cast<int64_t>(std::numeric_limits<T>::min()) &&
         v.get<int64_t>() <=
             static_cast<int64_t>(std::numeric_limits<T>::max());
}

// Typed reads of one JSON object's members. The first problem is kept, and
// names the member by its path ("ops[3].compute_cycles"); later reads of a
// failed report leave their targets alone.
class Fields {
 public:
  Fields(const Json& object, std::string path, Status* status)
      : object_(object), path_(std::move(path)), status_(status) {}

  template <typename T>
  void Int(const char* key, T* out) {
    const Json* v = Member(key);
    if (v == nullptr) return;
    if (!v->is_number_integer()) return Fail(key, "is not an integer");
    if (!FitsIn<T>(*v)) return Fail(key, "is out of range");
    *out = v->get<T>();
  }
  // Non-finite numbers are the strings "nan", "inf" and "-inf" (JSON cannot
  // spell them).
  void Number(const char* key, double* out) {
    const Json* v = Member(key);
    if (v == nullptr) return;
    if (v->is_number()) {
      *out = v->get<double>();
    } else if (*v == "nan") {
      *out = std::numeric_limits<double>::quiet_NaN();
    } else if (*v == "inf") {
      *out = std::numeric_limits<double>::infinity();
    } else if (*v == "-inf") {
      *out = -std::numeric_limits<double>::infinity();
    } else {
      Fail(key, "is not a number");
    }
  }
  void Number(const char* key, float* out) {
    double v = *out;
    Number(key, &v);
    if (std::isfinite(v) && std::abs(v) > std::numeric_limits<float>::max()) {
      return Fail(key, "is out of range");
    }
    *out = static_cast<float>(v);
  }
  void Bool(const char* key, bool* out) {
    const Json* v = Member(key);
    if (v == nullptr) return;
    if (!v->is_boolean()) return Fail(key, "is not true or false");
    *out = v->get<bool>();
  }
  void String(const char* key, std::string* out) {
    const Json* v = Member(key);
    if (v == nullptr) return;
    if (!v->is_string()) return Fail(key, "is not a string");
    *out = v->get<std::string>();
  }
  // An array of objects, each read by read(Fields&, T*).
  template <typename T, typename Read>
  void Objects(const char* key, std::vector<T>* out, Read read) {
    const Json* v = Member(key);
    if (v == nullptr) return;
    if (!v->is_array()) return Fail(key, "is not an array");
    out->clear();
    for (size_t i = 0; i < v->size() && status_->ok(); ++i) {
      const std::string path = Path(key) + "[" + std::to_string(i) + "]";
      if (!(*v)[i].is_object()) return Set(path + " is not an object");
      Fields element((*v)[i], path, status_);
      read(element, &out->emplace_back());
    }
  }
  void Ints(const char* key, std::vector<int64_t>* out) {
    const Json* v = Member(key);
    if (v == nullptr) return;
    if (!v->is_array()) return Fail(key, "is not an array");
    out->clear();
    for (const Json& e : *v) {
      if (!e.is_number_integer() || !FitsIn<int64_t>(e)) {
        return Fail(key, "is not an array of integers");
      }
      out->push_back(e.get<int64_t>());
    }
  }
  // An optional member: absent and null are both "not there".
  bool Has(const char* key) const {
    auto it = object_.find(key);
    return it != object_.end() && !it->is_null();
  }
  // The object member `key`, or an empty object after a failure.
  Fields Object(const char* key) {
    static const Json kEmpty = Json::object();
    const Json* v = Member(key);
    if (v != nullptr && !v->is_object()) {
      Fail(key, "is not an object");
      v = nullptr;
    }
    return Fields(v != nullptr ? *v : kEmpty, Path(key), status_);
  }

 private:
  // Null once a problem is known (the first one is the one reported).
  const Json* Member(const char* key) {
    if (!status_->ok()) return nullptr;
    auto it = object_.find(key);
    if (it == object_.end()) {
      Fail(key, "is missing");
      return nullptr;
    }
    return &*it;
  }
  std::string Path(const char* key) const {
    return path_.empty() ? key : path_ + "." + key;
  }
  void Set(const std::string& message) {
    if (status_->ok()) *status_ = Status::BadInput(message);
  }
  void Fail(const char* key, const char* problem) {
    Set("key " + Path(key) + " " + problem +
        " (not a simulate-device --report=json file?)");
  }

  const Json& object_;
  std::string path_;
  Status* status_;
};

void ReadSuperstep(Fields& f, SuperstepReport* s) {
  f.Int("index", &s->index);
  if (f.Has("iteration")) f.Int("iteration", &s->iteration);
  f.String("label", &s->label);
  f.Int("update_cycles", &s->update_cycles);
  f.Int("compute_cycles", &s->compute_cycles);
  f.Int("exchange_bound_cycles", &s->exchange_bound_cycles);
  f.Int("exchange_scheduled_cycles", &s->exchange_scheduled_cycles);
  f.Int("sync_cycles", &s->sync_cycles);
  f.Int("exchange_cycles", &s->exchange_cycles);
  f.Int("slowest_tile", &s->slowest_tile);
  f.Int("exchange_slowest_tile", &s->exchange_slowest_tile);
  f.Int("kernel_calls", &s->kernel_calls);
  f.Int("transfers", &s->transfers);
  f.Int("pieces", &s->pieces);
  f.Int("bytes_sent", &s->bytes_sent);
  f.Int("bytes_received", &s->bytes_received);
}

void ReadOp(Fields& f, OpReport* o) {
  f.Int("op", &o->op);
  f.String("name", &o->name);
  f.String("kind", &o->kind);
  f.Int("compute_cycles", &o->compute_cycles);
  f.Int("exchange_cycles", &o->exchange_cycles);
  f.Int("update_cycles", &o->update_cycles);
  f.Int("kernel_calls", &o->kernel_calls);
  f.Int("transfers", &o->transfers);
  f.Int("pieces", &o->pieces);
  f.Int("bytes_sent", &o->bytes_sent);
  f.Int("bytes_received", &o->bytes_received);
  f.Int("macs", &o->macs);
  f.Int("slow_path_calls", &o->slow_path_calls);
}

void ReadTile(Fields& f, TileReport* t) {
  f.Int("tile", &t->tile);
  f.Int("busy_cycles", &t->busy_cycles);
  f.Int("compute_cycles", &t->compute_cycles);
  f.Int("exchange_cycles", &t->exchange_cycles);
  f.Int("kernel_calls", &t->kernel_calls);
  f.Int("memory_bytes", &t->memory_bytes);
}

void ReadSlowPath(Fields& f, SlowPathReport* s) {
  f.String("kernel", &s->kernel);
  f.Int("calls", &s->calls);
  f.Int("extra_cycles", &s->extra_cycles);
}

void ReadRepeat(Fields& f, SimResult::RepeatReport* r) {
  f.Int("first", &r->first);
  f.Int("count", &r->count);
  f.Ints("iteration_cycles", &r->iteration_cycles);
}

void ReadCheck(Fields& f, OutputCheck* c) {
  Comparison& m = c->comparison;
  f.Int("value", &c->value);
  f.String("name", &c->name);
  f.String("type", &c->type);
  f.Bool("pass", &m.pass);
  f.Int("elements", &m.elements);
  f.Number("scale", &m.scale);
  f.Number("max_abs_err", &m.max_abs_err);
  f.Number("max_rel_err", &m.max_rel_err);
  f.Number("cosine", &m.cosine);
  f.Int("mismatches", &m.mismatches);
  f.Int("nonfinite", &m.nonfinite);
  f.Int("worst_index", &m.worst_index);
  f.Number("worst_sim", &m.worst_sim);
  f.Number("worst_ref", &m.worst_ref);
}

void ReadTolerance(Fields& f, Tolerance* t) {
  f.Number("atol", &t->atol);
  f.Number("rtol", &t->rtol);
  f.Number("min_cosine", &t->min_cosine);
}

void ReadResult(Fields& f, SimResult* r) {
  f.String("target", &r->target);
  f.Int("tiles", &r->tiles);
  f.Number("clock_hz", &r->clock_hz);
  f.Int("total_cycles", &r->total_cycles);
  f.Number("seconds", &r->seconds);
  f.Int("compute_cycles", &r->compute_cycles);
  f.Int("exchange_cycles", &r->exchange_cycles);
  f.Int("exchange_bound_cycles", &r->exchange_bound_cycles);
  f.Int("exchange_scheduled_cycles", &r->exchange_scheduled_cycles);
  f.Int("sync_cycles", &r->sync_cycles);
  f.Int("update_cycles", &r->update_cycles);
  f.Int("exchange_phases", &r->exchange_phases);
  f.Int("kernel_calls", &r->kernel_calls);
  f.Int("gemm_macs", &r->gemm_macs);
  f.Int("transfers", &r->transfers);
  f.Int("pieces", &r->pieces);
  f.Int("bytes_sent", &r->bytes_sent);
  f.Int("bytes_received", &r->bytes_received);
  f.Int("code_bytes_max", &r->code_bytes_max);
  f.Int("exchange_code_bytes_max", &r->exchange_code_bytes_max);
  f.Int("tensor_bytes", &r->tensor_bytes);
  f.Ints("exchange_code_bytes", &r->exchange_code_bytes);
  f.Int("peak_memory_bytes", &r->peak_memory_bytes);
  f.Int("peak_memory_tile", &r->peak_memory_tile);
  f.Int("slow_path_calls", &r->slow_path_calls);
  f.Objects("slow_paths", &r->slow_paths, ReadSlowPath);
  if (f.Has("repeats")) f.Objects("repeats", &r->repeats, ReadRepeat);
  f.Objects("supersteps", &r->supersteps, ReadSuperstep);
  f.Objects("ops", &r->ops, ReadOp);
  f.Objects("slowest_tiles", &r->slowest_tiles, ReadTile);
}

// "expected" (--expect) and "comparison" (the reference's), each absent or
// null when simulate-device did not run it. Both carry the one tolerance.
void ReadChecks(Fields& f, Status* status, SimulateDeviceReport* d) {
  if (f.Has("expected")) {
    Fields e = f.Object("expected");
    e.String("dir", &d->expect_dir);
    ReadTolerance(e, &d->tolerance);
    bool pass = false;
    e.Bool("pass", &pass);  // what ExpectedPass tells from the outputs
    e.Objects("outputs", &d->expected, ReadCheck);
    if (status->ok() && d->expect_dir.empty()) {
      *status = Status::BadInput("key expected.dir is empty");
    }
  }
  if (f.Has("comparison")) {
    Fields c = f.Object("comparison");
    d->compared = true;
    ReadTolerance(c, &d->tolerance);
    c.Bool("fp8_defaults", &d->fp8);
    c.Bool("pass", &d->pass);
    c.Objects("outputs", &d->checks, ReadCheck);
  }
}

// nlohmann's "[json.exception.parse_error.101] parse error at line 3,
// column 4: syntax error ...; last read: '...'; expected ..." as "line 3,
// column 4: syntax error ...; expected ...": what was last read can be
// many lines (comments included). Other errors lose their "[json...] " too.
std::string ParseErrorText(std::string what) {
  const size_t id_end = what.find("] ");
  if (what.rfind("[json.exception.", 0) == 0 && id_end != std::string::npos) {
    what.erase(0, id_end + 2);
  }
  const std::string at = "parse error at ";
  if (what.rfind(at, 0) == 0) what.erase(0, at.size());
  const size_t read = what.find("; last read: '");
  if (read != std::string::npos) {
    const size_t expected = what.rfind("'; expected ");
    what =
        what.substr(0, read) + (expected != std::string::npos && expected > read
                                    ? what.substr(expected + 1)
                                    : "");
  }
  return what;
}

}  // namespace

StatusOr<SimulationReport> ReportFromJson(const std::string& text) {
  Json json;
  try {
    // Comments are allowed: the FlexBuffers parser inspect-program used
    // before skipped them.
    json = Json::parse(text, /*cb=*/nullptr, /*allow_exceptions=*/true,
                       /*ignore_comments=*/true);
  } catch (const Json::exception& e) {
    // A syntax error, or a number too large for a double (out_of_range).
    return Status::BadInput("not JSON: " + ParseErrorText(e.what()));
  }
  if (!json.is_object()) {
    return Status::BadInput(
        "not a simulate-device --report=json file: the top level is not an "
        "object");
  }
  Status status;
  Fields f(json, "", &status);
  SimulationReport report;
  f.String("module", &report.device.module_name);
  ReadResult(f, &report.result);
  ReadChecks(f, &status, &report.device);
  if (!status.ok()) return status;
  return report;
}

}  // namespace tilec::sim
