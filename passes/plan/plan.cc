#include "passes/plan/plan.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <span>
#include <tuple>

#include "formats/print.h"
#include "formats/target.h"
#include "kernels/exchange_schedule.h"

namespace tilec::plan {

uint64_t Plan::Hash() const {
  uint64_t h = Fnv1a64("plan");
  for (const Recipe& r : recipes) h = Fnv1a64(r.Text() + "\n", h);
  return h;
}

bool operator==(const WeightHome& a, const WeightHome& b) {
  return a.delivery == b.delivery && a.spread == b.spread &&
         a.first_replica == b.first_replica &&
         passes::FormatOwnership(a.fixed) == passes::FormatOwnership(b.fixed);
}

int64_t Evaluation::Excess() const {
  int64_t excess = 0;
  for (int64_t peak : op_peak) excess += std::max<int64_t>(0, peak - capacity);
  for (int64_t peak : redistribution_peak) {
    excess += std::max<int64_t>(0, peak - capacity);
  }
  return excess;
}

std::string Evaluation::Diagnosis() const {
  std::string s = "tile " + std::to_string(peak_tile) + " needs " +
                  std::to_string(peak_bytes) + " B at " + peak_where + " but " +
                  std::to_string(capacity) +
                  " B per tile hold code and tensors; largest there:";
  for (size_t i = 0; i < peak_items.size() && i < 4; ++i) {
    s += (i ? ", " : " ") + peak_items[i].what + " " +
         std::to_string(peak_items[i].bytes) + " B";
  }
  // Twins are many small buffers: their sum says what the repeat costs.
  int twins = 0;
  int64_t twin_bytes = 0;
  for (const MemoryItem& item : peak_items) {
    if (item.what.find(", twin of %") == std::string::npos) continue;
    ++twins;
    twin_bytes += item.bytes;
  }
  if (twins > 0) {
    s += "; " + std::to_string(twins) + " twins (later iterations' weights) " +
         std::to_string(twin_bytes) + " B";
  }
  s += "; total " + std::to_string(peak_bytes) + " B vs capacity " +
       std::to_string(capacity) + " B";
  return s;
}

std::optional<fb::OwnershipT> FirstConsumerLayout(const Graph& graph,
                                                  const Coster& coster,
                                                  const Plan& plan,
                                                  int value) {
  const std::vector<std::pair<int, int>>& uses = graph.value(value).uses;
  if (uses.empty()) return std::nullopt;
  const auto [op, slot] = uses.front();
  return coster.Required(graph, op, plan.recipes[op], slot);
}

namespace {

// A home's bytes on a tile that holds a part of it and gathers its block
// from it: the part, every iteration's copy, and the receive tables of the
// pieces (the target's code model).
struct HomeBytes {
  int64_t copies = 1;
  int64_t per_piece = 0;
  int64_t operator()(int64_t part, int64_t pieces) const {
    return part * copies + pieces * per_piece;
  }
};

// The slab count, at most `most`, of a home of blocks of `block_bytes` with
// the fewest HomeBytes: a divisor of `divides` (0: any count), a slab at
// least a row (`rows` along the slabs' axis) and an 8-byte grain.
std::pair<int, int64_t> FewestBytesSlabs(int64_t most, int64_t divides,
                                         int64_t rows, int64_t block_bytes,
                                         const HomeBytes& bytes) {
  most = std::min({most, rows, block_bytes / 8});
  std::pair<int, int64_t> best = {1, bytes(block_bytes, 1)};
  for (int d = 2; d <= most; ++d) {
    if (divides > 0 && divides % d != 0) continue;
    const int64_t b = bytes(ir::CeilDiv(block_bytes, int64_t{d}), d);
    if (b < best.second) best = {d, b};
  }
  return best;
}

}  // namespace

namespace {

// The largest block of a blocked `layout` of a value of `shape` (the first:
// balanced parts put the extra elements first).
struct Block {
  int64_t rows = 0;         // along axis 0, which slabs cut
  int64_t bytes = 0;
  bool contiguous = true;   // its rows follow each other in the value
};

Block LargestBlock(std::span<const int64_t> shape,
                   const fb::OwnershipT& layout, int element_bytes) {
  Block b;
  b.rows = ir::CeilDiv(shape[0], int64_t{layout.partitions[0]});
  b.bytes = b.rows * element_bytes;
  for (size_t a = 1; a < shape.size(); ++a) {
    b.bytes *= ir::CeilDiv(shape[a], int64_t{layout.partitions[a]});
    b.contiguous = b.contiguous && layout.partitions[a] == 1;
  }
  return b;
}

}  // namespace

fb::OwnershipT HomeOwnershipIn(const Graph& graph, const Coster& coster,
                               const Plan& plan, int value,
                               const WeightHome& home) {
  if (!home.delivery) return home.fixed;
  const std::optional<fb::OwnershipT> layout =
      FirstConsumerLayout(graph, coster, plan, value);
  if (!layout || layout->kind != fb::OwnershipKind::Blocked) return home.fixed;
  const std::vector<int64_t>& shape = graph.value(value).shape;
  const int element_bytes = coster.StoredBytes(graph, value);
  const Block block = LargestBlock(shape, *layout, element_bytes);
  const kernels::CodeModel code =
      kernels::CodeModel::FromTarget(coster.target());
  const HomeBytes bytes{graph.Copies(value), code.receive + code.pointer};
  // Spread over tiles beyond the layout where it has one replica and
  // memory repair asked for it; else over the layout's replicas.
  const bool spread = home.spread && layout->replicas == 1;
  const int64_t most =
      spread ? coster.tiles() / passes::GridCells(*layout) : layout->replicas;
  const auto [slabs, shaped_bytes] = FewestBytesSlabs(
      most, spread ? 0 : layout->replicas, block.rows, block.bytes, bytes);
  // The flat home by the same measure: a block gathers a piece per run
  // (per row where its rows are apart) and one more per flat part boundary
  // its runs cross. It wins where the layout has few replicas of large
  // blocks (a one-row GEMM's weight).
  const int64_t flat_part = std::max<int64_t>(
      1, passes::MaxBytesPerTile(home.fixed, shape, element_bytes));
  const int64_t flat_pieces = (block.contiguous ? 1 : block.rows) +
                              ir::CeilDiv(block.bytes, flat_part);
  if (bytes(flat_part, flat_pieces) < shaped_bytes) return home.fixed;
  std::optional<fb::OwnershipT> shaped =
      spread ? passes::SpreadHome(*layout, slabs, coster.tiles(),
                                  home.fixed.first_tile)
             : passes::DeliveryHome(*layout, slabs, home.first_replica);
  return shaped ? *std::move(shaped) : home.fixed;
}

namespace {

std::string ValueLabel(const ValueNode& v) {
  return "%" + std::to_string(v.id) + " " + v.name;
}

// Value v's ownership: a result as its producer's recipe says; a weight in
// a home there; an input, another weight or what the host computes as it
// writes an input as its first device consumer needs (the host writes it in
// that layout). None if ops 0..last do not settle it.
std::optional<fb::OwnershipT> SettledOwnership(const Graph& graph,
                                               const Coster& coster,
                                               const Plan& plan, int last,
                                               int v) {
  const ValueNode& value = graph.value(v);
  if (const WeightHome* home = plan.Home(v)) {
    return HomeOwnershipIn(graph, coster, plan, v, *home);
  }
  const bool host_result = value.producer >= 0 &&
                           graph.op(value.producer).op_class == OpClass::kHost;
  if (value.producer >= 0 && value.producer > last) return std::nullopt;
  if (value.producer >= 0 && !host_result) {
    return coster.ResultOwnership(graph, value.producer,
                                  plan.recipes[value.producer]);
  }
  for (const auto& [op, slot] : value.uses) {
    if (op > last) break;
    const Recipe& r = plan.recipes[op];
    switch (graph.op(op).slots[slot]) {
      case SlotRole::kHostImage:
        continue;
      case SlotRole::kStaged:
        return coster.StagedOwnership(r);
      case SlotRole::kSource:
        return r.layout;
      default:
        return *coster.Required(graph, op, r, slot);
    }
  }
  return std::nullopt;
}

void AssignOwnership(const Graph& graph, const Coster& coster, const Plan& plan,
                     int last, int v, Evaluation* e) {
  std::optional<fb::OwnershipT> settled =
      SettledOwnership(graph, coster, plan, last, v);
  e->owned[v] = settled.has_value();
  if (settled) e->owners[v] = *std::move(settled);
}

// A twin is held as its body weight is, home or compute layout
// (OwnershipOf).
void MarkTwinOwned(const Graph& graph, int v, Evaluation* e) {
  const int weight = graph.TwinOf(v);
  if (weight >= 0 && e->owned[weight]) e->owned[v] = true;
}

// Every value's ownership as far as ops 0..last settle it.
void AssignOwnerships(const Graph& graph, const Coster& coster,
                      const Plan& plan, int last, Evaluation* e) {
  for (int v = 0; v < graph.num_values(); ++v) {
    AssignOwnership(graph, coster, plan, last, v, e);
  }
  for (int v = 0; v < graph.num_values(); ++v) MarkTwinOwned(graph, v, e);
}

// The loop edge of the repeat whose carried_out is `v`, if op `op` (after
// that body) reads the moved value: its index in redistributions, or -1.
int LoopEdgeFor(const Graph& graph, const Evaluation& e, int v, int op) {
  for (size_t k = 0; k < e.loop_edges.size(); ++k) {
    const RepeatNode& r = graph.repeats()[k];
    if (e.loop_edges[k] >= 0 && r.carried_out == v && op >= r.end) {
      return e.loop_edges[k];
    }
  }
  return -1;
}

// The ownership op `op` finds value `v` in.
const fb::OwnershipT& ReadOwner(const Graph& graph, const Evaluation& e, int v,
                                int op) {
  const int edge = LoopEdgeFor(graph, e, v, op);
  return edge < 0 ? e.owners[v] : e.redistributions[edge].to;
}

// The ownership a redistribution moves its value from (as it was priced).
const fb::OwnershipT& MovedFrom(const Graph& graph, const Evaluation& e,
                                const Redistribution& red) {
  return red.loop_edge ? e.owners[red.value]
                       : ReadOwner(graph, e, red.value, red.before_op);
}

// Iteration i+1 reads carried_out where iteration 0 read carried_in: if
// their ownerships differ, carried_out moves to carried_in's at the end of
// the body, every iteration.
Status AddLoopEdge(const Graph& graph, const Coster& coster, int k,
                   Evaluation* e) {
  const RepeatNode& r = graph.repeats()[k];
  if (!e->owned[r.carried_in] || !e->owned[r.carried_out]) return Status::Ok();
  const ValueNode& out = graph.value(r.carried_out);
  const fb::OwnershipT& want = e->owners[r.carried_in];
  if (coster.SamePlacement(out.shape, e->owners[r.carried_out], want)) {
    return Status::Ok();
  }
  Redistribution red;
  red.value = r.carried_out;
  red.to = want;
  red.before_op = r.end;
  red.runs = r.count;
  red.loop_edge = true;
  StatusOr<passes::TransferCost> moved =
      coster.Redistribution(out.shape, coster.StoredBytes(graph, r.carried_out),
                            e->owners[r.carried_out], want);
  if (!moved.ok()) return moved.status();
  red.cost = *moved;
  e->total_cycles += red.runs * red.Cycles();
  e->repeat_cycles[k] += red.Cycles();
  e->loop_edges[k] = static_cast<int>(e->redistributions.size());
  e->redistributions.push_back(std::move(red));
  return Status::Ok();
}

// Adds the loop edges of the repeats whose body ends just before op `op`.
Status AddLoopEdgesBefore(const Graph& graph, const Coster& coster, int op,
                          Evaluation* e) {
  for (size_t k = 0; k < graph.repeats().size(); ++k) {
    if (graph.repeats()[k].end != op) continue;
    TILEC_RETURN_IF_ERROR(
        AddLoopEdge(graph, coster, static_cast<int>(k), e));
  }
  return Status::Ok();
}

// Redistributions by (value, target ownership, repeat of the ops they
// serve, -1 outside bodies). One inside a body serves only that body (it
// runs every iteration); one before a body also serves the body's reads of
// loop-invariant values.
class RedistributionIndex {
 public:
  int Find(const Graph& graph, int v, const std::string& to, int op) const {
    const int region = graph.RepeatOf(op);
    auto it = index_.find({v, to, region});
    if (it != index_.end()) return it->second;
    if (region < 0 || graph.repeats()[region].carried_in == v) return -1;
    it = index_.find({v, to, -1});
    return it == index_.end() ? -1 : it->second;
  }
  void Add(const Graph& graph, int v, const std::string& to, int op, int i) {
    index_[{v, to, graph.RepeatOf(op)}] = i;
  }
  void Remove(const Graph& graph, int v, const std::string& to, int op) {
    index_.erase({v, to, graph.RepeatOf(op)});
  }

