#include "passes/plan/plan.h"

#include <algorithm>
#include <map>

#include "formats/print.h"

namespace tilec::plan {

uint64_t Plan::Hash() const {
  uint64_t h = Fnv1a64("plan");
  for (const Recipe& r : recipes) h = Fnv1a64(r.Text() + "\n", h);
  return h;
}

std::string Evaluation::Diagnosis() const {
  std::string s = "tile " + std::to_string(peak_tile) + " needs " +
                  std::to_string(peak_bytes) + " B at " + peak_where + " but " +
                  std::to_string(capacity) +
                  " B per tile hold tensors; largest buffers there:";
  for (size_t i = 0; i < peak_items.size() && i < 4; ++i) {
    s += (i ? ", " : " ") + peak_items[i].what + " " +
         std::to_string(peak_items[i].bytes) + " B";
  }
  s += "; total " + std::to_string(peak_bytes) + " B vs capacity " +
       std::to_string(capacity) + " B";
  return s;
}

namespace {

std::string ValueLabel(const ValueNode& v) {
  return "%" + std::to_string(v.id) + " " + v.name;
}

// Ownerships: results as their producer's recipe says; weights in a home
// there; inputs, other weights and what the host computes as it writes an
// input as their first device consumer needs (the host writes them in that
// layout).
void AssignOwnerships(const Graph& graph, const Coster& coster,
                      const Plan& plan, int last, Evaluation* e) {
  for (int v = 0; v < graph.num_values(); ++v) {
    const ValueNode& value = graph.value(v);
    if (const fb::OwnershipT* home = plan.Home(v)) {
      e->owners[v] = *home;
      e->owned[v] = true;
      continue;
    }
    const bool host_result =
        value.producer >= 0 &&
        graph.op(value.producer).op_class == OpClass::kHost;
    if (value.producer >= 0 && value.producer > last) continue;
    if (value.producer >= 0 && !host_result) {
      e->owners[v] = coster.ResultOwnership(graph, value.producer,
                                            plan.recipes[value.producer]);
      e->owned[v] = true;
      continue;
    }
    for (const auto& [op, slot] : value.uses) {
      if (op > last) break;
      const Recipe& r = plan.recipes[op];
      if (graph.op(op).slots[slot] == SlotRole::kHostImage) continue;
      switch (graph.op(op).slots[slot]) {
        case SlotRole::kStaged:
          e->owners[v] = coster.StagedOwnership(r);
          break;
        case SlotRole::kSource:
          e->owners[v] = r.layout;
          break;
        default:
          e->owners[v] = *coster.Required(graph, op, r, slot);
          break;
      }
      e->owned[v] = true;
      break;
    }
  }
}

// Redistributions for operands in the wrong ownership, and op prices. One
// redistribution per (value, target ownership) serves every later use.
Status PriceOpsAndRedistributions(const Graph& graph, const Coster& coster,
                                  const Plan& plan, int last, Evaluation* e) {
  std::map<std::pair<int, std::string>, int> redistribution_index;
  for (int op = 0; op <= last; ++op) {
    const OpNode& node = graph.op(op);
    const Recipe& r = plan.recipes[op];
    const fb::OwnershipT* source = nullptr;
    if (node.op_class == OpClass::kGemm || node.op_class == OpClass::kCopy) {
      source = &e->owners[node.operands[0]];
    } else if (node.op_class == OpClass::kAttention) {
      source = &e->owners[node.operands[node.staged]];
    }
    for (size_t slot = 0; slot < node.operands.size(); ++slot) {
      const int v = node.operands[slot];
      const std::optional<fb::OwnershipT> need =
          coster.Required(graph, op, r, static_cast<int>(slot));
      if (!need ||
          coster.SamePlacement(graph.value(v).shape, e->owners[v], *need)) {
        continue;
      }
      const ValueNode& value = graph.value(v);
      const auto key = std::make_pair(v, passes::FormatOwnership(*need));
      auto it = redistribution_index.find(key);
      if (it == redistribution_index.end()) {
        Redistribution red;
        red.value = v;
        red.to = *need;
        red.before_op = op;
        StatusOr<passes::TransferCost> moved = coster.Redistribution(
            value.shape, coster.StoredBytes(graph, v), e->owners[v], *need);
        if (!moved.ok()) return moved.status();
        red.cost = *moved;
        e->total_cycles += red.Cycles();
        it = redistribution_index
                 .emplace(key, static_cast<int>(e->redistributions.size()))
                 .first;
        e->redistributions.push_back(std::move(red));
      }
      e->redistributions[it->second].uses.push_back(
          {op, static_cast<int>(slot)});
    }
    StatusOr<OpCost> cost = coster.PriceOp(graph, op, r, source);
    if (!cost.ok()) return cost.status();
    e->ops[op] = *cost;
    e->total_cycles += cost->Cycles();
  }
  return Status::Ok();
}

// Program order: each op preceded by its redistributions.
struct ProgramSteps {
  std::vector<int> op_step, redistribution_step;
  // The inverse maps, -1 where the step is the other kind.
  std::vector<int> step_op, step_redistribution;
  int steps = 0;
};

ProgramSteps OrderSteps(int num_ops, const Evaluation& e) {
  ProgramSteps s;
  s.op_step.resize(num_ops);
  s.redistribution_step.resize(e.redistributions.size());
  int step = 0;
  size_t next = 0;
  // Redistributions were created in op order, so they are sorted by
  // before_op already.
  for (int op = 0; op < num_ops; ++op) {
    while (next < e.redistributions.size() &&
           e.redistributions[next].before_op == op) {
      s.redistribution_step[next++] = step++;
    }
    s.op_step[op] = step++;
  }
  s.steps = num_ops + static_cast<int>(e.redistributions.size());
  s.step_op.assign(s.steps, -1);
  s.step_redistribution.assign(s.steps, -1);
  for (int op = 0; op < num_ops; ++op) s.step_op[s.op_step[op]] = op;
  for (size_t i = 0; i < e.redistributions.size(); ++i) {
    s.step_redistribution[s.redistribution_step[i]] = static_cast<int>(i);
  }
  return s;
}

// A buffer and the interval of steps it is live.
struct Live {
  TileBytes bytes;
  int begin = 0, end = 0;
  std::string what;
};

// Every owned value's buffer, then every redistribution's.
std::vector<Live> LiveBuffers(const Graph& graph, const Coster& coster,
                              const Plan& plan, const Evaluation& e,
                              const ProgramSteps& s) {
  std::vector<Live> live;
  // Which uses are served by a redistribution rather than the value itself.
  std::map<std::pair<int, int>, int> served;
  for (size_t i = 0; i < e.redistributions.size(); ++i) {
    for (const auto& use : e.redistributions[i].uses) {
      served[use] = static_cast<int>(i);
    }
  }
  for (int v = 0; v < graph.num_values(); ++v) {
    if (!e.owned[v]) continue;
    const ValueNode& value = graph.value(v);
    Live l;
    l.bytes = coster.BytesPerTile(value.shape, coster.StoredBytes(graph, v),
                                  e.owners[v]);
    l.what = ValueLabel(value);
    // The host writes inputs and its own ops' results before step 0.
    const bool from_host =
        value.producer < 0 ||
        graph.op(value.producer).op_class == OpClass::kHost;
    l.begin = from_host ? 0 : s.op_step[value.producer];
    l.end = l.begin;
    for (const auto& use : value.uses) {
      auto it = served.find(use);
      const int step = it == served.end() ? s.op_step[use.first]
                                          : s.redistribution_step[it->second];
      l.end = std::max(l.end, step);
    }
    if (value.role == fb::ValueRole::Weight) {
      l.begin = 0;
      l.end = s.steps - 1;
      l.what += plan.Home(v) ? " (home)" : " (resident)";
    } else if (value.role == fb::ValueRole::Output) {
      l.end = s.steps - 1;
    }
    live.push_back(std::move(l));
  }
  for (size_t i = 0; i < e.redistributions.size(); ++i) {
    const Redistribution& red = e.redistributions[i];
    const ValueNode& value = graph.value(red.value);
    Live l;
    l.bytes = coster.BytesPerTile(value.shape,
                                  coster.StoredBytes(graph, red.value), red.to);
    l.what = ValueLabel(value) + " as " + passes::FormatOwnership(red.to);
    l.begin = l.end = s.redistribution_step[i];
    for (const auto& use : red.uses)
      l.end = std::max(l.end, s.op_step[use.first]);
    live.push_back(std::move(l));
  }
  return live;
}

// Sums the live buffers (and an op's scratch) per tile at every step,
// records each step's peak and the overall peak; returns the peak step, -1
// if there are no steps.
int FindPeak(int num_ops, const Coster& coster, const std::vector<Live>& live,
             const ProgramSteps& s, Evaluation* e) {
  e->op_peak.assign(num_ops, 0);
  e->redistribution_peak.assign(e->redistributions.size(), 0);
  const int tiles = coster.tiles();
  std::vector<int64_t> sum(tiles);
  int peak_step = -1;
  for (int step = 0; step < s.steps; ++step) {
    std::fill(sum.begin(), sum.end(), 0);
    for (const Live& l : live) {
      if (step < l.begin || step > l.end) continue;
      const std::vector<int64_t>& b = *l.bytes;
      for (int t = 0; t < tiles; ++t) sum[t] += b[t];
    }
    const int op = s.step_op[step];
    if (op >= 0 && e->ops[op].scratch) {
      const std::vector<int64_t>& b = *e->ops[op].scratch;
      for (int t = 0; t < tiles; ++t) sum[t] += b[t];
    }
    const auto max_it = std::max_element(sum.begin(), sum.end());
    const int64_t peak = *max_it;
    if (op >= 0) {
      e->op_peak[op] = peak;
    } else {
      e->redistribution_peak[s.step_redistribution[step]] = peak;
    }
    if (peak > e->peak_bytes || peak_step < 0) {
      e->peak_bytes = peak;
      e->peak_tile = static_cast<int>(max_it - sum.begin());
      peak_step = step;
    }
  }
  return peak_step;
}

// What fills the peak tile at the peak step, largest first.
void ExplainPeak(const Graph& graph, const std::vector<Live>& live,
                 const ProgramSteps& s, int peak_step, Evaluation* e) {
  const int t = e->peak_tile;
  const int op = s.step_op[peak_step];
  if (op >= 0) {
    e->peak_where = graph.OpLabel(op);
    if (e->ops[op].scratch && (*e->ops[op].scratch)[t] > 0) {
      e->peak_items.push_back(
          {graph.OpLabel(op) + " scratch (" + e->ops[op].scratch_text + ")",
           (*e->ops[op].scratch)[t]});
    }
  } else {
    const Redistribution& red =
        e->redistributions[s.step_redistribution[peak_step]];
    e->peak_where = "the redistribution of " +
                    ValueLabel(graph.value(red.value)) + " before " +
                    graph.OpLabel(red.before_op);
  }
  for (const Live& l : live) {
    if (peak_step < l.begin || peak_step > l.end || (*l.bytes)[t] == 0) {
      continue;
    }
    e->peak_items.push_back({l.what, (*l.bytes)[t]});
  }
  std::stable_sort(e->peak_items.begin(), e->peak_items.end(),
                   [](const MemoryItem& a, const MemoryItem& b) {
                     return a.bytes > b.bytes;
                   });
}

}  // namespace

StatusOr<Evaluation> Evaluate(const Graph& graph, const Coster& coster,
                              const Plan& plan, EvalMode mode, int upto) {
  const int num_ops = graph.num_ops();
  const int last = upto < 0 ? num_ops - 1 : std::min(upto, num_ops - 1);
  Evaluation e;
  e.owners.resize(graph.num_values());
  e.owned.assign(graph.num_values(), false);
  e.ops.resize(num_ops);
  e.capacity = coster.capacity();

  AssignOwnerships(graph, coster, plan, last, &e);
  TILEC_RETURN_IF_ERROR(
      PriceOpsAndRedistributions(graph, coster, plan, last, &e));
  if (mode == EvalMode::kCyclesOnly || upto >= 0) return e;

  // Memory: the buffers live at each step of the whole program.
  e.memory_checked = true;
  const ProgramSteps steps = OrderSteps(num_ops, e);
  const std::vector<Live> live = LiveBuffers(graph, coster, plan, e, steps);
  const int peak_step = FindPeak(num_ops, coster, live, steps, &e);
  if (peak_step >= 0) ExplainPeak(graph, live, steps, peak_step, &e);
  return e;
}

StatusOr<std::vector<uint32_t>> WritePlan(const Graph& graph,
                                          const Coster& coster,
                                          const Plan& plan, const Evaluation& e,
                                          const std::string& gemm_note,
                                          fb::ModuleT* module) {
  if (static_cast<int>(module->ops.size()) != graph.num_ops() ||
      static_cast<int>(module->values.size()) != graph.num_values()) {
    return Status::Internal("WritePlan: the module is not the planned graph");
  }
  uint32_t next_op_id = 0, next_value_id = 0;
  for (const auto& op : module->ops)
    next_op_id = std::max(next_op_id, op->id + 1);
  for (const auto& v : module->values) {
    next_value_id = std::max(next_value_id, v->id + 1);
  }
  for (int v = 0; v < graph.num_values(); ++v) {
    fb::ValueT& value = *module->values[v];
    value.ownership.reset();
    if (e.owned[v])
      value.ownership = std::make_unique<fb::OwnershipT>(e.owners[v]);
  }
  std::vector<std::unique_ptr<fb::OperationT>> ops;
  std::vector<uint32_t> inserted;
  size_t next = 0;
  // Operand rewiring: (op, slot) -> new value id.
  std::map<std::pair<int, int>, uint32_t> rewired;
  for (int op = 0; op < graph.num_ops(); ++op) {
    while (next < e.redistributions.size() &&
           e.redistributions[next].before_op == op) {
      const Redistribution& red = e.redistributions[next];
      const ValueNode& source = graph.value(red.value);
      const OpNode& first = graph.op(red.before_op);
      const std::string name =
          first.name + ".redistribute." + std::to_string(red.uses[0].second);
      auto value = std::make_unique<fb::ValueT>();
      value->id = next_value_id++;
      value->name = name + ".out";
      value->shape = source.shape;
      value->dtype = source.dtype;
      value->fp8_scale_exp = module->values[red.value]->fp8_scale_exp;
      value->role = fb::ValueRole::Activation;
      value->ownership = std::make_unique<fb::OwnershipT>(red.to);
      auto copy = std::make_unique<fb::OperationT>();
      copy->id = next_op_id++;
      copy->kind = fb::OpKind::Redistribute;
      copy->name = name;
      copy->operands = {source.id};
      copy->results = {value->id};
      copy->recipe = std::make_unique<fb::RecipeT>();
      copy->recipe->kind = fb::RecipeKind::Copy;
      copy->recipe->layout = std::make_unique<fb::OwnershipT>(red.to);
      copy->estimate = std::make_unique<fb::EstimateT>();
      copy->estimate->compute_cycles = red.cost.local_copy_cycles;
      copy->estimate->exchange_cycles = red.cost.phase_cycles;
      copy->estimate->cycles = red.Cycles();
      copy->estimate->exchange_phases = red.cost.transfers > 0 ? 1 : 0;
      copy->estimate->exchange_bytes = red.cost.bytes_received;
      if (e.memory_checked) {
        copy->estimate->peak_bytes = e.redistribution_peak[next];
      }
      for (const auto& use : red.uses) rewired[use] = value->id;
      inserted.push_back(copy->id);
      module->values.push_back(std::move(value));
      ops.push_back(std::move(copy));
      ++next;
    }
    std::unique_ptr<fb::OperationT> o = std::move(module->ops[op]);
    for (size_t slot = 0; slot < o->operands.size(); ++slot) {
      auto it = rewired.find({op, static_cast<int>(slot)});
      if (it != rewired.end()) o->operands[slot] = it->second;
    }
    o->recipe =
        std::make_unique<fb::RecipeT>(RecipeToFb(plan.recipes[op], graph, op));
    if (o->recipe->kind == fb::RecipeKind::Gemm) o->recipe->note = gemm_note;
    o->estimate = std::make_unique<fb::EstimateT>();
    const OpCost& c = e.ops[op];
    o->estimate->compute_cycles = c.compute;
    o->estimate->exchange_cycles = c.exchange;
    o->estimate->cycles = c.Cycles();
    o->estimate->exchange_phases = c.phases;
    o->estimate->exchange_bytes = c.exchange_bytes;
    if (e.memory_checked) o->estimate->peak_bytes = e.op_peak[op];
    ops.push_back(std::move(o));
  }
  module->ops = std::move(ops);
  (void)coster;
  return inserted;
}

}  // namespace tilec::plan
