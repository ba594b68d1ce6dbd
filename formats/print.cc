#include "formats/print.h"

#include <cctype>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include "formats/repeat.h"
#include "formats/target.h"

namespace tilec::ir {
namespace {

std::string SnakeCase(const char* name) {
  std::string out;
  for (const char* p = name; *p; ++p) {
    if (std::isupper(static_cast<unsigned char>(*p))) {
      if (!out.empty()) out += '_';
      out += static_cast<char>(std::tolower(static_cast<unsigned char>(*p)));
    } else {
      out += *p;
    }
  }
  return out;
}

// A name from an input file (an ONNX node, a target) as one line's word:
// a backslash doubled, '\n' as \n, any other ASCII control byte (an escape
// sequence, '\r') as \xNN, so no name can end or repaint a line. UTF-8
// passes as it is.
std::string Escaped(const std::string& text, bool quote = false) {
  std::string out;
  for (unsigned char c : text) {
    if (c == '\\' || (quote && c == '"')) {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c < 0x20 || c == 0x7f) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

std::string Quoted(const std::string& text) {
  return "\"" + Escaped(text, /*quote=*/true) + "\"";
}

std::string IdList(const std::vector<uint32_t>& ids, const char* prefix) {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) out += ", ";
    out += prefix + std::to_string(ids[i]);
  }
  return out;
}

std::string InitText(const fb::ValueT& value) {
  if (value.sidecar) {
    const fb::SidecarT& s = *value.sidecar;
    char buf[64];
    std::snprintf(buf, sizeof buf, "%016" PRIx64, s.fnv1a64);
    return " data=" + Quoted(s.path) + "@" + std::to_string(s.offset) + "+" +
           std::to_string(s.bytes) + " fnv1a64=" + buf;
  }
  if (!value.init) return "";
  const fb::WeightInitT& init = *value.init;
  std::string out = " init=";
  switch (init.distribution) {
    case fb::Distribution::Gaussian:
      out += "gaussian(mean=" + NumberText(init.mean) +
             ", stddev=" + NumberText(init.stddev) + ")";
      break;
    case fb::Distribution::Constant:
      out += "constant(" + NumberText(init.mean) + ")";
      break;
    case fb::Distribution::Uniform:
      out += "uniform(mean=" + NumberText(init.mean) +
             ", halfwidth=" + NumberText(init.stddev) + ")";
      break;
  }
  return out + " seed=" + std::to_string(init.seed);
}

std::string EstimateText(const fb::EstimateT& e) {
  return "est cycles=" + std::to_string(e.cycles) +
         " compute=" + std::to_string(e.compute_cycles) +
         " exchange=" + std::to_string(e.exchange_cycles) +
         " phases=" + std::to_string(e.exchange_phases) +
         " xbytes=" + std::to_string(e.exchange_bytes) +
         " peak=" + std::to_string(e.peak_bytes);
}

std::string FusedStepText(const fb::FusedStepT& step) {
  std::string out = SnakeCase(fb::EnumNameFusedStepKind(step.kind));
  switch (step.kind) {
    case fb::FusedStepKind::Gelu:
      out += "." + SnakeCase(fb::EnumNameGeluForm(step.gelu));
      break;
    case fb::FusedStepKind::Cast:
      out += ":" + DTypeText(step.dtype, step.fp8_scale_exp);
      break;
    case fb::FusedStepKind::Scale:
      out += "(" + NumberText(step.scale) + ")";
      break;
    case fb::FusedStepKind::Unary:
      out += "." + SnakeCase(fb::EnumNameElementwiseFn(step.fn));
      break;
    case fb::FusedStepKind::Binary:
      out += "." + SnakeCase(fb::EnumNameElementwiseFn(step.fn));
      if (step.broadcast == fb::Broadcast::Row) out += ".row";
      if (step.broadcast == fb::Broadcast::Column) out += ".column";
      if (step.operand_first) out += ".operand_first";
      break;
    default:
      break;
  }
  if (step.operand >= 0) out += "[" + std::to_string(step.operand) + "]";
  return out;
}

std::string ReductionText(const fb::ReductionT& r) {
  std::string out = "reduce partials=" + std::to_string(r.partials);
  out += r.direct_seed_read ? " seed=in-place" : " seed=copy";
  out += r.direct_final_write ? " final=direct" : " final=copy";
  for (const auto& s : r.scratch) {
    out += " " + SnakeCase(fb::EnumNameScratchRole(s->role)) + ":" +
           DTypeText(s->dtype) + "x" + std::to_string(s->bytes_per_tile) + "B" +
           (s->elided ? "(elided)" : "");
  }
  out += " stages=" + std::to_string(r.stages.size());
  return out;
}

const char* KindOf(fb::ValueRole role) {
  switch (role) {
    case fb::ValueRole::Input:
      return "input";
    case fb::ValueRole::Weight:
      return "weight";
    case fb::ValueRole::Activation:
      return "activation";
    case fb::ValueRole::Output:
      return "output";
  }
  return "?";
}

// "repeat 0: ops 3..30 x27 carried %2 -> %29, weights %4 %5 ..., 416 iteration weights"
void PrintRepeats(const fb::ModuleT& m, std::string* out) {
  StatusOr<std::vector<RepeatBody>> bodies = RepeatBodies(m);
  if (!bodies.ok()) return;  // only verified modules are printed
  for (size_t k = 0; k < bodies->size(); ++k) {
    const RepeatBody& b = (*bodies)[k];
    const fb::RepeatT& r = *b.repeat;
    *out += "repeat " + std::to_string(k) + ": ops " +
            std::to_string(m.ops[b.begin]->id) + ".." +
            std::to_string(m.ops[b.end - 1]->id) + " x" +
            std::to_string(r.count) + " carried %" +
            std::to_string(r.carried_in) + " -> %" +
            std::to_string(r.carried_out) + ", weights " +
            IdList(r.weights, "%") + ", " +
            std::to_string(r.iteration_weights.size()) +
            " iteration weights\n";
  }
}

// "  repeat supersteps 4..70 x27: 23552 renames per iteration after the first"
void PrintSuperstepRepeats(const fb::DeviceProgramT& program,
                           const PrintOptions& opts, std::string* out) {
  for (const auto& r : program.repeats) {
    size_t renames = 0;
    for (const auto& it : r->iterations) renames += it->renames.size();
    *out += "  repeat supersteps " + std::to_string(r->first) + ".." +
            std::to_string(r->first + r->count - 1) + " x" +
            std::to_string(r->iterations.size()) + ": " +
            std::to_string(renames) + " renames\n";
    if (!opts.program_detail) continue;
    for (size_t i = 0; i < r->iterations.size(); ++i) {
      std::string pairs;
      for (const auto& p : r->iterations[i]->renames) {
        pairs += " #" + std::to_string(p.from()) + "->#" + std::to_string(p.to());
      }
      *out += "    iteration " + std::to_string(i) + ":" + pairs + "\n";
    }
    std::string updates;
    for (const fb::IterationUpdate& u : r->updates) {
      updates += " " + std::to_string(u.superstep()) + "/" +
                 std::to_string(u.tile()) + ":" + std::to_string(u.words()) +
                 (u.method() == fb::AddressUpdate::BaseRegister ? "b" : "p");
    }
    if (updates.empty()) continue;
    *out += "    updates (superstep/tile:words, b base register, p patch):" +
            updates + "\n";
  }
}

// "  code tile 3: runtime 4096 program 104 exchange 24 reserved 16384"
void PrintCode(const fb::DeviceProgramT& program, std::string* out) {
  for (const fb::TileCode& c : program.code) {
    *out += "  code tile " + std::to_string(c.tile()) + ": runtime " +
            std::to_string(c.runtime_bytes()) + " program " +
            std::to_string(c.program_bytes()) + " exchange " +
            std::to_string(c.exchange_bytes()) + " reserved " +
            std::to_string(c.reserved_bytes()) + "\n";
  }
}

// "    schedule length 182 bound 128" and per tile its instructions in
// issue order, "send 0@2" (packet 0 takes effect at cycle 2), "select
// 0.1@2" (packet 0's destination 1), "pointer 0.1@54".
void PrintSchedule(const fb::ExchangeScheduleT& schedule, std::string* out) {
  *out += "    schedule length " + std::to_string(schedule.length) + " bound " +
          std::to_string(schedule.bound) + ", packet starts";
  for (uint32_t t : schedule.starts) *out += " " + std::to_string(t);
  *out += "\n";
  for (const auto& tc : schedule.tiles) {
    *out += "      tile " + std::to_string(tc->tile) + ":";
    for (const fb::ControlInstruction& ins : tc->instructions) {
      const std::string packet = std::to_string(ins.packet());
      switch (ins.kind()) {
        case fb::ControlKind::Send:
          *out += " send " + packet;
          break;
        case fb::ControlKind::Select:
          *out += " select " + packet + "." + std::to_string(ins.destination());
          break;
        case fb::ControlKind::Pointer:
          *out += " pointer " + packet + "." + std::to_string(ins.destination());
          break;
      }
      *out += "@" + std::to_string(ins.cycle());
    }
    *out += "\n";
  }
}

void PrintProgram(const fb::DeviceProgramT& program, const PrintOptions& opts,
                  std::string* out) {
  int64_t buffer_bytes = 0;
  for (const auto& b : program.buffers) buffer_bytes += b->bytes;
  *out += "program: buffers=" + std::to_string(program.buffers.size()) +
          " bytes=" + std::to_string(buffer_bytes) +
          " supersteps=" + std::to_string(program.supersteps.size()) +
          " inputs=" + std::to_string(program.inputs.size()) +
          " outputs=" + std::to_string(program.outputs.size()) + "\n";
  PrintSuperstepRepeats(program, opts, out);
  if (opts.program_detail) {
    for (const auto& b : program.buffers) {
      *out += "  buffer #" + std::to_string(b->id) + " tile " +
              std::to_string(b->tile) + " @" + std::to_string(b->offset) +
              "+" + std::to_string(b->bytes) + " " +
              DTypeText(b->dtype, b->fp8_scale_exp) +
              (b->value >= 0 ? " %" + std::to_string(b->value) : "") +
              (b->op >= 0 ? " op(" + std::to_string(b->op) + ")" : "") + " " +
              Quoted(b->name) + "\n";
    }
    PrintCode(program, out);
  }
  for (size_t i = 0; i < program.supersteps.size(); ++i) {
    const fb::SuperstepT& step = *program.supersteps[i];
    int64_t bytes = 0, pieces = 0;
    for (const auto& t : step.exchange) {
      bytes += int64_t{t->bytes} * t->rows *
               static_cast<int64_t>(t->destinations.size());
      pieces += t->rows;
    }
    // Pieces only where strided transfers make them differ.
    const bool strided = pieces != static_cast<int64_t>(step.exchange.size());
    *out += "  superstep " + std::to_string(i) + " " + Quoted(step.label) +
            ": compute=" + std::to_string(step.compute.size()) +
            " transfers=" + std::to_string(step.exchange.size()) +
            (strided ? " pieces=" + std::to_string(pieces) : "") +
            " bytes=" + std::to_string(bytes) + "\n";
    if (!opts.program_detail) continue;
    for (const auto& c : step.compute) {
      std::string args;
      for (const auto& a : c->args) {
        args += " #" + std::to_string(a->buffer) + "@" +
                std::to_string(a->offset) + "+" + std::to_string(a->bytes);
      }
      std::string params;
      for (int64_t p : c->params) params += " " + std::to_string(p);
      for (float p : c->fparams) params += " " + NumberText(p);
      *out += "    compute tile " + std::to_string(c->tile) + " " + c->kernel +
              " op(" + std::to_string(c->op) + ")" + args + " params" +
              params + "\n";
    }
    for (const auto& t : step.exchange) {
      std::string dst;
      for (const auto& d : t->destinations) {
        dst += " " + std::to_string(d->tile) + ":#" + std::to_string(d->buffer) +
               "@" + std::to_string(d->offset);
      }
      // A strided transfer: rows pieces of +bytes, the pitches apart.
      const std::string strides =
          t->rows == 1 ? ""
                       : " rows=" + std::to_string(t->rows) +
                             " src_pitch=" + std::to_string(t->src_pitch) +
                             " dst_pitch=" + std::to_string(t->dst_pitch);
      *out += "    transfer op(" + std::to_string(t->op) + ") " +
              std::to_string(t->src_tile) + ":#" +
              std::to_string(t->src_buffer) + "@" +
              std::to_string(t->src_offset) + "+" + std::to_string(t->bytes) +
              " " + DTypeText(t->dtype) + strides + " ->" + dst + "\n";
    }
    if (step.schedule) PrintSchedule(*step.schedule, out);
  }
}

}  // namespace

std::string NumberText(double value) {
  char buf[40];
  for (int precision = 6; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, value);
    if (std::strtod(buf, nullptr) == value) break;
  }
  return buf;
}