 private:
  std::map<std::tuple<int, std::string, int>, int> index_;
};

// Operand `slot` of op `op` (recipe `r`) as the op finds it: a use of the
// loop edge that moved it, or, in the wrong ownership, of a redistribution
// (a new one, or one an earlier op made), counted as often as it runs.
Status ServeOperand(const Graph& graph, const Coster& coster, const Recipe& r,
                    int op, int slot, RedistributionIndex* index,
                    Evaluation* e) {
  const int v = graph.op(op).operands[slot];
  const std::pair<int, int> use = {op, slot};
  const fb::OwnershipT& have = ReadOwner(graph, *e, v, op);
  const std::optional<fb::OwnershipT> need =
      coster.Required(graph, op, r, slot);
  if (!need || coster.SamePlacement(graph.value(v).shape, have, *need)) {
    const int edge = LoopEdgeFor(graph, *e, v, op);
    if (edge >= 0) e->redistributions[edge].uses.push_back(use);
    return Status::Ok();
  }
  const std::string to = passes::FormatOwnership(*need);
  int i = index->Find(graph, v, to, op);
  if (i < 0) {
    Redistribution red;
    red.value = v;
    red.to = *need;
    red.before_op = op;
    red.runs = graph.Runs(op);
    StatusOr<passes::TransferCost> moved = coster.Redistribution(
        graph.value(v).shape, coster.StoredBytes(graph, v), have, *need);
    if (!moved.ok()) return moved.status();
    red.cost = *moved;
    e->total_cycles += red.runs * red.Cycles();
    const int region = graph.RepeatOf(op);
    if (region >= 0) e->repeat_cycles[region] += red.Cycles();
    i = static_cast<int>(e->redistributions.size());
    index->Add(graph, v, to, op, i);
    e->redistributions.push_back(std::move(red));
  }
  e->redistributions[i].uses.push_back(use);
  return Status::Ok();
}

// Op `op`'s operands (ServeOperand) and its price, counted as often as it
// runs.
Status PriceOpAndRedistributions(const Graph& graph, const Coster& coster,
                                 const Plan& plan, int op,
                                 RedistributionIndex* index, Evaluation* e) {
  const OpNode& node = graph.op(op);
  const Recipe& r = plan.recipes[op];
  const fb::OwnershipT* source = nullptr;
  std::vector<const fb::OwnershipT*> sources;
  if (node.kind == fb::OpKind::CopyRows) {
    for (int v : node.operands) {
      sources.push_back(&ReadOwner(graph, *e, v, op));
    }
  }
  if (node.op_class == OpClass::kGemm || node.op_class == OpClass::kCopy) {
    source = &ReadOwner(graph, *e, node.operands[0], op);
  } else if (node.op_class == OpClass::kAttention) {
    source = &ReadOwner(graph, *e, node.operands[node.staged], op);
  }
  for (size_t slot = 0; slot < node.operands.size(); ++slot) {
    TILEC_RETURN_IF_ERROR(
        ServeOperand(graph, coster, r, op, static_cast<int>(slot), index, e));
  }
  StatusOr<OpCost> cost = coster.PriceOp(graph, op, r, source, sources);
  if (!cost.ok()) return cost.status();
  e->ops[op] = *cost;
  e->total_cycles += graph.Runs(op) * cost->Cycles();
  const int region = graph.RepeatOf(op);
  if (region >= 0) e->repeat_cycles[region] += cost->Cycles();
  return Status::Ok();
}

// Ops first..last priced in order, from `e` as op `first` finds it (its
// loop edges not yet added); loop edges where a body ends.
Status PriceOpsAndRedistributions(const Graph& graph, const Coster& coster,
                                  const Plan& plan, int first, int last,
                                  RedistributionIndex* index, Evaluation* e) {
  for (int op = first; op <= last; ++op) {
    TILEC_RETURN_IF_ERROR(AddLoopEdgesBefore(graph, coster, op, e));
    TILEC_RETURN_IF_ERROR(
        PriceOpAndRedistributions(graph, coster, plan, op, index, e));
  }
  return AddLoopEdgesBefore(graph, coster, last + 1, e);
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
  // Loop edges of a body that ends the program.
  while (next < e.redistributions.size()) s.redistribution_step[next++] = step++;
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
  int value = -1;           // a value's own buffer, or
  int redistribution = -1;  // a redistribution's, or
  const char* label = "";   // this (the code)
};

// "%4 l0.mlp.up.w (home, twin of %3)", "%8 x as blocked(2x2)": made only
// for the peak's items (Evaluate runs thousands of times a plan).
std::string LiveLabel(const Graph& graph, const Plan& plan,
                      const Evaluation& e, const Live& l) {
  if (l.value < 0 && l.redistribution < 0) return l.label;
  if (l.redistribution >= 0) {
    const Redistribution& red = e.redistributions[l.redistribution];
    return ValueLabel(graph.value(red.value)) + " as " +
           passes::FormatOwnership(red.to);
  }
  const ValueNode& value = graph.value(l.value);
  std::string what = ValueLabel(value);
  if (value.role == fb::ValueRole::Weight) {
    const int twin_of = graph.TwinOf(l.value);
    what += plan.Home(graph.HeldAs(l.value)) ? " (home" : " (resident";
    what += twin_of < 0 ? ")"
                        : ", twin of %" +
                              std::to_string(graph.value(twin_of).id) + ")";
  }
  return what;
}

// The last step of repeat k's body (its loop edge, if any).
int BodyLastStep(const Graph& graph, const Evaluation& e,
                 const ProgramSteps& s, int k) {
  const int edge = e.loop_edges[k];
  return edge >= 0 ? s.redistribution_step[edge]
                   : s.op_step[graph.repeats()[k].end - 1];
}

// A buffer made outside repeat k's body and read in it is read by every
// iteration: live to the body's end.
int ReadInBodies(const Graph& graph, const Evaluation& e, const ProgramSteps& s,
                 int made_in, int use_op, int end) {
  const int k = graph.RepeatOf(use_op);
  if (k < 0 || k == made_in) return end;
  return std::max(end, BodyLastStep(graph, e, s, k));
}

// The interval of value v's own buffer.
void ValueInterval(const Graph& graph, const Evaluation& e,
                   const ProgramSteps& s,
                   const std::map<std::pair<int, int>, int>& served, int v,
                   Live* l) {
  const ValueNode& value = graph.value(v);
  // The host writes inputs and its own ops' results before step 0.
  const bool from_host = value.producer < 0 ||
                         graph.op(value.producer).op_class == OpClass::kHost;
  l->begin = from_host ? 0 : s.op_step[value.producer];
  l->end = l->begin;
  int made_in = from_host ? -1 : graph.RepeatOf(value.producer);
  for (size_t k = 0; k < graph.repeats().size(); ++k) {
    // Iterations i > 0 read carried_out instead: the body's own value.
    if (graph.repeats()[k].carried_in == v) made_in = static_cast<int>(k);
  }
  for (const auto& use : value.uses) {
    if (LoopEdgeFor(graph, e, v, use.first) >= 0) continue;  // the edge's
    auto it = served.find(use);
    const int step = it == served.end() ? s.op_step[use.first]
                                        : s.redistribution_step[it->second];
    l->end = ReadInBodies(graph, e, s, made_in, use.first,
                          std::max(l->end, step));
  }
  if (value.role == fb::ValueRole::Weight) {
    l->begin = 0;
    l->end = s.steps - 1;
  } else if (value.role == fb::ValueRole::Output) {
    l->end = s.steps - 1;
  }
  for (size_t i = 0; i < e.redistributions.size(); ++i) {
    const Redistribution& red = e.redistributions[i];
    if (red.value != v || !red.loop_edge) continue;
    // The edge moves it out of this buffer at the body's end, every
    // iteration; what is read after the body is the edge's.
    l->end = s.redistribution_step[i];
  }
}

// The interval of redistribution i's buffer.
void RedistributionInterval(const Graph& graph, const Evaluation& e,
                            const ProgramSteps& s, int i, Live* l) {
  const Redistribution& red = e.redistributions[i];
  l->begin = l->end = s.redistribution_step[i];
  const int made_in = red.loop_edge || red.before_op >= graph.num_ops()
                          ? -1
                          : graph.RepeatOf(red.before_op);
  for (const auto& use : red.uses) {
    l->end = ReadInBodies(graph, e, s, made_in, use.first,
                          std::max(l->end, s.op_step[use.first]));
  }
  if (!red.loop_edge) return;
  // After the body the edge's buffer is carried_out: read by the later
  // redistributions of it, and by the host if it is an output.
  for (size_t j = i + 1; j < e.redistributions.size(); ++j) {
    if (e.redistributions[j].value == red.value) {
      l->end = std::max(l->end, s.redistribution_step[j]);
    }
  }
  if (graph.value(red.value).role == fb::ValueRole::Output) {
    l->end = s.steps - 1;
  }
}

// Every owned value's buffer (twins included), then every redistribution's.
std::vector<Live> LiveBuffers(const Graph& graph, const Coster& coster,
                              const Evaluation& e, const ProgramSteps& s) {
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
                                  OwnershipOf(graph, e, v));
    l.value = v;
    ValueInterval(graph, e, s, served, v, &l);
    live.push_back(std::move(l));
  }
  for (size_t i = 0; i < e.redistributions.size(); ++i) {
    const Redistribution& red = e.redistributions[i];
    const ValueNode& value = graph.value(red.value);
    Live l;
    l.bytes = coster.BytesPerTile(value.shape,
                                  coster.StoredBytes(graph, red.value), red.to);
    l.redistribution = static_cast<int>(i);
    RedistributionInterval(graph, e, s, static_cast<int>(i), &l);
    live.push_back(std::move(l));
  }
  return live;
}

