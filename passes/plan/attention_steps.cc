#include "passes/plan/attention_steps.h"

#include <algorithm>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <set>
#include <string>

#include "formats/op_shapes.h"

namespace tilec::plan {
namespace {

// Value id -> its entry, and value id -> the ops that read it.
struct Index {
  std::map<uint32_t, fb::ValueT*> values;
  std::map<uint32_t, std::vector<int>> readers;
};

Index IndexOf(const fb::ModuleT& module) {
  Index index;
  for (const auto& v : module.values) index.values[v->id] = v.get();
  for (size_t i = 0; i < module.ops.size(); ++i) {
    for (uint32_t id : module.ops[i]->operands) {
      std::vector<int>& r = index.readers[id];
      if (r.empty() || r.back() != static_cast<int>(i)) {
        r.push_back(static_cast<int>(i));
      }
    }
  }
  return index;
}

bool IsOutput(const fb::ValueT& v) { return v.role == fb::ValueRole::Output; }

// The chain that starts at scores op `first`, if there is one.
std::optional<AttentionChain> ChainFrom(const fb::ModuleT& module,
                                        const Index& index, int first) {
  const fb::OperationT& scores = *module.ops[first];
  if (scores.kind != fb::OpKind::AttentionScores ||
      scores.operands.size() != 1 || scores.results.size() != 1) {
    return std::nullopt;
  }
  const uint32_t qkv = scores.operands[0];
  const fb::ValueT& result = *index.values.at(scores.results[0]);
  if (result.shape.size() != 4) return std::nullopt;
  AttentionChain chain;
  chain.ops = {first};
  chain.images = result.shape[0];
  uint32_t last = scores.results[0];
  while (true) {
    const fb::ValueT& v = *index.values.at(last);
    auto readers = index.readers.find(last);
    if (IsOutput(v) || readers == index.readers.end() ||
        readers->second.size() != 1) {
      return std::nullopt;
    }
    const int next = readers->second[0];
    const fb::OperationT& op = *module.ops[next];
    if (op.results.size() != 1) return std::nullopt;
    if (op.kind == fb::OpKind::AttentionContext) {
      if (op.operands.size() != 2 || op.operands[0] != last ||
          op.operands[1] != qkv) {
        return std::nullopt;
      }
      chain.ops.push_back(next);
      return chain;
    }
    const bool rowwise_or_cast = op.kind == fb::OpKind::Softmax ||
                                 op.kind == fb::OpKind::Cast;
    if (!rowwise_or_cast || op.operands.size() != 1 ||
        index.values.at(op.results[0])->shape != result.shape) {
      return std::nullopt;
    }
    chain.ops.push_back(next);
    last = op.results[0];
  }
}

uint32_t NextValueId(const fb::ModuleT& module) {
  uint32_t next = 0;
  for (const auto& v : module.values) next = std::max(next, v->id + 1);
  return next;
}

uint32_t NextOpId(const fb::ModuleT& module) {
  uint32_t next = 0;
  for (const auto& op : module.ops) next = std::max(next, op->id + 1);
  return next;
}

// The value of image group [first, first + group) of `whole`: scores and
// probabilities [G,H,T,T], the context [G*T, H*D].
std::unique_ptr<fb::ValueT> GroupValue(const fb::ValueT& whole, uint32_t id,
                                       int step, int64_t group,
                                       int64_t images) {
  auto v = std::make_unique<fb::ValueT>(whole);
  v->id = id;
  v->name = whole.name + ".step" + std::to_string(step);
  v->ownership.reset();
  v->declared_shape.clear();
  if (v->shape.size() == 4) {
    v->shape[0] = group;
  } else {
    v->shape[0] = v->shape[0] / images * group;
  }
  return v;
}

// The steps and join of one chain, into `made`; its values are replaced
// and added in `module` (next_value and next_op hand out new ids).
void SplitChain(const AttentionChain& chain, int steps, uint32_t* next_value,
                uint32_t* next_op, fb::ModuleT* module,
                std::vector<std::unique_ptr<fb::OperationT>>* made) {
  const int64_t group = chain.images / steps;
  const fb::OperationT& context = *module->ops[chain.ops.back()];
  const uint32_t whole_context = context.results[0];
  fb::ValueT* context_value = nullptr;
  for (auto& v : module->values) {
    if (v->id == whole_context) context_value = v.get();
  }
  auto join = std::make_unique<fb::OperationT>();
  join->kind = fb::OpKind::CopyRows;
  join->name = context.name + ".join";
  join->results = {whole_context};
  std::vector<std::unique_ptr<fb::ValueT>> values;
  for (int s = 0; s < steps; ++s) {
    uint32_t in = 0;  // the step's value read by the next op of the chain
    for (size_t k = 0; k < chain.ops.size(); ++k) {
      const fb::OperationT& op = *module->ops[chain.ops[k]];
      auto step = std::make_unique<fb::OperationT>(op);
      step->recipe.reset();
      step->estimate.reset();
      step->reduction.reset();
      step->name = op.name + ".step" + std::to_string(s);
      step->id = s == 0 ? op.id : (*next_op)++;
      if (k > 0) step->operands[0] = in;
      const bool attention = k == 0 || k + 1 == chain.ops.size();
      if (attention) step->first_image = static_cast<int32_t>(s * group);
      const bool last = k + 1 == chain.ops.size();
      fb::ValueT* whole = context_value;
      if (!last) {
        for (auto& v : module->values) {
          if (v->id == op.results[0]) whole = v.get();
        }
      }
      // Step 0 keeps the chain's intermediate values' ids; the context of
      // every step is new (the original is the join's result).
      const uint32_t id =
          s == 0 && !last ? op.results[0] : (*next_value)++;
      values.push_back(GroupValue(*whole, id, s, group, chain.images));
      step->results = {id};
      in = id;
      made->push_back(std::move(step));
    }
    join->operands.push_back(in);
    const int64_t rows = context_value->shape[0] / chain.images * group;
    ir::AppendRowSegment({static_cast<uint32_t>(s), 0, rows, s * rows},
                         join.get());
  }
  join->id = (*next_op)++;
  made->push_back(std::move(join));
  // Step 0's values replace the chain's whole ones (same ids); the others
  // are added.
  for (auto& v : values) {
    auto same = std::find_if(
        module->values.begin(), module->values.end(),
        [&](const std::unique_ptr<fb::ValueT>& old) { return old->id == v->id; });
    if (same != module->values.end()) {
      *same = std::move(v);
    } else {
      module->values.push_back(std::move(v));
    }
  }
}

}  // namespace

bool ChainsOverCapacity(const fb::ModuleT& module, const Graph& graph,
                        const Evaluation& closest) {
  std::set<uint32_t> made;  // the values the chains' ops make
  for (const AttentionChain& chain : FindAttentionChains(module)) {
    for (int op : chain.ops) {
      const fb::OperationT& o = *module.ops[op];
      made.insert(o.results.begin(), o.results.end());
      const int index = graph.OpIndex(o.id);
      if (index >= 0 && index < static_cast<int>(closest.op_peak.size()) &&
          closest.op_peak[index] > closest.capacity) {
        return true;
      }
    }
  }
  for (size_t i = 0; i < closest.redistributions.size() &&
                     i < closest.redistribution_peak.size();
       ++i) {
    const int value = closest.redistributions[i].value;
    if (made.count(graph.value(value).id) &&
        closest.redistribution_peak[i] > closest.capacity) {
      return true;
    }
  }
  return false;
}

std::vector<AttentionChain> FindAttentionChains(const fb::ModuleT& module) {
  const Index index = IndexOf(module);
  std::vector<AttentionChain> chains;
  for (size_t i = 0; i < module.ops.size(); ++i) {
    if (std::optional<AttentionChain> c =
            ChainFrom(module, index, static_cast<int>(i))) {
      chains.push_back(std::move(*c));
    }
  }
  return chains;
}

std::vector<int> AttentionStepCounts(const fb::ModuleT& module) {
  const std::vector<AttentionChain> chains = FindAttentionChains(module);
  if (chains.empty()) return {};
  for (const AttentionChain& c : chains) {
    if (c.images != chains[0].images) return {};
  }
  std::vector<int> counts;
  for (int64_t s = 2; s <= chains[0].images; ++s) {
    if (chains[0].images % s == 0) counts.push_back(static_cast<int>(s));
  }
  return counts;
}

Status SplitAttentionIntoImageSteps(int steps, fb::ModuleT* module) {
  if (steps == 1) return Status::Ok();
  const std::vector<AttentionChain> chains = FindAttentionChains(*module);
  for (const AttentionChain& c : chains) {
    if (steps < 1 || c.images % steps != 0) {
      return Status::BadInput(
          "attention in " + std::to_string(steps) + " image steps: " +
          module->ops[c.ops[0]]->name + " has " + std::to_string(c.images) +
          (c.images == 1 ? " image" : " images") + ", which " +
          std::to_string(steps) + " does not divide");
    }
  }
  uint32_t next_value = NextValueId(*module), next_op = NextOpId(*module);
  // Each chain's ops leave their places; its steps and join take the place
  // of its context (the ops between a chain's members read nothing of it).
  std::vector<std::unique_ptr<fb::OperationT>> ops;
  std::map<int, std::vector<std::unique_ptr<fb::OperationT>>> at_context;
  std::vector<bool> in_chain(module->ops.size(), false);
  for (const AttentionChain& c : chains) {
    std::vector<std::unique_ptr<fb::OperationT>> made;
    SplitChain(c, steps, &next_value, &next_op, module, &made);
    for (int op : c.ops) in_chain[op] = true;
    at_context[c.ops.back()] = std::move(made);
  }
  for (size_t i = 0; i < module->ops.size(); ++i) {
    auto steps_here = at_context.find(static_cast<int>(i));
    if (steps_here != at_context.end()) {
      for (auto& op : steps_here->second) ops.push_back(std::move(op));
    } else if (!in_chain[i]) {
      ops.push_back(std::move(module->ops[i]));
    }
  }
  module->ops = std::move(ops);
  return Status::Ok();
}

}  // namespace tilec::plan