std::string NumberText(float value) {
  char buf[40];
  for (int precision = 6; precision <= 9; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, value);
    if (std::strtof(buf, nullptr) == value) break;
  }
  return buf;
}

std::string DTypeText(fb::DType dtype, int fp8_scale_exp) {
  std::string out;
  switch (dtype) {
    case fb::DType::F32:
      return "f32";
    case fb::DType::F16:
      return "f16";
    case fb::DType::BF16:
      return "bf16";
    case fb::DType::FP8E4M3:
      out = "fp8e4m3";
      break;
    case fb::DType::FP8E5M2:
      out = "fp8e5m2";
      break;
  }
  if (fp8_scale_exp != 0) out += "*2^" + std::to_string(fp8_scale_exp);
  return out;
}

std::string ShapeText(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) out += ",";
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

std::string RecipeText(const fb::RecipeT& r) {
  std::string out = SnakeCase(fb::EnumNameRecipeKind(r.kind));
  if (r.kind == fb::RecipeKind::Gemm) {
    out += "(m" + std::to_string(r.m_split) + " k" + std::to_string(r.k_split) +
           " n" + std::to_string(r.n_split) + " block " +
           std::to_string(r.block_m) + "x" + std::to_string(r.block_k) + "x" +
           std::to_string(r.block_n) + " " +
           SnakeCase(fb::EnumNameStaging(r.staging));
    if (r.staging == fb::Staging::Batched) {
      out += "(" + std::to_string(r.batch_chunks) + " x k" +
             std::to_string(r.chunk_k) + ")";
    } else if (r.staging == fb::Staging::Streamed) {
      out += "(k" + std::to_string(r.chunk_k) + ")";
    }
    if (r.steps > 1) {
      out += r.interleaved_steps
                 ? " steps interleaved(" + std::to_string(r.steps) + ")"
                 : " steps " + std::to_string(r.steps);
    }
    out += ")";
  } else if (r.kind == fb::RecipeKind::Attention) {
    out += "(m" + std::to_string(r.m_split) + " n" + std::to_string(r.n_split) +
           " block " + std::to_string(r.block_m) + "x" +
           std::to_string(r.block_k) + "x" + std::to_string(r.block_n) + ")";
  }
  if (r.layout) out += " " + OwnershipText(*r.layout);
  if (r.unicast) out += " unicast";
  if (!r.note.empty()) out += " " + Quoted(r.note);
  return out;
}