// Per-tile byte sums over every tile, FindPeak's inner loops: a batch 8
// repair evaluates thousands of plans of a thousand steps on 1,472 tiles.
// Eight tiles a vector; integer sums, so every instruction set gives the
// same numbers. The clone for the host (chosen at load time) does the
// eight in one AVX-512 instruction, or in two AVX2 ones.
typedef int64_t Int64x8 __attribute__((vector_size(64)));
constexpr int kLanes = 8;

// Taken and given by reference: a 64-byte vector by value is a different
// ABI with AVX-512 than without (-Wpsabi).
[[gnu::always_inline]] inline const Int64x8& Load8(const int64_t* p,
                                                   Int64x8& v) {
  std::memcpy(&v, p, sizeof(v));
  return v;
}

[[gnu::always_inline]] inline void Store8(int64_t* p, const Int64x8& v) {
  std::memcpy(p, &v, sizeof(v));
}

// to[t] += count * bytes[t].
__attribute__((target_clones("avx512f", "avx2", "default"))) void AddTimes(
    int64_t* to, const int64_t* bytes, int64_t count, int tiles) {
  int t = 0;
  Int64x8 a, b;
  if (count == 1) {
    for (; t + kLanes <= tiles; t += kLanes)
      Store8(to + t, Load8(to + t, a) + Load8(bytes + t, b));
  } else if (count == -1) {
    for (; t + kLanes <= tiles; t += kLanes)
      Store8(to + t, Load8(to + t, a) - Load8(bytes + t, b));
  } else {
    for (; t + kLanes <= tiles; t += kLanes) {
      Store8(to + t, Load8(to + t, a) + count * Load8(bytes + t, b));
    }
  }
  for (; t < tiles; ++t) to[t] += count * bytes[t];
}

