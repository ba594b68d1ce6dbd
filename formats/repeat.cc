#include "formats/repeat.h"

#include <set>
#include <string>
#include <vector>

namespace tilec::ir {
namespace {

std::string RepeatWhere(size_t index) {
  return "repeat " + std::to_string(index);
}

// Index in module.ops of each value's producer.
std::map<uint32_t, size_t> Producers(const fb::ModuleT& module) {
  std::map<uint32_t, size_t> producer;
  for (size_t i = 0; i < module.ops.size(); ++i) {
    for (uint32_t id : module.ops[i]->results) producer[id] = i;
  }
  return producer;
}

StatusOr<RepeatBody> FindBody(const fb::RepeatT& r, size_t index,
                              const std::map<uint32_t, size_t>& producer,
                              const std::map<uint32_t, const fb::ValueT*>& values) {
  const std::string where = RepeatWhere(index);
  for (uint32_t id : {r.carried_in, r.carried_out}) {
    if (!values.count(id)) {
      return Status::BadInput(where + " names value %" + std::to_string(id) +
                              ", which does not exist");
    }
  }
  RepeatBody body;
  body.repeat = &r;
  auto in = producer.find(r.carried_in);
  body.begin = in == producer.end() ? 0 : in->second + 1;
  auto out = producer.find(r.carried_out);
  if (out == producer.end() || out->second < body.begin) {
    return Status::BadInput(where + ": carried_out %" +
                            std::to_string(r.carried_out) +
                            " is not produced after carried_in %" +
                            std::to_string(r.carried_in));
  }
  body.end = out->second + 1;
  return body;
}

Status CheckCarried(const fb::RepeatT& r, const std::string& where,
                    const std::map<uint32_t, const fb::ValueT*>& values) {
  const fb::ValueT& in = *values.at(r.carried_in);
  const fb::ValueT& out = *values.at(r.carried_out);
  if (in.shape != out.shape || in.dtype != out.dtype ||
      in.fp8_scale_exp != out.fp8_scale_exp) {
    return Status::BadInput(where + ": carried_in %" + std::to_string(in.id) +
                            " and carried_out %" + std::to_string(out.id) +
                            " differ in shape, dtype or scale");
  }
  if (r.count < 1) return Status::BadInput(where + ": count is 0");
  if (r.iteration_weights.size() !=
      static_cast<size_t>(r.count - 1) * r.weights.size()) {
    return Status::BadInput(
        where + ": " + std::to_string(r.iteration_weights.size()) +
        " iteration weights for " + std::to_string(r.weights.size()) +
        " weights and " + std::to_string(r.count) + " iterations (needs " +
        std::to_string(static_cast<size_t>(r.count - 1) * r.weights.size()) +
        ")");
  }
  return Status::Ok();
}

// What is read where: the first and last op index reading each value.
struct Readers {
  std::map<uint32_t, std::pair<size_t, size_t>> span;
  void Add(uint32_t id, size_t i) {
    auto [it, fresh] = span.emplace(id, std::make_pair(i, i));
    if (!fresh) it->second.second = i;
  }
};

Status CheckFlow(const fb::ModuleT& module, const RepeatBody& body,
                 const std::string& where, const Readers& readers,
                 const std::map<uint32_t, size_t>& producer,
                 const std::map<uint32_t, const fb::ValueT*>& values) {
  const fb::RepeatT& r = *body.repeat;
  for (const auto& [id, span] : readers.span) {
    if (span.second < body.end) continue;
    auto p = producer.find(id);
    const bool made_in_body = p != producer.end() && body.Contains(p->second);
    if ((made_in_body && id != r.carried_out) || id == r.carried_in) {
      return Status::BadInput(
          where + ": value %" + std::to_string(id) + " of the body is read by op " +
          std::to_string(module.ops[span.second]->id) +
          " after it (only carried_out leaves the body)");
    }
  }
  for (size_t i = body.begin; i < body.end; ++i) {
    for (uint32_t id : module.ops[i]->results) {
      if (values.at(id)->role == fb::ValueRole::Output && id != r.carried_out) {
        return Status::BadInput(where + ": output %" + std::to_string(id) +
                                " is made in the body; only carried_out may be");
      }
    }
  }
  return Status::Ok();
}

Status CheckWeights(const RepeatBody& body, const std::string& where,
                    const Readers& readers,
                    const std::map<uint32_t, const fb::ValueT*>& values,
                    std::set<uint32_t>* named) {
  const fb::RepeatT& r = *body.repeat;
  auto weight = [&](uint32_t id) -> StatusOr<const fb::ValueT*> {
    auto it = values.find(id);
    if (it == values.end() || it->second->role != fb::ValueRole::Weight) {
      return Status::BadInput(where + " names %" + std::to_string(id) +
                              " as a weight; it is not a weight of the graph");
    }
    if (!named->insert(id).second) {
      return Status::BadInput(where + " names weight %" + std::to_string(id) +
                              " twice (in this or another repeat)");
    }
    return it->second;
  };
  for (uint32_t id : r.weights) {
    StatusOr<const fb::ValueT*> w = weight(id);
    if (!w.ok()) return w.status();
    auto span = readers.span.find(id);
    if (span != readers.span.end() &&
        (span->second.first < body.begin || span->second.second >= body.end)) {
      return Status::BadInput(where + ": weight %" + std::to_string(id) +
                              " is read outside the body");
    }
  }
  for (size_t k = 0; k < r.iteration_weights.size(); ++k) {
    const uint32_t id = r.iteration_weights[k];
    StatusOr<const fb::ValueT*> twin = weight(id);
    if (!twin.ok()) return twin.status();
    const fb::ValueT& of = *values.at(r.weights[k % r.weights.size()]);
    if ((*twin)->shape != of.shape || (*twin)->dtype != of.dtype) {
      return Status::BadInput(where + ": weight %" + std::to_string(id) +
                              " of iteration " +
                              std::to_string(k / r.weights.size() + 1) +
                              " differs in shape or dtype from %" +
                              std::to_string(of.id) + ", which it replaces");
    }
    if (readers.span.count(id)) {
      return Status::BadInput(where + ": weight %" + std::to_string(id) +
                              " of iteration " +
                              std::to_string(k / r.weights.size() + 1) +
                              " is read by an op; only the body's weights are");
    }
  }
  return Status::Ok();
}

}  // namespace

StatusOr<std::vector<RepeatBody>> RepeatBodies(const fb::ModuleT& module) {
  std::vector<RepeatBody> bodies;
  if (module.repeats.empty()) return bodies;
  std::map<uint32_t, const fb::ValueT*> values;
  for (const auto& v : module.values) values[v->id] = v.get();
  const std::map<uint32_t, size_t> producer = Producers(module);
  for (size_t k = 0; k < module.repeats.size(); ++k) {
    if (!module.repeats[k]) return Status::BadInput("null repeat entry");
    StatusOr<RepeatBody> body =
        FindBody(*module.repeats[k], k, producer, values);
    if (!body.ok()) return body.status();
    if (!bodies.empty() && body->begin < bodies.back().end) {
      return Status::BadInput(RepeatWhere(k) +
                              " overlaps or precedes the repeat before it");
    }
    bodies.push_back(*body);
  }
  return bodies;
}

uint32_t IterationValue(const fb::RepeatT& repeat, uint32_t iteration,
                        uint32_t id) {
  if (iteration == 0) return id;
  if (id == repeat.carried_in) return repeat.carried_out;
  for (size_t j = 0; j < repeat.weights.size(); ++j) {
    if (repeat.weights[j] == id) {
      return repeat.iteration_weights[(iteration - 1) * repeat.weights.size() + j];
    }
  }
  return id;
}

std::map<uint32_t, uint32_t> IterationWeights(const fb::RepeatT& repeat,
                                              uint32_t iteration) {
  std::map<uint32_t, uint32_t> map;
  if (iteration == 0) return map;
  for (size_t j = 0; j < repeat.weights.size(); ++j) {
    map[repeat.weights[j]] =
        repeat.iteration_weights[(iteration - 1) * repeat.weights.size() + j];
  }
  return map;
}

const fb::RepeatT* TwinOf(const fb::ModuleT& module, uint32_t value,
                          uint32_t* body_weight) {
  for (const auto& r : module.repeats) {
    for (size_t k = 0; k < r->iteration_weights.size(); ++k) {
      if (r->iteration_weights[k] != value) continue;
      if (body_weight) *body_weight = r->weights[k % r->weights.size()];
      return r.get();
    }
  }
  return nullptr;
}

Status VerifyRepeats(const fb::ModuleT& module) {
  if (module.repeats.empty()) return Status::Ok();
  StatusOr<std::vector<RepeatBody>> bodies = RepeatBodies(module);
  if (!bodies.ok()) return bodies.status();
  std::map<uint32_t, const fb::ValueT*> values;
  for (const auto& v : module.values) values[v->id] = v.get();
  const std::map<uint32_t, size_t> producer = Producers(module);
  Readers readers;
  for (size_t i = 0; i < module.ops.size(); ++i) {
    for (uint32_t id : module.ops[i]->operands) readers.Add(id, i);
  }
  std::set<uint32_t> named;
  for (size_t k = 0; k < bodies->size(); ++k) {
    const RepeatBody& body = (*bodies)[k];
    const std::string where = RepeatWhere(k);
    TILEC_RETURN_IF_ERROR(CheckCarried(*body.repeat, where, values));
    TILEC_RETURN_IF_ERROR(
        CheckFlow(module, body, where, readers, producer, values));
    TILEC_RETURN_IF_ERROR(CheckWeights(body, where, readers, values, &named));
  }
  return Status::Ok();
}

}  // namespace tilec::ir