std::string OpKindText(fb::OpKind kind) {
  return SnakeCase(fb::EnumNameOpKind(kind));
}

std::string DecisionText(const fb::DecisionT& d) {
  std::string out = SnakeCase(fb::EnumNameOutcome(d.outcome));
  if (d.limit_index > 0) out += " #" + std::to_string(d.limit_index);
  out += " (" + IdList(d.ops, "") + ") " + Quoted(d.action);
  if (!d.reason.empty()) out += " reason=" + Quoted(d.reason);
  out += " cycles " + std::to_string(d.cycles_before) + " -> " +
         std::to_string(d.cycles_after);
  out += " bytes " + std::to_string(d.bytes_before) + " -> " +
         std::to_string(d.bytes_after);
  return out;
}

std::string ModelText(const fb::ModelT& md) {
  return Escaped(md.preset) + " part=" + Escaped(md.part) +
         " layers=" + std::to_string(md.layers) +
         " batch=" + std::to_string(md.batch) +
         " tokens=" + std::to_string(md.tokens) +
         " width=" + std::to_string(md.width) +
         " mlp=" + std::to_string(md.mlp_width) +
         " heads=" + std::to_string(md.heads) +
         " weight_seed=" + std::to_string(md.weight_seed) +
         " input_seed=" + std::to_string(md.input_seed);
}