// to[t] = from[t] + bytes[t].
__attribute__((target_clones("avx512f", "avx2", "default"))) void AddEach(
    int64_t* to, const int64_t* from, const int64_t* bytes, int tiles) {
  int t = 0;
  Int64x8 a, b;
  for (; t + kLanes <= tiles; t += kLanes)
    Store8(to + t, Load8(from + t, a) + Load8(bytes + t, b));
  for (; t < tiles; ++t) to[t] = from[t] + bytes[t];
}

// The largest of v[0, tiles), tiles >= 1.
__attribute__((target_clones("avx512f", "avx2", "default"))) int64_t Largest(
    const int64_t* v, int tiles) {
  int64_t largest = v[0];
  int t = 0;
  if (tiles >= kLanes) {
    Int64x8 m, x;
    Load8(v, m);
    for (t = kLanes; t + kLanes <= tiles; t += kLanes) {
      Load8(v + t, x);
      m = m > x ? m : x;
    }
    for (int i = 0; i < kLanes; ++i) largest = std::max(largest, m[i]);
  }
  for (; t < tiles; ++t) largest = std::max(largest, v[t]);
  return largest;
}

// Every tile's live bytes at each step of `s`, from `start`: the buffers
// of `live` that counts(l) keeps, and at an op's step scratch(op) (null:
// none); visit(step, bytes) sees each step's. A running sum per tile, each
// buffer added at its first step and taken off after its last, rather than
// every live buffer summed at every step; buffers of one byte vector and
// one interval (a repeat's twins: hundreds on the whole model) are added
// once, times their number.
template <typename Counts, typename Scratch, typename Visit>
void SumSteps(std::vector<int64_t> start, const std::vector<Live>& live,
              const ProgramSteps& s, const Counts& counts,
              const Scratch& scratch, const Visit& visit) {
  const int tiles = static_cast<int>(start.size());
  std::map<std::tuple<const std::vector<int64_t>*, int, int>, int64_t> groups;
  for (const Live& l : live) {
    if (l.begin > l.end || l.end < 0 || l.begin >= s.steps || !counts(l)) {
      continue;
    }
    ++groups[{l.bytes.get(), std::max(l.begin, 0),
              std::min(l.end, s.steps - 1)}];
  }
  using Group = std::pair<const std::vector<int64_t>*, int64_t>;
  std::vector<std::vector<Group>> starting(s.steps), ending(s.steps);
  for (const auto& [key, count] : groups) {
    const auto& [bytes, begin, end] = key;
    starting[begin].push_back({bytes, count});
    ending[end].push_back({bytes, count});
  }
  std::vector<int64_t>& running = start;
  std::vector<int64_t> sum(tiles);
  for (int step = 0; step < s.steps; ++step) {
    for (const auto& [bytes, count] : starting[step]) {
      AddTimes(running.data(), bytes->data(), count, tiles);
    }
    const int op = s.step_op[step];
    const std::vector<int64_t>* extra = op >= 0 ? scratch(op) : nullptr;
    // What is live at this step: every buffer ending here still is.
    if (extra) AddEach(sum.data(), running.data(), extra->data(), tiles);
    visit(step, extra ? sum : running);
    for (const auto& [bytes, count] : ending[step]) {
      AddTimes(running.data(), bytes->data(), -count, tiles);
    }
  }
}

// Sums the live buffers (and an op's scratch) per tile at every step,
// records each step's peak and the overall peak; returns the peak step, -1
// if there are no steps.
int FindPeak(int num_ops, const Coster& coster, const std::vector<Live>& live,
             const ProgramSteps& s, Evaluation* e) {
  e->op_peak.assign(num_ops, 0);
  e->redistribution_peak.assign(e->redistributions.size(), 0);
  const int tiles = coster.tiles();
  int peak_step = -1;
  SumSteps(
      std::vector<int64_t>(tiles, 0), live, s, [](const Live&) { return true; },
      [e](int op) { return e->ops[op].scratch.get(); },
      [&](int step, const std::vector<int64_t>& live_now) {
        const int64_t peak = Largest(live_now.data(), tiles);
        const int op = s.step_op[step];
        if (op >= 0) {
          e->op_peak[op] = peak;
        } else {
          e->redistribution_peak[s.step_redistribution[step]] = peak;
        }
        if (peak > e->peak_bytes || peak_step < 0) {
          e->peak_bytes = peak;
          e->peak_tile = static_cast<int>(
              std::find(live_now.begin(), live_now.end(), peak) -
              live_now.begin());
          peak_step = step;
        }
      });
  return peak_step;
}

// What fills the peak tile at the peak step, largest first.
void ExplainPeak(const Graph& graph, const Plan& plan,
                 const std::vector<Live>& live, const ProgramSteps& s,
                 int peak_step, Evaluation* e) {
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
    e->peak_where = red.loop_edge
                        ? "the loop edge redistribution of " +
                              ValueLabel(graph.value(red.value)) +
                              " at the end of its repeat's body"
                        : "the redistribution of " +
                              ValueLabel(graph.value(red.value)) + " before " +
                              graph.OpLabel(red.before_op);
  }
  for (const Live& l : live) {
    if (peak_step < l.begin || peak_step > l.end || (*l.bytes)[t] == 0) {
      continue;
    }
    MemoryItem item{LiveLabel(graph, plan, *e, l), (*l.bytes)[t]};
    if (l.value >= 0 && graph.value(l.value).role == fb::ValueRole::Weight) {
      item.weight = graph.HeldAs(l.value);
    }
    e->peak_items.push_back(std::move(item));
  }
  std::stable_sort(e->peak_items.begin(), e->peak_items.end(),
                   [](const MemoryItem& a, const MemoryItem& b) {
                     return a.bytes > b.bytes;
                   });
}

