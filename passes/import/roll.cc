#include "passes/import/roll.h"

#include <map>
#include <memory>
#include <set>
#include <string>

#include "formats/ir.h"

namespace tilec::passes {
namespace {

using ValueMap = std::map<uint32_t, const fb::ValueT*>;
using Range = std::pair<size_t, size_t>;

struct LayerEnds {
  uint32_t in = 0;
  uint32_t out = 0;
};

std::string LayerText(size_t layer) { return "layer " + std::to_string(layer); }

// The one activation a layer reads from before it, and the one it leaves
// for what follows.
StatusOr<LayerEnds> FindEnds(const fb::ModuleT& m, const Range& r,
                             size_t layer, const ValueMap& values,
                             const std::map<uint32_t, size_t>& producer) {
  std::set<uint32_t> ins, outs;
  for (size_t i = r.first; i < r.second; ++i) {
    for (uint32_t id : m.ops[i]->operands) {
      if (values.at(id)->role == fb::ValueRole::Weight) continue;
      auto p = producer.find(id);
      if (p == producer.end() || p->second < r.first) ins.insert(id);
    }
  }
  for (size_t i = r.second; i < m.ops.size(); ++i) {
    for (uint32_t id : m.ops[i]->operands) {
      auto p = producer.find(id);
      if (p != producer.end() && p->second >= r.first && p->second < r.second) {
        outs.insert(id);
      }
    }
  }
  for (size_t i = r.first; i < r.second; ++i) {
    for (uint32_t id : m.ops[i]->results) {
      if (values.at(id)->role == fb::ValueRole::Output) outs.insert(id);
    }
  }
  if (ins.size() != 1 || outs.size() != 1) {
    return Status::Internal(LayerText(layer) + " reads " +
                            std::to_string(ins.size()) + " and leaves " +
                            std::to_string(outs.size()) +
                            " activations; a repeated layer needs one of each");
  }
  return LayerEnds{*ins.begin(), *outs.begin()};
}

bool SameValueType(const fb::ValueT& a, const fb::ValueT& b) {
  return a.shape == b.shape && a.dtype == b.dtype && a.role == b.role &&
         a.fp8_scale_exp == b.fp8_scale_exp;
}

// Row copies are alike only with the same segments.
bool SameRows(const fb::OperationT& a, const fb::OperationT& b) {
  if (a.rows.size() != b.rows.size()) return false;
  for (size_t i = 0; i < a.rows.size(); ++i) {
    const fb::RowCopyT* x = a.rows[i].get();
    const fb::RowCopyT* y = b.rows[i].get();
    if (!x || !y || x->operand != y->operand || x->first != y->first ||
        x->count != y->count || x->at != y->at) {
      return false;
    }
  }
  return true;
}

bool SameAttributes(const fb::OperationT& a, const fb::OperationT& b) {
  return SameRows(a, b) && a.kind == b.kind && a.eps == b.eps && a.gelu == b.gelu &&
         a.heads == b.heads && a.head_dim == b.head_dim &&
         a.scale == b.scale && a.patch == b.patch && a.body.empty() &&
         b.body.empty() && a.operands.size() == b.operands.size() &&
         a.results.size() == b.results.size();
}

// Matches `layer` against layer 0 op for op; fills `to_first` (this layer's
// value -> layer 0's) and appends the layer's weights in the order of
// layer 0's `weights`.
Status MatchLayer(const fb::ModuleT& m, const Range& first, const Range& r,
                  size_t layer, const LayerEnds& ends0, const LayerEnds& ends,
                  const ValueMap& values, std::vector<uint32_t>* weights0,
                  std::vector<uint32_t>* twins) {
  if (r.second - r.first != first.second - first.first) {
    return Status::Internal(LayerText(layer) + " has a different op count");
  }
  std::map<uint32_t, uint32_t> to_first = {{ends.in, ends0.in}};
  std::map<uint32_t, uint32_t> weight_of;  // layer 0 weight -> this layer's
  for (size_t k = 0; k < r.second - r.first; ++k) {
    const fb::OperationT& a = *m.ops[first.first + k];
    const fb::OperationT& b = *m.ops[r.first + k];
    const std::string where = LayerText(layer) + " op " + std::to_string(b.id) +
                              " (" + b.name + ")";
    if (!SameAttributes(a, b)) {
      return Status::Internal(where + " differs from op " +
                              std::to_string(a.id) + " of layer 0");
    }
    for (size_t o = 0; o < a.operands.size(); ++o) {
      const uint32_t va = a.operands[o], vb = b.operands[o];
      auto known = to_first.find(vb);
      if (known != to_first.end()) {
        if (known->second != va) {
          return Status::Internal(where + " operand " + std::to_string(o) +
                                  " is wired differently from layer 0");
        }
        continue;
      }
      const fb::ValueT& wa = *values.at(va);
      const fb::ValueT& wb = *values.at(vb);
      if (wb.role != fb::ValueRole::Weight || !SameValueType(wa, wb) ||
          weight_of.count(va)) {
        return Status::Internal(where + " operand " + std::to_string(o) +
                                " does not match layer 0's");
      }
      to_first[vb] = va;
      weight_of[va] = vb;
      if (layer == 1) weights0->push_back(va);
    }
    for (size_t o = 0; o < a.results.size(); ++o) {
      if (!SameValueType(*values.at(a.results[o]), *values.at(b.results[o])) &&
          b.results[o] != ends.out) {
        return Status::Internal(where + " result differs from layer 0's");
      }
      to_first[b.results[o]] = a.results[o];
    }
  }
  if (to_first.at(ends.out) != ends0.out) {
    return Status::Internal(LayerText(layer) +
                            " leaves a different value than layer 0");
  }
  for (uint32_t w : *weights0) twins->push_back(weight_of.at(w));
  return Status::Ok();
}

// Drops the ops of layers 1.. and the values they made, and points readers
// of the last layer's result at layer 0's.
void DropLaterLayers(const std::vector<Range>& layers, uint32_t last_out,
                     uint32_t out0, fb::ModuleT* m) {
  std::set<uint32_t> dropped_values;
  std::vector<std::unique_ptr<fb::OperationT>> kept;
  for (size_t i = 0; i < m->ops.size(); ++i) {
    const bool later = i >= layers[1].first && i < layers.back().second;
    if (!later) {
      kept.push_back(std::move(m->ops[i]));
      continue;
    }
    for (uint32_t id : m->ops[i]->results) dropped_values.insert(id);
  }
  m->ops = std::move(kept);
  for (auto& op : m->ops) {
    for (uint32_t& id : op->operands) {
      if (id == last_out) id = out0;
    }
  }
  for (auto& v : m->values) {
    if (v->id == out0 && dropped_values.count(last_out)) {
      for (const auto& w : m->values) {
        if (w->id == last_out) v->role = w->role;
      }
    }
  }
  std::erase_if(m->values, [&](const auto& v) {
    return dropped_values.count(v->id) > 0;
  });
}

// Dense value and op ids in their current order.
void Renumber(fb::ModuleT* m) {
  std::map<uint32_t, uint32_t> id;
  for (size_t i = 0; i < m->values.size(); ++i) {
    id[m->values[i]->id] = static_cast<uint32_t>(i);
    m->values[i]->id = static_cast<uint32_t>(i);
  }
  for (size_t i = 0; i < m->ops.size(); ++i) {
    fb::OperationT& op = *m->ops[i];
    op.id = static_cast<uint32_t>(i);
    for (uint32_t& v : op.operands) v = id.at(v);
    for (uint32_t& v : op.results) v = id.at(v);
  }
  for (auto& r : m->repeats) {
    r->carried_in = id.at(r->carried_in);
    r->carried_out = id.at(r->carried_out);
    for (uint32_t& v : r->weights) v = id.at(v);
    for (uint32_t& v : r->iteration_weights) v = id.at(v);
  }
}

}  // namespace

Status RollLayers(const std::vector<Range>& layers, fb::ModuleT* module) {
  if (layers.size() < 2) return Status::Ok();
  ValueMap values;
  for (const auto& v : module->values) values[v->id] = v.get();
  std::map<uint32_t, size_t> producer;
  for (size_t i = 0; i < module->ops.size(); ++i) {
    for (uint32_t id : module->ops[i]->results) producer[id] = i;
  }
  std::vector<LayerEnds> ends;
  for (size_t l = 0; l < layers.size(); ++l) {
    StatusOr<LayerEnds> e = FindEnds(*module, layers[l], l, values, producer);
    if (!e.ok()) return e.status();
    if (l > 0 && e->in != ends.back().out) {
      return Status::Internal(LayerText(l) +
                              " does not read the layer before it");
    }
    ends.push_back(*e);
  }
  auto repeat = std::make_unique<fb::RepeatT>();
  repeat->carried_in = ends[0].in;
  repeat->carried_out = ends[0].out;
  repeat->count = static_cast<uint32_t>(layers.size());
  for (size_t l = 1; l < layers.size(); ++l) {
    TILEC_RETURN_IF_ERROR(MatchLayer(*module, layers[0], layers[l], l,
                                     ends[0], ends[l], values,
                                     &repeat->weights,
                                     &repeat->iteration_weights));
  }
  DropLaterLayers(layers, ends.back().out, ends[0].out, module);
  module->repeats.push_back(std::move(repeat));
  Renumber(module);
  return Status::Ok();
}

}  // namespace tilec::passes