// What quantize-fp8 recorded: " quantized(from=f16 amax=3.25 saturated=0
// flushed=0.0012)", fractions of all elements.
static std::string Fp8Text(const fb::ValueT& v) {
  return " quantized(from=" + DTypeText(v.unquantized_dtype) +
         " amax=" + NumberText(v.fp8_amax) +
         " saturated=" + NumberText(v.fp8_saturated) +
         " flushed=" + NumberText(v.fp8_flushed) + ")";
}

std::string PrintModule(const fb::ModuleT& m, const PrintOptions& opts) {
  std::string out = "tilec ir: schema " + std::to_string(m.schema_version) +
                    ", producer " + Quoted(m.producer) + "\n";
  if (m.model) out += "model: " + ModelText(*m.model) + "\n";
  if (m.target) {
    const fb::TargetT& t = *m.target;
    out += "target: " + Escaped(t.name) + " tiles=" + std::to_string(t.tiles) +
           " clock_hz=" + NumberText(t.clock_hz) + " tensor_bytes=" +
           std::to_string(MaxTileTensorBytes(t)) + "\n";
  }
  out += "values:\n";
  std::map<uint32_t, const fb::ValueT*> values;
  for (const auto& v : m.values) {
    values[v->id] = v.get();
    out += "  %" + std::to_string(v->id) + " " + Escaped(v->name) + ": " +
           KindOf(v->role) + " " + DTypeText(v->dtype, v->fp8_scale_exp) +
           ShapeText(v->shape) + InitText(*v);
    if (!v->declared_shape.empty()) {
      out += " declared=" + ShapeText(v->declared_shape);
    }
    if (v->fp8_quantized) out += Fp8Text(*v);
    if (v->ownership) out += " owners=" + OwnershipText(*v->ownership);
    out += "\n";
  }
  out += "ops:\n";
  for (const auto& op : m.ops) {
    out += "  (" + std::to_string(op->id) + ") " + OpKindText(op->kind) + " " +
           Escaped(op->name) + ": " + IdList(op->results, "%") + " = " +
           IdList(op->operands, "%");
    for (uint32_t id : op->results) {
      auto it = values.find(id);
      if (it != values.end()) {
        out += " : " + DTypeText(it->second->dtype, it->second->fp8_scale_exp) +
               ShapeText(it->second->shape);
      }
    }
    switch (op->kind) {
      case fb::OpKind::LayerNorm:
      case fb::OpKind::Normalize:
        out += " eps=" + NumberText(op->eps);
        break;
      case fb::OpKind::Gelu:
        out += " gelu=" + SnakeCase(fb::EnumNameGeluForm(op->gelu));
        break;
      case fb::OpKind::AttentionScores:
      case fb::OpKind::AttentionContext:
        out += " heads=" + std::to_string(op->heads) +
               " head_dim=" + std::to_string(op->head_dim);
        if (op->first_image >= 0) {
          out += " first_image=" + std::to_string(op->first_image);
        }
        break;
      case fb::OpKind::Patchify:
        out += " patch=" + std::to_string(op->patch);
        break;
      case fb::OpKind::CopyRows:
        // operand:first+count@at per segment, e.g. a class token before
        // two images' 4 patches: rows=[0:0+1@0, 1:0+4@1, 0:0+1@5, 1:4+4@6].
        out += " rows=[";
        for (size_t i = 0; i < op->rows.size(); ++i) {
          const fb::RowCopyT* r = op->rows[i].get();
          if (i) out += ", ";
          if (r == nullptr) {
            out += "null";
            continue;
          }
          out += std::to_string(r->operand) + ":" + std::to_string(r->first) +
                 "+" + std::to_string(r->count) + "@" + std::to_string(r->at);
        }
        out += "]";
        break;
      default:
        break;
    }
    if (op->scale != 1.0f) out += " scale=" + NumberText(op->scale);
    if (!op->body.empty()) {
      out += " body=[";
      for (size_t i = 0; i < op->body.size(); ++i) {
        if (i) out += ", ";
        out += FusedStepText(*op->body[i]);
      }
      out += "]";
    }
    if (!op->origin.empty()) out += " origin=(" + IdList(op->origin, "") + ")";
    for (uint32_t id : op->results) {
      auto it = values.find(id);
      if (it != values.end() && it->second->ownership) {
        out += " | owners=" + OwnershipText(*it->second->ownership);
      }
    }
    if (op->recipe) out += " | recipe=" + RecipeText(*op->recipe);
    if (op->reduction) out += " | " + ReductionText(*op->reduction);
    if (op->estimate) out += " | " + EstimateText(*op->estimate);
    out += "\n";
  }
  PrintRepeats(m, &out);
  for (const auto& run : m.log) {
    out += "pass " + run->pass;
    for (const auto& flag : run->flags) out += " " + flag;
    out += ": " + std::to_string(run->decisions.size()) + " decisions\n";
    for (const auto& d : run->decisions) out += "  " + DecisionText(*d) + "\n";
  }
  if (m.checkpoint) {
    const fb::SearchCheckpointT& c = *m.checkpoint;
    out += "checkpoint: attempts=" + std::to_string(c.attempts) +
           " accepted=" + std::to_string(c.accepted) +
           " best_cycles=" + std::to_string(c.best_cycles) +
           " seed=" + std::to_string(c.seed) +
           " visited=" + std::to_string(c.visited.size()) + "\n";
  }
  if (m.program) PrintProgram(*m.program, opts, &out);
  return out;
}

}  // namespace tilec::ir