// EstimateTileCodeBytes counting only the ops and redistributions
// `counted_op` and `counted_red` keep (by index), redistribution i's
// exchange tables as tables(i) (a passes::TileCodeBytes) says.
template <typename CountedOp, typename CountedRed, typename Tables>
std::vector<int64_t> TileCodeBytesOf(const fb::TargetT& target,
                                     const Evaluation& e,
                                     const CountedOp& counted_op,
                                     const CountedRed& counted_red,
                                     const Tables& tables) {
  const kernels::CodeModel code = kernels::CodeModel::FromTarget(target);
  const int64_t per_step =
      code.per_superstep + code.per_call + 7 * code.per_operand;
  // Every tile runs every superstep; each phase's tables are on the tiles
  // it moves data to or from.
  int64_t steps = 0;
  std::vector<int64_t> bytes(target.tiles, 0);
  auto add = [&](const passes::TileCodeBytes& table) {
    if (table == nullptr) return;
    AddTimes(bytes.data(), table->data(), 1,
             static_cast<int>(std::min(bytes.size(), table->size())));
  };
  for (size_t i = 0; i < e.ops.size(); ++i) {
    if (!counted_op(i)) continue;
    steps += (e.ops[i].phases + 1) * per_step;
    add(e.ops[i].code);
  }
  for (size_t i = 0; i < e.redistributions.size(); ++i) {
    if (!counted_red(i)) continue;
    steps += 2 * per_step;
    add(tables(i));
  }
  for (int64_t& b : bytes) b += code.runtime + steps;
  return bytes;
}

}  // namespace

std::vector<int64_t> EstimateTileCodeBytes(const fb::TargetT& target,
                                           const Evaluation& e) {
  auto all = [](size_t) { return true; };
  return TileCodeBytesOf(target, e, all, all, [&e](size_t i) {
    return e.redistributions[i].cost.tile_code;
  });
}

namespace {

// The program's steps and the buffers live across them: an evaluation's
// memory but its code, and the same in its multicast form (Multicasts
// changes only what redistributions cost).
struct Buffers {
  ProgramSteps steps;
  std::vector<Live> live;
};

Buffers BuffersOf(const Graph& graph, const Coster& coster,
                  const Evaluation& e) {
  Buffers b;
  b.steps = OrderSteps(graph.num_ops(), e);
  b.live = LiveBuffers(graph, coster, e, b.steps);
  return b;
}

// The step where memory peaks (-1 if there are no steps) and the code
// region counted there.
struct Peak {
  int step = -1;
  Live code;
};

// Memory: `buffers` and `e`'s code at each step of the program. What fills
// the peak is listed only for the evaluation Evaluate returns
// (ExplainMemory).
Peak CheckMemory(const Graph& graph, const Coster& coster, Buffers& buffers,
                 Evaluation* e) {
  e->memory_checked = true;
  // Each tile's code region, as emit-device sizes it per tile.
  auto code = std::make_shared<std::vector<int64_t>>(
      EstimateTileCodeBytes(coster.target(), *e));
  e->code_bytes = *std::max_element(code->begin(), code->end());
  for (int64_t& b : *code) b = ir::CodeRegionBytes(coster.target(), b);
  buffers.live.push_back(
      {std::move(code), 0, buffers.steps.steps - 1, -1, -1,
       "code and exchange tables (estimated, in whole elements)"});
  Peak peak;
  peak.step = FindPeak(graph.num_ops(), coster, buffers.live, buffers.steps, e);
  peak.code = std::move(buffers.live.back());
  buffers.live.pop_back();
  return peak;
}

void ExplainMemory(const Graph& graph, const Plan& plan, Buffers& buffers,
                   Peak& peak, Evaluation* e) {
  if (peak.step < 0) return;
  buffers.live.push_back(std::move(peak.code));
  ExplainPeak(graph, plan, buffers.live, buffers.steps, peak.step, e);
  buffers.live.pop_back();
}

// What pricing an evaluation's unicast redistributions as multicasts
// changes: their costs and the totals, and once checked the memory
// figures. Swapped with the evaluation's own (SwapForm), so that trying the
// other form copies neither the ownerships nor the ops.
struct OtherForm {
  std::vector<std::pair<size_t, passes::TransferCost>> costs;
  int64_t total_cycles = 0;
  std::vector<int64_t> repeat_cycles;
  std::vector<int64_t> op_peak, redistribution_peak;
  int64_t peak_bytes = 0;
  int peak_tile = -1;
  int64_t code_bytes = 0;
};

void SwapForm(Evaluation* e, OtherForm* f) {
  for (auto& [i, cost] : f->costs) std::swap(e->redistributions[i].cost, cost);
  std::swap(e->total_cycles, f->total_cycles);
  std::swap(e->repeat_cycles, f->repeat_cycles);
  std::swap(e->op_peak, f->op_peak);
  std::swap(e->redistribution_peak, f->redistribution_peak);
  std::swap(e->peak_bytes, f->peak_bytes);
  std::swap(e->peak_tile, f->peak_tile);
  std::swap(e->code_bytes, f->code_bytes);
}

// `e`'s form with every unicast redistribution priced as multicasts, its
// memory not yet checked; nullopt if it has none.
StatusOr<std::optional<OtherForm>> Multicasts(const Graph& graph,
                                              const Coster& coster,
                                              const Evaluation& e) {
  std::optional<OtherForm> out;
  for (size_t i = 0; i < e.redistributions.size(); ++i) {
    const Redistribution& red = e.redistributions[i];
    if (!red.cost.unicast) continue;
    if (!out) {
      out.emplace();
      out->total_cycles = e.total_cycles;
      out->repeat_cycles = e.repeat_cycles;
    }
    StatusOr<passes::TransferCost> multicast = coster.Redistribution(
        graph.value(red.value).shape, coster.StoredBytes(graph, red.value),
        MovedFrom(graph, e, red), red.to, /*may_unicast=*/false);
    if (!multicast.ok()) return multicast.status();
    const int64_t added = multicast->TotalCycles() - red.Cycles();
    out->costs.emplace_back(i, std::move(*multicast));
    out->total_cycles += red.runs * added;
    int region = red.loop_edge ? -1 : graph.RepeatOf(red.before_op);
    for (size_t k = 0; red.loop_edge && k < e.loop_edges.size(); ++k) {
      if (e.loop_edges[k] == static_cast<int>(i)) region = static_cast<int>(k);
    }
    if (region >= 0) out->repeat_cycles[region] += added;
  }
  return out;
}

}  // namespace

const fb::OwnershipT& OwnershipOf(const Graph& graph, const Evaluation& e,
                                  int v) {
  return e.owners[graph.HeldAs(v)];
}

namespace {

// An evaluation of nothing yet, sized for `graph`.
Evaluation EmptyEvaluation(const Graph& graph, const Coster& coster) {
  Evaluation e;
  e.owners.resize(graph.num_values());
  e.owned.assign(graph.num_values(), false);
  e.ops.resize(graph.num_ops());
  e.capacity = coster.capacity();
  e.repeat_cycles.assign(graph.repeats().size(), 0);
  e.loop_edges.assign(graph.repeats().size(), -1);
  return e;
}

}  // namespace

