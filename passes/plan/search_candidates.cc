// The candidate recipes of one op that the planner's search considers
// (search_candidates.h): GEMM and attention grids ranked by their bounds,
// elementwise and row-wise layouts, and the layouts an op could adopt from
// its neighbours in a plan.

#include "passes/plan/search_candidates.h"

#include <algorithm>
#include <array>
#include <functional>
#include <limits>
#include <set>

#include "formats/basics.h"
#include "kernels/kernels.h"
#include "passes/core/split_row_plan.h"
#include "passes/plan/gemm_bound.h"

namespace tilec::plan {

// Part counts 1..min(extent, max_parts) that give distinct block sizes: for
// each block size the smallest count (fewest tiles for the same work).
Recipe LayoutRecipe(fb::RecipeKind kind, fb::OwnershipT layout) {
  Recipe r;
  r.kind = kind;
  r.layout = std::move(layout);
  return r;
}

fb::RecipeKind KindOf(OpClass c) {
  switch (c) {
    case OpClass::kAttention:
      return fb::RecipeKind::Attention;
    case OpClass::kGemm:
      return fb::RecipeKind::Gemm;
    case OpClass::kRowWise:
      return fb::RecipeKind::RowWise;
    case OpClass::kCopy:
      return fb::RecipeKind::Copy;
    case OpClass::kHost:
      return fb::RecipeKind::Host;
    default:
      return fb::RecipeKind::Elementwise;
  }
}

namespace {

struct Scored {
  int64_t score;
  int64_t tiebreak;
  Recipe recipe;
};

// Candidates' order: by score, then tiebreak, then recipe text.
bool Before(const Scored& a, const Scored& b) {
  if (a.score != b.score) return a.score < b.score;
  if (a.tiebreak != b.tiebreak) return a.tiebreak < b.tiebreak;
  return a.recipe.Text() < b.recipe.Text();
}

void SortScored(std::vector<Scored>& v) {
  std::stable_sort(v.begin(), v.end(), Before);
}

}  // namespace

void AddUnique(std::vector<Recipe>& list, std::set<std::string>& seen,
               const Recipe& r) {
  if (seen.insert(r.Text()).second) list.push_back(r);
}

namespace {

// The step counts memory repair offers a GEMM, fewest first.
constexpr std::array<int, 3> kRepairStepCounts = {2, 4, 8};

GemmShapeDTypes GemmShapeOf(const Graph& graph, const Coster& coster,
                            int op) {
  const OpNode& node = graph.op(op);
  const auto& a = graph.value(node.operands[0]).shape;
  const auto& b = graph.value(node.operands[1]).shape;
  GemmShapeDTypes gemm;
  gemm.M = a[0];
  gemm.K = a[1];
  gemm.N = b[1];
  gemm.inputs = coster.GemmDType(graph, op);
  gemm.result = graph.value(node.result).dtype;
  return gemm;
}

Recipe GridRecipe(const GemmBound& bound) {
  Recipe r;
  r.kind = fb::RecipeKind::Gemm;
  r.m = bound.m;
  r.k = bound.k;
  r.n = bound.n;
  return r;
}

// The grids of the first `fastest` of `bounds` (fastest first) and of the
// `leanest` that need the fewest `bytes`, each once.
std::vector<Recipe> FastestAndLeanest(
    const std::vector<GemmBound>& bounds, size_t fastest, size_t leanest,
    const std::function<int64_t(const GemmBound&)>& bytes) {
  std::vector<GemmBound> by_memory = bounds;
  std::stable_sort(by_memory.begin(), by_memory.end(),
                   [&](const GemmBound& x, const GemmBound& y) {
                     return bytes(x) < bytes(y);
                   });
  std::vector<Recipe> grids;
  std::set<std::string> seen;
  for (size_t i = 0; i < bounds.size() && i < fastest; ++i) {
    AddUnique(grids, seen, GridRecipe(bounds[i]));
  }
  for (size_t i = 0; i < by_memory.size() && i < leanest; ++i) {
    AddUnique(grids, seen, GridRecipe(by_memory[i]));
  }
  return grids;
}

// The grids with the best bounds (passes/plan/gemm_bound.h: kernel,
// delivery and reduction from the formulas alone), and the ones that need
// the least memory.
std::vector<Recipe> GemmCandidates(const Graph& graph, const Coster& coster,
                                   int op) {
  const GemmShapeDTypes gemm = GemmShapeOf(graph, coster, op);
  const int64_t K = gemm.K;
  const int granule = coster.KGranule(gemm.inputs);
  const std::vector<Recipe> grids = FastestAndLeanest(
      GridBounds(coster.model(), gemm, coster.tiles(),
                 std::numeric_limits<int64_t>::max()),
      32, 6, [](const GemmBound& b) { return b.bytes; });
  // Every grid with every staging: Complete; Streamed with 1, 2 and 4
  // granules per chunk; Batched(2) and Batched(4) of one-granule chunks.
  std::vector<Recipe> out;
  for (const Recipe& grid : grids) {
    const int64_t bk = ir::CeilDiv(K, grid.k);
    out.push_back(grid);
    for (int g : {1, 2, 4}) {
      if (g > 1 && g * granule >= bk) break;
      Recipe s = grid;
      s.staging = fb::Staging::Streamed;
      s.chunk_k = g * granule;
      out.push_back(s);
    }
    for (int batch : {2, 4}) {
      if (batch > 2 && batch * granule >= bk) break;
      Recipe s = grid;
      s.staging = fb::Staging::Batched;
      s.chunk_k = granule;
      s.batch_chunks = batch;
      out.push_back(s);
    }
  }
  return out;
}

// The dtypes an attention op's bound is priced in.
AttentionDTypes AttentionDTypesOf(const Graph& graph, int op) {
  const OpNode& node = graph.op(op);
  AttentionDTypes d;
  d.qkv = graph.value(node.operands[node.staged]).dtype;
  d.probs = node.kind == fb::OpKind::AttentionContext
                ? graph.value(node.operands[0]).dtype
                : d.qkv;
  d.result = graph.value(node.result).dtype;
  return d;
}

// Per-head grids ranked by their bound (passes/plan/gemm_bound.h: one
// kernel call on the largest block plus its operand blocks received at the
// exchange rate, ignoring where qkv and the probabilities lie); the
// fastest and the ones needing the least memory.
std::vector<Recipe> AttentionCandidates(const Graph& graph,
                                        const Coster& coster, int op) {
  Recipe unit;
  unit.kind = fb::RecipeKind::Attention;
  StatusOr<passes::AttentionGrid> base = AttentionGridOf(graph, op, unit);
  if (!base.ok()) return {};
  std::vector<GemmBound> by_time =
      AttentionGridBounds(coster.model(), *base,
                          AttentionDTypesOf(graph, op), coster.tiles(),
                          coster.capacity());
  std::vector<GemmBound> by_memory = by_time;
  std::stable_sort(by_memory.begin(), by_memory.end(),
                   [](const GemmBound& x, const GemmBound& y) {
                     return x.bytes < y.bytes;
                   });
  std::vector<Recipe> out;
  std::set<std::string> seen;
  auto add = [&](const GemmBound& bound) {
    Recipe r = unit;
    r.m = bound.m;
    r.n = bound.n;
    if (coster.CheckRecipe(graph, op, r).ok()) AddUnique(out, seen, r);
  };
  for (size_t i = 0; i < by_time.size() && i < 16; ++i) add(by_time[i]);
  for (size_t i = 0; i < by_memory.size() && i < 4; ++i) add(by_memory[i]);
  return out;
}

// A LayerNorm over column slices of its rows (passes/core/split_row_plan.h):
// the best `count` by `score` (ties by tiles used, then text) of, per row
// split, the two column splits that use the most tiles (fewer column parts
// leave tiles idle), except those whose gather alone, each tile receiving
// the other slices' partials at the exchange rate, takes longer than
// `best`, the cheapest row split. Each is priced first at its lower bound
// (`bound`) and then, in order of those bounds, by `score` until no
// remaining bound can enter the best `count`: the same list as scoring
// every one, without scheduling most gathers.
std::vector<Scored> SplitRowCandidates(
    const Graph& graph, const Coster& coster, int op, int64_t best,
    size_t count, const std::function<int64_t(const Recipe&)>& score,
    const std::function<int64_t(const Recipe&)>& bound) {
  const auto& shape = graph.value(graph.op(op).result).shape;
  const int64_t T = coster.tiles();
  std::vector<Scored> bounded;
  for (int p : DistinctSplits(shape[0], T)) {
    const std::vector<int> columns = DistinctSplits(shape[1], T / p);
    for (size_t i = columns.size(); i-- > 1 && i + 2 >= columns.size();) {
      const int c = columns[i];
      if (passes::GatherReceiveBound(ir::CeilDiv(shape[0], p), c,
                                     coster.target()) >= best) {
        continue;
      }
      const Recipe r = LayoutRecipe(fb::RecipeKind::RowWise,
                                    passes::BlockedOwnership({p, c}));
      const int64_t b = bound(r);
      if (b >= 0) bounded.push_back({b, int64_t{p} * c, r});
    }
  }
  SortScored(bounded);
  std::vector<Scored> split;
  for (Scored& next : bounded) {
    // Every candidate from here on scores at least next.score.
    if (split.size() >= count && Before(split[count - 1], next)) break;
    const int64_t s = score(next.recipe);
    if (s < 0) continue;
    next.score = s;
    split.insert(std::upper_bound(split.begin(), split.end(), next, Before),
                 std::move(next));
  }
  if (split.size() > count) split.resize(count);
  return split;
}

std::vector<Recipe> LayoutCandidates(const Graph& graph, const Coster& coster,
                                     int op) {
  const OpNode& node = graph.op(op);
  const ValueNode& out = graph.value(node.result);
  const int64_t T = coster.tiles();
  const fb::RecipeKind kind = KindOf(node.op_class);
  std::vector<Scored> scored;
  auto price = [&](const Coster& by, const Recipe& r) -> int64_t {
    if (!by.CheckRecipe(graph, op, r).ok()) return -1;
    if (node.op_class == OpClass::kCopy) return 0;
    StatusOr<OpCost> c = by.PriceOp(graph, op, r, nullptr);
    return c.ok() ? c->Cycles() : -1;
  };
  auto score = [&](const Recipe& r) { return price(coster, r); };
  auto add = [&](fb::OwnershipT layout, int64_t tiles_used) {
    const Recipe r = LayoutRecipe(kind, std::move(layout));
    const int64_t s = score(r);
    if (s >= 0) scored.push_back({s, tiles_used, r});
  };
  const auto& shape = out.shape;
  if (node.op_class == OpClass::kRowWise) {
    if (shape.size() == 2) {
      for (int p : DistinctSplits(shape[0], T)) {
        add(passes::BlockedOwnership({p, 1}), p);
      }
    } else if (shape.size() == 4) {
      for (int b : DistinctSplits(shape[0], T)) {
        for (int h : DistinctSplits(shape[1], T / b)) {
          for (int p : DistinctSplits(shape[2], T / (int64_t{b} * h))) {
            add(passes::BlockedOwnership({b, h, p, 1}), int64_t{b} * h * p);
          }
        }
      }
    }
    SortScored(scored);
    std::vector<Recipe> list;
    for (size_t i = 0; i < scored.size() && i < 24; ++i) {
      list.push_back(scored[i].recipe);
    }
    if (node.kind == fb::OpKind::LayerNorm && shape.size() == 2 &&
        !scored.empty()) {
      const Coster bounds = coster.timing() == passes::PhaseTiming::kScheduled
                                ? coster.LowerBounds()
                                : coster;
      for (const Scored& split : SplitRowCandidates(
               graph, coster, op, scored.front().score, 8, score,
               [&](const Recipe& r) { return price(bounds, r); })) {
        list.push_back(split.recipe);
      }
    }
    return list;
  }
  // Elementwise and copies: row groups x channel groups, rows only, and
  // flat grains of whole vectors over all tiles.
  for (int r : DistinctSplits(shape[0], T)) {
    for (int c : DistinctSplits(shape[1], T / r)) {
      add(passes::BlockedOwnership({r, c}), int64_t{r} * c);
    }
  }
  SortScored(scored);
  std::vector<Recipe> list;
  std::set<std::string> seen;
  if (node.op_class == OpClass::kCopy && out.given) {
    AddUnique(list, seen, LayoutRecipe(kind, *out.given));
  }
  for (size_t i = 0; i < scored.size() && i < 16; ++i) {
    AddUnique(list, seen, scored[i].recipe);
  }
  const int rows = static_cast<int>(std::min<int64_t>(shape[0], T));
  const Recipe rows_only =
      LayoutRecipe(kind, passes::BlockedOwnership({rows, 1}));
  if (coster.CheckRecipe(graph, op, rows_only).ok()) {
    AddUnique(list, seen, rows_only);
  }
  const int vector = std::max(1, coster.target().vector_elements);
  for (int grain : {vector, 2 * vector, 4 * vector, 16 * vector}) {
    const Recipe flat =
        LayoutRecipe(kind, passes::FlatOwnership(grain, static_cast<int>(T)));
    if (coster.CheckRecipe(graph, op, flat).ok()) AddUnique(list, seen, flat);
  }
  return list;
}

// The key of op's candidates in the coster's cache, naming everything
// GemmCandidates, AttentionCandidates and LayoutCandidates' row-wise lists
// read: the op's kind, its operands' and result's shapes and dtypes, the
// GEMM's kernel dtype or the attention grid's fields, and the coster's
// timing and capacity; nullopt for the other ops (an elementwise op's
// prices depend on more than shapes).
std::optional<std::string> CandidatesKey(const Graph& graph,
                                         const Coster& coster, int op) {
  const OpNode& node = graph.op(op);
  std::string key = std::to_string(static_cast<int>(node.kind));
  switch (node.op_class) {
    case OpClass::kGemm:
      key += " gemm in " +
             std::to_string(static_cast<int>(coster.GemmDType(graph, op)));
      break;
    case OpClass::kRowWise:
      key += " rowwise";
      break;
    case OpClass::kAttention: {
      Recipe unit;
      unit.kind = fb::RecipeKind::Attention;
      StatusOr<passes::AttentionGrid> grid = AttentionGridOf(graph, op, unit);
      if (!grid.ok()) return std::nullopt;
      key += " attention staged " + std::to_string(node.staged) +
             AttentionGridKey(*grid);
      break;
    }
    default:
      return std::nullopt;
  }
  auto add_value = [&](int v) {
    key += " " + ShapeKey(graph.value(v).shape) + "/" +
           std::to_string(static_cast<int>(graph.value(v).dtype));
  };
  for (int v : node.operands) add_value(v);
  key += " ->";
  add_value(node.result);
  return key + " timing " + std::to_string(static_cast<int>(coster.timing())) +
         " capacity " + std::to_string(coster.capacity());
}

std::vector<Recipe> UncachedCandidates(const Graph& graph, const Coster& coster,
                                       int op) {
  switch (graph.op(op).op_class) {
    case OpClass::kGemm:
      return GemmCandidates(graph, coster, op);
    case OpClass::kAttention:
      return AttentionCandidates(graph, coster, op);
    case OpClass::kHost: {
      Recipe host;
      host.kind = fb::RecipeKind::Host;
      return {host};
    }
    default:
      return LayoutCandidates(graph, coster, op);
  }
}

}  // namespace

std::vector<Recipe> Candidates(const Graph& graph, const Coster& coster,
                               int op) {
  const std::optional<std::string> key = CandidatesKey(graph, coster, op);
  if (key) {
    if (const std::vector<Recipe>* cached = coster.CachedCandidates(*key)) {
      return *cached;
    }
  }
  std::vector<Recipe> list = UncachedCandidates(graph, coster, op);
  if (key) coster.StoreCandidates(*key, list);
  return list;
}

std::vector<Recipe> NeighbourRecipes(const Graph& graph, const Coster& coster,
                                     const Plan& plan, const Evaluation& eval,
                                     int op) {
  const OpNode& node = graph.op(op);
  std::vector<Recipe> out;
  if (node.op_class == OpClass::kGemm || node.op_class == OpClass::kAttention ||
      node.op_class == OpClass::kHost) {
    return out;
  }
  const fb::RecipeKind kind = KindOf(node.op_class);
  std::set<std::string> seen;
  auto consider = [&](const fb::OwnershipT& layout) {
    const Recipe r = LayoutRecipe(kind, layout);
    if (coster.CheckRecipe(graph, op, r).ok()) AddUnique(out, seen, r);
  };
  for (size_t slot = 0; slot < node.operands.size(); ++slot) {
    const SlotRole role = node.slots[slot];
    if (role != SlotRole::kLayout && role != SlotRole::kSource) continue;
    const int v = node.operands[slot];
    if (eval.owned[v]) consider(OwnershipOf(graph, eval, v));
  }
  const int last = static_cast<int>(eval.ops.size()) - 1;
  for (const auto& [c, slot] : graph.value(node.result).uses) {
    if (c > last) continue;
    std::optional<fb::OwnershipT> need =
        coster.Required(graph, c, plan.recipes[c], slot);
    if (need) consider(*need);
  }
  return out;
}

std::vector<Recipe> SteppedGridCandidates(const Graph& graph,
                                          const Coster& coster, int op) {
  if (graph.op(op).op_class != OpClass::kGemm) return {};
  std::vector<GemmBound> split;
  for (const GemmBound& b :
       GridBounds(coster.model(), GemmShapeOf(graph, coster, op),
                  coster.tiles(), std::numeric_limits<int64_t>::max())) {
    if (b.k > 1) split.push_back(b);
  }
  // In S steps a tile holds its whole weight block and about 1/S of the
  // rest (A rows, partial, remote partials): ranked at the most steps
  // repair offers.
  return FastestAndLeanest(split, 16, 6, [](const GemmBound& b) {
    return b.weight_bytes +
           (b.bytes - b.weight_bytes) / kRepairStepCounts.back();
  });
}

std::vector<Recipe> SerialStepVariants(const Graph& graph, int op,
                                       const Recipe& recipe,
                                       bool interleaved) {
  std::vector<Recipe> out;
  if (recipe.kind != fb::RecipeKind::Gemm) return out;
  const int64_t M = graph.value(graph.op(op).operands[0]).shape[0];
  const int64_t block_rows = ir::CeilDiv(M, recipe.m);
  // Interleaved steps cut every reducer's part: at least a row each.
  const int64_t reduced_rows = M / recipe.m / recipe.k;
  for (int steps : kRepairStepCounts) {
    if (steps > block_rows) break;
    Recipe r = recipe;
    r.steps = steps;
    r.interleaved_steps = false;
    out.push_back(r);
    if (interleaved && recipe.k > 1 && steps <= reduced_rows) {
      r.interleaved_steps = true;
      out.push_back(r);
    }
  }
  return out;
}

}  // namespace tilec::plan