StatusOr<Evaluation> Evaluate(const Graph& graph, const Coster& coster,
                              const Plan& plan, EvalMode mode, int upto) {
  const int num_ops = graph.num_ops();
  const int last = upto < 0 ? num_ops - 1 : std::min(upto, num_ops - 1);
  Evaluation e = EmptyEvaluation(graph, coster);
  AssignOwnerships(graph, coster, plan, last, &e);
  RedistributionIndex index;
  TILEC_RETURN_IF_ERROR(
      PriceOpsAndRedistributions(graph, coster, plan, 0, last, &index, &e));
  if (mode == EvalMode::kCyclesOnly || upto >= 0) return e;

  Buffers buffers = BuffersOf(graph, coster, e);
  Peak peak = CheckMemory(graph, coster, buffers, &e);
  if (!e.feasible()) {
    // Unicasts buy cycles with exchange tables: where the plan does not
    // fit with them, it is priced again with every redistribution a
    // multicast, and the one nearer to fitting kept (docs/planning.md,
    // "Unicast redistributions").
    StatusOr<std::optional<OtherForm>> multicasts =
        Multicasts(graph, coster, e);
    if (!multicasts.ok()) return multicasts.status();
    if (*multicasts) {
      const auto unicasts_rank = e.RepairRank();
      SwapForm(&e, &**multicasts);
      Peak multicasts_peak = CheckMemory(graph, coster, buffers, &e);
      if (e.RepairRank() < unicasts_rank) {
        ExplainMemory(graph, plan, buffers, multicasts_peak, &e);
        return e;
      }
      SwapForm(&e, &**multicasts);
    }
  }
  ExplainMemory(graph, plan, buffers, peak, &e);
  return e;
}

StatusOr<RepairRankValue> RepairRankBound(const Graph& graph,
                                          const Coster& coster,
                                          const Coster& bounds,
                                          const Plan& plan,
                                          const RepairFloors* known) {
  StatusOr<Evaluation> e = Evaluate(graph, coster.WithRedistributionsOf(bounds),
                                    plan, EvalMode::kCyclesOnly);
  if (!e.ok()) return e.status();
  for (Redistribution& red : e->redistributions) {
    red.cost.tile_code = known ? known->KnownTables(graph, *e, red) : nullptr;
  }
  Buffers buffers = BuffersOf(graph, coster, *e);
  CheckMemory(graph, coster, buffers, &*e);
  return e->RepairRank();
}

namespace {

// What a trial of one op's recipe may change (RepairFloors), by index.
struct Touched {
  std::vector<bool> values, ops, redistributions;
};

// The op's operands and result, their loop partners and twins; the ops
// that read any of those (their sources may move, and with them their
// prices); the redistributions of those values or for those ops.
Touched TouchedBy(const Graph& graph, const Evaluation& e, int op) {
  Touched t;
  t.values.assign(graph.num_values(), false);
  const OpNode& node = graph.op(op);
  for (int v : node.operands) t.values[v] = true;
  if (node.result >= 0) t.values[node.result] = true;
  for (const RepeatNode& r : graph.repeats()) {
    if (r.carried_in < 0 || r.carried_out < 0) continue;
    if (t.values[r.carried_in] || t.values[r.carried_out]) {
      t.values[r.carried_in] = t.values[r.carried_out] = true;
    }
  }
  for (int v = 0; v < graph.num_values(); ++v) {
    if (t.values[graph.HeldAs(v)]) t.values[v] = true;
  }
  t.ops.assign(graph.num_ops(), false);
  t.ops[op] = true;
  for (int v = 0; v < graph.num_values(); ++v) {
    if (!t.values[v]) continue;
    for (const auto& use : graph.value(v).uses) t.ops[use.first] = true;
  }
  t.redistributions.assign(e.redistributions.size(), false);
  for (size_t i = 0; i < e.redistributions.size(); ++i) {
    const Redistribution& red = e.redistributions[i];
    bool touched = t.values[red.value] ||
                   (red.before_op < graph.num_ops() && t.ops[red.before_op]);
    for (const auto& use : red.uses) touched = touched || t.ops[use.first];
    t.redistributions[i] = touched;
  }
  return t;
}

// Each redistribution's exchange tables on each tile, the fewer of its two
// forms' (unicast where shorter, or multicast): Evaluate may keep either
// form for a whole plan. A form that cannot be priced counts none.
std::vector<passes::TileCodeBytes> LeastTables(const Graph& graph,
                                               const Coster& coster,
                                               const Evaluation& e) {
  std::vector<passes::TileCodeBytes> least(e.redistributions.size());
  for (size_t i = 0; i < e.redistributions.size(); ++i) {
    const Redistribution& red = e.redistributions[i];
    StatusOr<passes::TransferCost> other = coster.Redistribution(
        graph.value(red.value).shape, coster.StoredBytes(graph, red.value),
        MovedFrom(graph, e, red), red.to, /*may_unicast=*/!red.cost.unicast);
    const passes::TileCodeBytes& mine = red.cost.tile_code;
    if (!other.ok() || mine == nullptr || other->tile_code == nullptr) {
      continue;
    }
    auto fewer = std::make_shared<std::vector<int64_t>>(*mine);
    for (size_t t = 0; t < fewer->size() && t < other->tile_code->size(); ++t) {
      (*fewer)[t] = std::min((*fewer)[t], (*other->tile_code)[t]);
    }
    least[i] = std::move(fewer);
  }
  return least;
}

// The fullest tiles of a step (RepairFloors::OpFloor::fullest): a few, as
// the trial's weights, spread over the tiles as evenly as their homes
// allow, rarely move the fullest far down.
std::vector<RepairFloors::TileAt> FullestTiles(
    const std::vector<int64_t>& bytes) {
  constexpr size_t kFullest = 8;
  std::vector<RepairFloors::TileAt> all(bytes.size());
  for (size_t t = 0; t < bytes.size(); ++t) {
    all[t] = {static_cast<int>(t), bytes[t]};
  }
  const size_t keep = std::min(kFullest, all.size());
  std::partial_sort(
      all.begin(), all.begin() + keep, all.end(),
      [](const RepairFloors::TileAt& a, const RepairFloors::TileAt& b) {
        return a.bytes > b.bytes || (a.bytes == b.bytes && a.tile < b.tile);
      });
  all.resize(keep);
  return all;
}

// Every tile's bytes at each step a trial of op `op` keeps, of what it
// cannot change (TouchedBy): visit(bytes) for each such step in order.
// Exchange tables at `tables` (LeastTables).
template <typename Visit>
void SumUntouched(const Graph& graph, const Coster& coster, const Evaluation& e,
                  const Buffers& buffers,
                  const std::vector<passes::TileCodeBytes>& tables, int op,
                  const Visit& visit) {
  const Touched touched = TouchedBy(graph, e, op);
  const ProgramSteps& s = buffers.steps;
  std::vector<int64_t> code = TileCodeBytesOf(
      coster.target(), e, [&](size_t j) { return !touched.ops[j]; },
      [&](size_t i) { return !touched.redistributions[i]; },
      [&tables](size_t i) { return tables[i]; });
  for (int64_t& b : code) b = ir::CodeRegionBytes(coster.target(), b);
  SumSteps(
      std::move(code), buffers.live, s,
      [&touched](const Live& l) {
        return l.value >= 0 ? !touched.values[l.value]
                            : !touched.redistributions[l.redistribution];
      },
      [&](int step_op) {
        return touched.ops[step_op] ? nullptr : e.ops[step_op].scratch.get();
      },
      [&](int step, const std::vector<int64_t>& now) {
        // A redistribution the trial touches may not be there at all.
        if (s.step_op[step] >= 0 ||
            !touched.redistributions[s.step_redistribution[step]]) {
          visit(now);
        }
      });
}

}  // namespace

RepairFloors::RepairFloors(const Graph& graph, const Coster& coster,
                           const Evaluation& e)
    : graph_(graph), coster_(coster), capacity_(e.capacity) {
  const Buffers buffers = BuffersOf(graph, coster, e);
  const std::vector<passes::TileCodeBytes> tables =
      LeastTables(graph, coster, e);
  known_tables_.resize(graph.num_values());
  for (size_t i = 0; i < e.redistributions.size(); ++i) {
    const Redistribution& red = e.redistributions[i];
    if (tables[i] == nullptr) continue;
    known_tables_[red.value].push_back(
        {red.loop_edge, MovedFrom(graph, e, red), red.to, tables[i]});
  }
  ops_.resize(graph.num_ops());
  for (int op = 0; op < graph.num_ops(); ++op) {
    OpFloor& floor = ops_[op];
    floor.weights = GemmWeights(op, e);
    SumUntouched(graph, coster, e, buffers, tables, op,
                 [&](const std::vector<int64_t>& now) {
                   if (!floor.weights.empty()) {
                     floor.fullest.push_back(FullestTiles(now));
                     return;
                   }
                   const int64_t peak =
                       Largest(now.data(), static_cast<int>(now.size()));
                   floor.excess += std::max<int64_t>(0, peak - capacity_);
                   floor.peak = std::max(floor.peak, peak);
                 });
  }
}

std::vector<std::pair<int, int64_t>> RepairFloors::GemmWeights(
    int op, const Evaluation& e) const {
  // A GEMM's weight is most of what a trial of it may free; other ops'
  // weights (a LayerNorm's, a bias) are small, and their floors go
  // without them.
  std::vector<std::pair<int, int64_t>> weights;
  if (graph_.op(op).op_class != OpClass::kGemm) return weights;
  for (int w : graph_.op(op).operands) {
    if (graph_.value(w).role != fb::ValueRole::Weight || !e.owned[w]) {
      continue;
    }
    int64_t copies = 0;
    for (int v = 0; v < graph_.num_values(); ++v) {
      copies +=
          graph_.HeldAs(v) == w && e.owned[v] &&
          graph_.value(v).shape == graph_.value(w).shape &&
          coster_.StoredBytes(graph_, v) == coster_.StoredBytes(graph_, w);
    }
    weights.push_back({w, copies});
  }
  return weights;
}

passes::TileCodeBytes RepairFloors::KnownTables(
    const Graph& graph, const Evaluation& e, const Redistribution& red) const {
  if (red.value >= static_cast<int>(known_tables_.size())) return nullptr;
  const std::vector<int64_t>& shape = graph.value(red.value).shape;
  for (const Known& known : known_tables_[red.value]) {
    if (known.loop_edge == red.loop_edge &&
        coster_.SamePlacement(shape, known.to, red.to) &&
        coster_.SamePlacement(shape, known.from, MovedFrom(graph, e, red))) {
      return known.tables;
    }
  }
  return nullptr;
}

RepairRankValue RepairFloors::Rank(int64_t excess, int64_t peak) const {
  // A plan over capacity nowhere is (0, 0, cycles).
  return excess > 0 ? RepairRankValue{excess, peak, 0} : RepairRankValue{};
}

RepairRankValue RepairFloors::Floor(const Plan& plan, int op,
                                    const Recipe& recipe) const {
  const OpFloor& floor = ops_[op];
  if (floor.weights.empty()) return Rank(floor.excess, floor.peak);
  Plan trial = plan;
  trial.recipes[op] = recipe;
  const int tiles = coster_.tiles();
  std::vector<int64_t> weights(tiles, 0);
  for (const auto& [w, copies] : floor.weights) {
    const std::optional<fb::OwnershipT> held =
        SettledOwnership(graph_, coster_, trial, graph_.num_ops() - 1, w);
    if (!held) continue;
    const TileBytes bytes = coster_.BytesPerTile(
        graph_.value(w).shape, coster_.StoredBytes(graph_, w), *held);
    AddTimes(weights.data(), bytes->data(), copies, tiles);
  }
  int64_t excess = 0, peak = 0;
  for (const std::vector<TileAt>& fullest : floor.fullest) {
    int64_t most = 0;
    for (const TileAt& at : fullest) {
      most = std::max(most, at.bytes + weights[at.tile]);
    }
    excess += std::max<int64_t>(0, most - capacity_);
    peak = std::max(peak, most);
  }
  return Rank(excess, peak);
}

namespace {

// Writes plan-ownership's ops into a module: Redistribute ops with new ids
// (above every existing one) and the planned ops, in program order.
class PlanWriter {
 public:
  PlanWriter(const Graph& graph, const Plan& plan, const Evaluation& e,
             const std::string& gemm_note, fb::ModuleT* module)
      : graph_(graph), plan_(plan), e_(e), note_(gemm_note), module_(*module) {
    for (const auto& op : module_.ops) next_op_ = std::max(next_op_, op->id + 1);
    for (const auto& v : module_.values) {
      next_value_ = std::max(next_value_, v->id + 1);
    }
  }

  std::vector<uint32_t> Write() {
    for (int v = 0; v < graph_.num_values(); ++v) {
      fb::ValueT& value = *module_.values[v];
      value.ownership.reset();
      if (e_.owned[v]) {
        value.ownership =
            std::make_unique<fb::OwnershipT>(OwnershipOf(graph_, e_, v));
      }
    }
    size_t next = 0;
    auto redistributions_before = [&](int op) {
      for (; next < e_.redistributions.size() &&
             e_.redistributions[next].before_op == op;
           ++next) {
        if (e_.redistributions[next].loop_edge) {
          AddLoopEdge(static_cast<int>(next));
        } else {
          AddRedistribution(static_cast<int>(next));
        }
      }
    };
    for (int op = 0; op < graph_.num_ops(); ++op) {
      redistributions_before(op);
      AddOp(op);
    }
    redistributions_before(graph_.num_ops());
    module_.ops = std::move(ops_);
    return inserted_;
  }

 private:
  // A Redistribute op of value `operand` to red.to writing `result`.
  void AddCopy(int i, const std::string& name, uint32_t operand,
               uint32_t result) {
    const Redistribution& red = e_.redistributions[i];
    auto copy = std::make_unique<fb::OperationT>();
    copy->id = next_op_++;
    copy->kind = fb::OpKind::Redistribute;
    copy->name = name;
    copy->operands = {operand};
    copy->results = {result};
    copy->recipe = std::make_unique<fb::RecipeT>();
    copy->recipe->kind = fb::RecipeKind::Copy;
    copy->recipe->layout = std::make_unique<fb::OwnershipT>(red.to);
    copy->recipe->unicast = red.cost.unicast;
    copy->estimate = std::make_unique<fb::EstimateT>();
    copy->estimate->compute_cycles = red.cost.local_copy_cycles;
    copy->estimate->exchange_cycles = red.cost.phase_cycles;
    copy->estimate->cycles = red.Cycles();
    copy->estimate->exchange_phases = red.cost.transfers > 0 ? 1 : 0;
    copy->estimate->exchange_bytes = red.cost.bytes_received;
    if (e_.memory_checked) {
      copy->estimate->peak_bytes = e_.redistribution_peak[i];
    }
    inserted_.push_back(copy->id);
    ops_.push_back(std::move(copy));
  }

  // A new value like `like` (shape, dtype, scale), owned `ownership`.
  uint32_t AddValue(const fb::ValueT& like, const std::string& name,
                    const fb::OwnershipT& ownership) {
    auto value = std::make_unique<fb::ValueT>();
    value->id = next_value_++;
    value->name = name;
    value->shape = like.shape;
    value->dtype = like.dtype;
    value->fp8_scale_exp = like.fp8_scale_exp;
    value->role = fb::ValueRole::Activation;
    value->ownership = std::make_unique<fb::OwnershipT>(ownership);
    module_.values.push_back(std::move(value));
    return module_.values.back()->id;
  }

  void AddRedistribution(int i) {
    const Redistribution& red = e_.redistributions[i];
    const fb::ValueT& source = *module_.values[red.value];
    const std::string name = graph_.op(red.before_op).name + ".redistribute." +
                             std::to_string(red.uses[0].second);
    const uint32_t id = AddValue(source, name + ".out", red.to);
    for (const auto& use : red.uses) rewired_[use] = id;
    AddCopy(i, name, source.id, id);
  }

  // The body's last op (just written) writes a new value, which the edge
  // moves into carried_out: carried_out keeps its id, role and readers.
  void AddLoopEdge(int i) {
    const Redistribution& red = e_.redistributions[i];
    fb::ValueT& carried = *module_.values[red.value];
    const std::string name = carried.name + ".loop_edge";
    const uint32_t moved = AddValue(carried, name + ".in", e_.owners[red.value]);
    ops_.back()->results[0] = moved;
    carried.ownership = std::make_unique<fb::OwnershipT>(red.to);
    AddCopy(i, name, moved, carried.id);
  }

  void AddOp(int op) {
    std::unique_ptr<fb::OperationT> o = std::move(module_.ops[op]);
    for (size_t slot = 0; slot < o->operands.size(); ++slot) {
      auto it = rewired_.find({op, static_cast<int>(slot)});
      if (it != rewired_.end()) o->operands[slot] = it->second;
    }
    o->recipe = std::make_unique<fb::RecipeT>(
        RecipeToFb(plan_.recipes[op], graph_, op));
    if (o->recipe->kind == fb::RecipeKind::Gemm) o->recipe->note = note_;
    o->estimate = std::make_unique<fb::EstimateT>();
    const OpCost& c = e_.ops[op];
    o->estimate->compute_cycles = c.compute;
    o->estimate->exchange_cycles = c.exchange;
    o->estimate->cycles = c.Cycles();
    o->estimate->exchange_phases = c.phases;
    o->estimate->exchange_bytes = c.exchange_bytes;
    if (e_.memory_checked) o->estimate->peak_bytes = e_.op_peak[op];
    ops_.push_back(std::move(o));
  }

  const Graph& graph_;
  const Plan& plan_;
  const Evaluation& e_;
  const std::string& note_;
  fb::ModuleT& module_;
  uint32_t next_op_ = 0, next_value_ = 0;
  std::vector<std::unique_ptr<fb::OperationT>> ops_;
  std::vector<uint32_t> inserted_;
  // Operand rewiring: (op, slot) -> new value id.
  std::map<std::pair<int, int>, uint32_t> rewired_;
};

}  // namespace

struct CyclesUpTo::State {
  const Graph* graph = nullptr;
  Plan plan;
  int op = 0;
  // Ops 0..op-1 priced and the loop edges before op added, ownerships as
  // those ops settle them.
  Evaluation e;
  RedistributionIndex index;
  // The values whose ownership op's recipe may settle: its operands (a
  // first use), its result, and their twins.
  std::vector<int> touched;
};

CyclesUpTo::CyclesUpTo(std::unique_ptr<State> state)
    : state_(std::move(state)) {}
CyclesUpTo::CyclesUpTo(CyclesUpTo&& other) noexcept = default;
CyclesUpTo& CyclesUpTo::operator=(CyclesUpTo&& other) noexcept = default;
CyclesUpTo::~CyclesUpTo() = default;

StatusOr<CyclesUpTo> CyclesUpTo::Make(const Graph& graph, const Coster& coster,
                                      const Plan& plan, int op) {
  auto s = std::make_unique<State>();
  s->graph = &graph;
  s->plan = plan;
  s->op = op;
  s->e = EmptyEvaluation(graph, coster);
  AssignOwnerships(graph, coster, plan, op - 1, &s->e);
  TILEC_RETURN_IF_ERROR(PriceOpsAndRedistributions(graph, coster, plan, 0,
                                                   op - 1, &s->index, &s->e));
  const OpNode& node = graph.op(op);
  std::vector<bool> mine(graph.num_values(), false);
  for (int v : node.operands) mine[v] = true;
  if (node.result >= 0) mine[node.result] = true;
  for (int v = 0; v < graph.num_values(); ++v) {
    const int weight = graph.TwinOf(v);
    if (mine[v] || (weight >= 0 && mine[weight])) s->touched.push_back(v);
  }
  return CyclesUpTo(std::move(s));
}

namespace {

// What pricing an op adds to an evaluation's totals and redistributions,
// to be taken off again (Restore): CyclesUpTo's prefix is the same for
// every recipe.
struct PrefixSize {
  explicit PrefixSize(const Evaluation& e)
      : redistributions(e.redistributions.size()),
        total_cycles(e.total_cycles),
        repeat_cycles(e.repeat_cycles),
        loop_edges(e.loop_edges) {
    for (const Redistribution& red : e.redistributions) {
      uses.push_back(red.uses.size());
    }
  }

  // Back to the prefix; the redistributions added are taken out of `index`.
  void Restore(const Graph& graph, int op, RedistributionIndex* index,
               Evaluation* e) const {
    for (size_t i = redistributions; i < e->redistributions.size(); ++i) {
      const Redistribution& red = e->redistributions[i];
      if (red.loop_edge) continue;  // never indexed
      index->Remove(graph, red.value, passes::FormatOwnership(red.to),
                    red.before_op);
    }
    e->redistributions.erase(
        e->redistributions.begin() + static_cast<ptrdiff_t>(redistributions),
        e->redistributions.end());
    for (size_t i = 0; i < redistributions; ++i) {
      e->redistributions[i].uses.resize(uses[i]);
    }
    e->total_cycles = total_cycles;
    e->repeat_cycles = repeat_cycles;
    e->loop_edges = loop_edges;
    e->ops[op] = OpCost{};
  }

  size_t redistributions;
  std::vector<size_t> uses;  // of each redistribution
  int64_t total_cycles;
  std::vector<int64_t> repeat_cycles;
  std::vector<int> loop_edges;
};

}  // namespace

StatusOr<int64_t> CyclesUpTo::CyclesWith(const Coster& coster,
                                         const Recipe& recipe) {
  State& s = *state_;
  const Graph& graph = *s.graph;
  const PrefixSize prefix(s.e);
  // The ownerships the op settles are settled afresh for every recipe.
  s.plan.recipes[s.op] = recipe;
  for (int v : s.touched) {
    AssignOwnership(graph, coster, s.plan, s.op, v, &s.e);
  }
  for (int v : s.touched) MarkTwinOwned(graph, v, &s.e);
  Status priced =
      PriceOpAndRedistributions(graph, coster, s.plan, s.op, &s.index, &s.e);
  if (priced.ok()) priced = AddLoopEdgesBefore(graph, coster, s.op + 1, &s.e);
  const int64_t cycles = s.e.total_cycles;
  prefix.Restore(graph, s.op, &s.index, &s.e);
  if (!priced.ok()) return priced;
  return cycles;
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
  (void)coster;
  return PlanWriter(graph, plan, e, gemm_note, module).Write();
}

}  // namespace tilec::plan
