// The price of a GEMM recipe (docs/planner.md, "Cost model"): what the
// lowering emits for it, tile by tile, through the decisions of
// passes/core/tile_plan.h, in the order the passes take them:
// expand-reduce's partials dtype, then emit-device's K pieces.

#include <algorithm>
#include <map>
#include <utility>
#include <vector>

#include "formats/basics.h"
#include "formats/print.h"
#include "kernels/kernels.h"
#include "passes/core/tile_plan.h"
#include "passes/plan/cost.h"

namespace tilec::plan {
namespace {

using passes::Box;
using passes::GemmGrid;
using passes::Segments;

// The compute of one way of lowering the op: per phase group (compute
// phases with no exchange between them merge) the slowest tile's cycles.
struct Variant {
  std::vector<int64_t> group_max;
  int64_t gemm = 0;    // the slowest tile's GEMM calls
  int64_t copies = 0;  // the slowest tile's staging copies
  int64_t k_pieced = 0;
  int64_t compute = 0;
};

struct ExchangePhase {
  int64_t cycles = 0;
  int64_t bytes = 0;       // received, over all tiles
  passes::TileCodeBytes code;  // its exchange tables per tile
};

class GemmPricing {
 public:
  GemmPricing(const Coster& coster, const Graph& graph, int op,
              const Recipe& recipe, const fb::OwnershipT& source)
      : coster_(coster), graph_(graph), op_(op), r_(recipe), source_(source) {}

  // Serial row steps run one after another: each is priced as the lowering
  // emits it (its own staging, calls and reduction over its rows) and the
  // op costs their sum. The partials' dtype is chosen per step here, for
  // the op as a whole by expand-reduce; the steps differ by a row at most.
  StatusOr<OpCost> Price() {
    TILEC_RETURN_IF_ERROR(Prepare());
    FindLocalParts();
    OpCost total;
    for (step_ = 0; step_ < r_.steps; ++step_) {
      cost_ = OpCost();
      tiles_.clear();
      PriceStaging();
      TILEC_RETURN_IF_ERROR(PriceConversionsAndReductions());
      TILEC_RETURN_IF_ERROR(ChooseVariant());
      AddStep(&total);
    }
    cost_ = std::move(total);
    Describe();
    Scratch();
    return cost_;
  }

 private:
  const kernels::CostModel& model() const { return coster_.model(); }
  const fb::TargetT& target() const { return coster_.target(); }

  Status Prepare() {
    const OpNode& node = graph_.op(op_);
    a_ = &graph_.value(node.operands[0]);
    b_ = &graph_.value(node.operands[1]);
    out_ = &graph_.value(node.result);
    dtype_ = coster_.GemmDType(graph_, op_);
    ab_ = DTypeBytes(dtype_);
    StatusOr<kernels::DType> kdtype = kernels::DTypeFromFb(dtype_);
    if (!kdtype.ok()) return kdtype.status();
    kdtype_ = *kdtype;
    T_ = coster_.tiles();
    align_ = std::max(1, target().alignment);
    g_ = coster_.Grid(graph_, op_, r_);
    // Calls write the output directly (no K pieces then: an F16 output is
    // rounded once) unless staged calls accumulate in F32.
    to_value_ = r_.k == 1 && (!g_.staged || out_->dtype == fb::DType::F32);
    // The left operand is cast at its owners when priced in another dtype.
    if (dtype_ != a_->dtype) {
      const int64_t held = passes::MaxBytesPerTile(source_, a_->shape, 1);
      StatusOr<int64_t> cast = kernels::CastCycles(model(), 1, held);
      if (!cast.ok()) return cast.status();
      operand_cast_ = *cast;
      operand_copy_ = coster_.BytesPerTile(a_->shape, ab_, source_);
    }
    return Status::Ok();
  }

  // The parts of its panel each tile copies locally (tiles ascending, so
  // tile t's are local_boxes_[local_at_[t] .. local_at_[t + 1])), and how
  // the tiles with such parts store A.
  void FindLocalParts() {
    staged_ = coster_.StagedOwnership(r_);
    local_at_.assign(T_ + 1, 0);
    passes::ForEachLocalCopy(source_, staged_, a_->shape,
                             [&](int t, const Box& box) {
      if (t >= T_) return;
      local_boxes_.push_back(box);
      ++local_at_[t + 1];
    });
    for (int t = 0; t < T_; ++t) local_at_[t + 1] += local_at_[t];
    a_storage_.resize(T_);
    if (local_boxes_.empty()) return;
    passes::ForEachHeldBoxes(source_, a_->shape,
                             [&](int t, std::span<const Box> boxes) {
      if (t >= T_ || local_at_[t] == local_at_[t + 1]) return;
      a_storage_[t] = passes::Consecutive(boxes);
    });
  }
  std::span<const Box> LocalOf(int t) const {
    return {local_boxes_.data() + local_at_[t],
            static_cast<size_t>(local_at_[t + 1] - local_at_[t])};
  }

  // Step step_'s figures added to the op's.
  void AddStep(OpCost* total) {
    total->compute += cost_.compute;
    total->exchange += cost_.exchange;
    total->phases += cost_.phases;
    total->exchange_bytes += cost_.exchange_bytes;
    total->code = passes::AddTileCode(total->code, cost_.code);
    gemm_ += best_.gemm;
    copies_ += best_.copies;
    k_pieced_ = std::max(k_pieced_, best_.k_pieced);
  }

  // One phase for Complete staging; per chunk a phase carrying its share
  // of every tile's bytes and, at most, all of its fragments. Serial steps
  // cut the panel by rows the way chunks cut it by K.
  void PriceStaging() {
    chunks_ = g_.Chunks(0);  // part 0 has the largest depth
    const passes::TransferCost stage =
        coster_.Transfer(a_->shape, ab_, source_, staged_);
    staging_exchange_ = stage.transfers > 0;
    if (!staging_exchange_) return;
    const int64_t parts = int64_t{chunks_} * r_.steps;
    if (parts == 1) {
      cost_.exchange += stage.phase_cycles;
    } else {
      // Each chunk's phase carries its share of the payload and pays the
      // route latency and the sync of its own.
      const kernels::ExchangeModel x =
          kernels::ExchangeModel::FromTarget(target());
      const int64_t latency = x.RouteLatency(x.tiles - 1);
      const int64_t body = std::max<int64_t>(stage.scheduled_cycles - latency, 0);
      cost_.exchange += chunks_ * (ir::CeilDiv(body, parts) + latency +
                                   target().sync_cycles);
    }
    cost_.phases += chunks_;
    const passes::Split bytes{stage.bytes_received, r_.steps};
    cost_.exchange_bytes += bytes.Size(step_);
    // Chunks and steps split the same pieces; each further phase adds its
    // header.
    if (step_ == 0) {
      cost_.code = passes::AddTileCode(
          cost_.code, stage.tile_code,
          (parts - 1) * target().exchange_code_phase_bytes);
    }
  }

  // The partials' exchange (k > 1): tile (mi, ki, ni) sends each other
  // tile of its block the rows that tile reduces, one contiguous piece
  // each, timed by its schedule. It depends on the grid's rows, columns and
  // tiles and the partials' dtype alone: memoized for every source, operand
  // dtype and staging (quantize-fp8's FP8 trials reduce as F16 did).
  ExchangePhase PartialsExchange(fb::DType partials) const {
    ExchangePhase phase;
    if (r_.k <= 1) return phase;
    const std::string key =
        "partials " + std::to_string(g_.M) + "x" + std::to_string(g_.N) +
        " grid " + std::to_string(g_.m) + "," + std::to_string(g_.k) + "," +
        std::to_string(g_.n) + " tiles " + std::to_string(g_.first) + "+" +
        std::to_string(g_.stride) + " in " + ir::DTypeText(partials) +
        (r_.steps > 1 ? " step " + std::to_string(step_) + " of " +
                            std::to_string(r_.steps) +
                            (g_.interleaved ? " interleaved" : "")
                      : std::string());
    const passes::TransferCost timed =
        coster_.Phase(key, [&] { return TimePartials(partials); });
    phase.cycles = timed.phase_cycles;
    phase.bytes = timed.bytes_received;
    phase.code = timed.tile_code;
    return phase;
  }

  passes::TransferCost TimePartials(fb::DType partials) const {
    const int pb = DTypeBytes(partials);
    kernels::PhaseTraffic traffic(kernels::ExchangeModel::FromTarget(target()));
    int64_t received = 0;
    uint32_t piece = 0;
    for (int mi = 0; mi < g_.m; ++mi) {
      for (int ni = 0; ni < g_.n; ++ni) {
        const int64_t row_bytes = g_.cols.Size(ni) * pb;
        if (row_bytes == 0) continue;
        for (int ki = 0; ki < r_.k; ++ki) {
          const int from = g_.Tile(mi, ki, ni);
          for (int kj = 0; kj < r_.k; ++kj) {
            const int64_t bytes =
                passes::BoxRows(g_.StepResultBox(mi, kj, ni, step_)) *
                row_bytes;
            if (kj == ki || bytes == 0 || from >= T_ ||
                g_.Tile(mi, kj, ni) >= T_) {
              continue;
            }
            const int to[] = {g_.Tile(mi, kj, ni)};
            traffic.AddPiece(from, to, bytes, kernels::WordsSpanned(0, bytes),
                             piece++, 0);
            received += bytes;
          }
        }
      }
    }
    passes::TransferCost timed;
    passes::TimeExchange(traffic, target(), &timed, coster_.timing());
    timed.bytes_received = received;
    return timed;
  }

  // Every tile's reduction calls (all partials in one epoch) and, for a
  // staged k = 1 GEMM, its accumulator's conversion (the cheaper of a cast
  // and a one-partial reduction): the same in every variant.
  Status PriceConversionsAndReductions() {
    reduce_.assign(T_, 0);
    convert_.assign(T_, 0);
    for (int mi = 0; mi < g_.m; ++mi) {
      for (int ki = 0; ki < g_.k; ++ki) {
        for (int ni = 0; ni < g_.n; ++ni) {
          const int t = g_.Tile(mi, ki, ni);
          if (t >= T_) continue;
          const int64_t bm = g_.StepRowCount(mi, step_),
                        bn = g_.cols.Size(ni);
          if (bm == 0) continue;
          if (r_.k > 1) {
            const int64_t n = g_.StepResultBox(mi, ki, ni, step_).Elements();
            if (n == 0) continue;
            StatusOr<int64_t> c = kernels::ReducePartialsCycles(model(), n, r_.k);
            if (!c.ok()) return c.status();
            reduce_[t] = *c;
          } else if (!to_value_) {
            StatusOr<int64_t> cast = kernels::CastCycles(model(), bm, bn);
            StatusOr<int64_t> one =
                kernels::ReducePartialsCycles(model(), bm * bn, 1);
            if (!cast.ok()) return cast.status();
            if (!one.ok()) return one.status();
            convert_[t] = std::min(*cast, *one);
          }
        }
      }
    }
    return Status::Ok();
  }

  // Phase groups: C0 (copies of chunk 0), per chunk its calls with the
  // copies of the next, the last with the accumulator's conversion, then
  // the reduction; compute phases with no exchange between them merge.
  void MakeGroups(bool partials_exchange) {
    const int nphases = chunks_ + 2;
    group_.assign(nphases, 0);
    for (int c = 1; c < nphases; ++c) {
      const bool exchange_before =
          c <= chunks_ ? staging_exchange_ : partials_exchange;
      group_[c] = group_[c - 1] + (exchange_before ? 1 : 0);
    }
  }

  // What one tile adds to a variant's phases.
  void Add(Variant& v, int t, bool aliased, bool k_pieced,
           std::span<const int64_t> chunk_gemm,
           std::span<const int64_t> chunk_copies) const {
    std::vector<int64_t> sums(group_.back() + 1, 0);
    int64_t gemm = 0, copies = 0;
    if (aliased) {
      sums[group_[1]] += chunk_gemm[0];
      gemm = chunk_gemm[0];
    } else {
      const size_t n = chunk_gemm.size();
      sums[group_[0]] += chunk_copies[0];
      copies = chunk_copies[0];
      for (size_t i = 0; i < n; ++i) {
        sums[group_[i + 1]] +=
            chunk_gemm[i] + (i + 1 < n ? chunk_copies[i + 1] : 0);
        gemm += chunk_gemm[i];
      }
    }
    sums[group_[chunks_]] += convert_[t];
    sums[group_[chunks_ + 1]] += reduce_[t];
    for (size_t k = 0; k < sums.size(); ++k) {
      v.group_max[k] = std::max(v.group_max[k], sums[k]);
    }
    v.gemm = std::max(v.gemm, gemm);
    v.copies = std::max(v.copies, copies);
    v.k_pieced += k_pieced;
  }

  // Every grid tile's calls and copies with or without K pieces, and
  // whether every tile uses its local part in place (all_aliased_, which
  // the last call leaves): memoized by that and the phase groups, which
  // are all they depend on (the two partials dtypes' variants often share
  // both).
  StatusOr<Variant> PriceTiles(bool k_pieces) {
    const std::pair<bool, std::vector<int>> key = {k_pieces, group_};
    auto it = tiles_.find(key);
    if (it == tiles_.end()) {
      StatusOr<Variant> v = PlanTiles(k_pieces);
      if (!v.ok()) return v.status();
      it = tiles_.emplace(key, std::pair(*std::move(v), all_aliased_)).first;
    }
    all_aliased_ = it->second.second;
    return it->second.first;
  }

  // Coster::Floors(): no more than what tile t, which copies a part of A
  // it holds, adds to any phase group, found without planning its copies:
  // one call on its first chunk where its first calls go (it uses its
  // panel in place, one call on the whole panel, or copies into it and
  // calls on that chunk, whole or in K pieces: none cheaper than one call
  // on the chunk, as the kernel formulas are sums of ceilings), and its
  // conversion and reduction.
  Status AddCallsFloor(Variant& v, passes::GemmTilePlanner& planner, int t,
                       int mi, int ki, int ni) const {
    const int64_t first_chunk = std::min(g_.depth.Size(ki), g_.phase_k);
    StatusOr<int64_t> calls =
        planner.Gemm(g_.StepRowCount(mi, step_), first_chunk, g_.cols.Size(ni));
    if (!calls.ok()) return calls.status();
    std::vector<int64_t> sums(group_.back() + 1, 0);
    sums[group_[1]] += *calls;
    sums[group_[chunks_]] += convert_[t];
    sums[group_[chunks_ + 1]] += reduce_[t];
    for (size_t k = 0; k < sums.size(); ++k) {
      v.group_max[k] = std::max(v.group_max[k], sums[k]);
    }
    return Status::Ok();
  }

  StatusOr<Variant> PlanTiles(bool k_pieces) {
    Variant v;
    v.group_max.assign(group_.back() + 1, 0);
    passes::GemmTilePlanner planner(g_, model(), kdtype_, ab_, align_);
    passes::GemmTilePlan plan;
    passes::GemmTileGeometry geometry;
    // Tiles without a local part of A add what every such tile of the same
    // row block size, depth part and column block does: once is enough.
    std::vector<char> plain_seen(2 * static_cast<size_t>(g_.n) * g_.k, 0);
    std::vector<int64_t> chunk_gemm, chunk_copies;
    all_aliased_ = true;
    for (int mi = 0; mi < g_.m; ++mi) {
      for (int ki = 0; ki < g_.k; ++ki) {
        for (int ni = 0; ni < g_.n; ++ni) {
          const int t = g_.Tile(mi, ki, ni);
          if (t >= T_ || g_.StepRowCount(mi, step_) == 0) continue;
          passes::GemmTileInput in;
          in.mi = mi;
          in.ni = ni;
          in.ki = ki;
          in.step = step_;
          in.local = LocalOf(t);
          in.a_storage = in.local.empty() ? nullptr : &a_storage_[t];
          in.k_pieces = k_pieces;
          if (in.local.empty()) {
            all_aliased_ = false;
            const size_t key =
                (static_cast<size_t>(g_.rows.Size(mi) == g_.rows.Largest() ? 0 : 1) *
                     g_.k + ki) * g_.n + ni;
            if (plain_seen[key]) continue;
            plain_seen[key] = 1;
          } else if (coster_.gemm_floors()) {
            all_aliased_ = false;  // not known; a floor's bytes are not read
            TILEC_RETURN_IF_ERROR(AddCallsFloor(v, planner, t, mi, ki, ni));
            continue;
          }
          TILEC_RETURN_IF_ERROR(planner.Geometry(in, &geometry));
          TILEC_RETURN_IF_ERROR(planner.Plan(geometry, in, &plan));
          chunk_gemm.clear();
          chunk_copies.clear();
          for (const passes::GemmChunkPlan& c : plan.chunks) {
            chunk_gemm.push_back(c.gemm_cycles);
            chunk_copies.push_back(c.copy_cycles);
          }
          Add(v, t, plan.aliased, plan.k_pieced, chunk_gemm, chunk_copies);
          all_aliased_ = all_aliased_ && plan.aliased;
        }
      }
    }
    for (int64_t m : v.group_max) v.compute += m;
    return v;
  }

  // expand-reduce keeps 16-bit partials where they are cheaper; emit-device
  // then cuts staged panels into K pieces where the op gains (never with
  // 16-bit partials or a direct output, which several calls would round
  // again).
  // A lower bound must be no higher than the variant the schedule's prices
  // would choose: that may be F32 partials cut into K pieces (priced below
  // by compute alone), so narrow partials stay only if they beat it too.
  // The groups are x32's.
  Status KeepLowerBound(const Variant& v16, const ExchangePhase& x16,
                        const ExchangePhase& x32) {
    if (to_value_) return Status::Ok();
    StatusOr<Variant> pieced = PriceTiles(true);
    if (!pieced.ok()) return pieced.status();
    if (pieced->k_pieced > 0 &&
        pieced->compute + x32.cycles < v16.compute + x16.cycles) {
      partials_ = fb::DType::F32;
    }
    return Status::Ok();
  }

  Status ChooseVariant() {
    partials_ = fb::DType::F32;
    if (r_.k > 1) {
      const fb::DType narrow = passes::PartialsDType(g_, out_->dtype, true);
      if (narrow != fb::DType::F32) {
        const ExchangePhase x16 = PartialsExchange(narrow);
        MakeGroups(x16.bytes > 0);
        StatusOr<Variant> v16 = PriceTiles(false);
        if (!v16.ok()) return v16.status();
        const ExchangePhase x32 = PartialsExchange(fb::DType::F32);
        MakeGroups(x32.bytes > 0);
        StatusOr<Variant> v32 = PriceTiles(false);
        if (!v32.ok()) return v32.status();
        if (v16->compute + x16.cycles <= v32->compute + x32.cycles) {
          partials_ = narrow;
        }
        if (partials_ == narrow &&
            coster_.timing() == passes::PhaseTiming::kLowerBound) {
          TILEC_RETURN_IF_ERROR(KeepLowerBound(*v16, x16, x32));
        }
      }
    }
    reduction_ = PartialsExchange(partials_);
    MakeGroups(reduction_.bytes > 0);
    StatusOr<Variant> best = PriceTiles(false);
    if (!best.ok()) return best.status();
    best_ = *best;
    if (!to_value_ && partials_ == fb::DType::F32) {
      StatusOr<Variant> pieced = PriceTiles(true);
      if (!pieced.ok()) return pieced.status();
      if (pieced->k_pieced > 0 && pieced->compute < best_.compute) {
        best_ = *pieced;
      }
    }
    if (reduction_.bytes > 0) {
      cost_.exchange += reduction_.cycles;
      cost_.phases += 1;
      cost_.exchange_bytes += reduction_.bytes;
      cost_.code = passes::AddTileCode(cost_.code, reduction_.code);
    }
    // The operand is cast once, before the first step.
    cost_.compute = best_.compute + (step_ == 0 ? operand_cast_ : 0);
    return Status::Ok();
  }

  void Describe() {
    std::string& d = cost_.detail;
    d = "gemm " + std::to_string(gemm_) + " (" +
        std::to_string(g_.rows.Largest()) + "x" +
        std::to_string(g_.depth.Largest()) + "x" +
        std::to_string(g_.cols.Largest()) + " blocks";
    if (r_.steps > 1) {
      d += " in " + std::to_string(r_.steps) +
           (g_.interleaved ? " interleaved row steps" : " row steps");
    }
    if (k_pieced_ > 0) {
      d += ", K pieces on " + std::to_string(k_pieced_) + " tiles";
    }
    d += ")";
    if (copies_ > 0) d += " +local copies " + std::to_string(copies_);
    if (operand_cast_ > 0) {
      d += " +operand cast " + std::to_string(operand_cast_);
    }
    if (cost_.phases > 0) {
      d += " +exchange " + std::to_string(cost_.phases) + " phases " +
           std::to_string(cost_.exchange);
    }
    if (r_.k > 1) {
      d += " +reduce " + std::to_string(r_.k) + " " + ir::DTypeText(partials_) +
           " partials";
    }
  }

  // Scratch per grid tile at the largest block and step (the steps reuse
  // one set of buffers): the staging buffer (the panel, or two chunk
  // buffers) and the accumulator while the calls run; the accumulator and
  // the k - 1 remote partials of the tile's rows after.
  void Scratch() {
    const int64_t bm = g_.MostStepRows(0), bk = g_.depth.Largest(),
                  bn = g_.cols.Largest();
    const int pb = DTypeBytes(partials_);
    const int64_t partial_bytes = to_value_ ? 0 : bm * bn * pb;
    int64_t receive_bytes = 0;
    if (!all_aliased_) {
      receive_bytes = r_.staging == fb::Staging::Complete
                          ? bm * bk * ab_
                          : std::min(bm * bk, 2 * bm * g_.phase_k) * ab_;
    }
    int64_t remote_bytes = 0;
    if (r_.k > 1) {
      // Block 0 is a largest one.
      int64_t rows = 0;
      for (int ki = 0; ki < r_.k; ++ki) {
        rows = std::max(rows, g_.MostStepResultRows(0, ki));
      }
      remote_bytes = (r_.k - 1) * rows * bn * pb;
    }
    const int64_t peak =
        std::max(receive_bytes + partial_bytes, partial_bytes + remote_bytes);
    const int64_t grid = int64_t{r_.m} * r_.n * r_.k;
    auto scratch = std::make_shared<std::vector<int64_t>>(T_, 0);
    for (int64_t t = r_.first_tile; t < r_.first_tile + grid && t < T_; ++t) {
      (*scratch)[t] = peak;
    }
    int64_t copy_max = 0;
    if (operand_copy_) {
      for (size_t t = 0; t < scratch->size(); ++t) {
        (*scratch)[t] += (*operand_copy_)[t];
        copy_max = std::max(copy_max, (*operand_copy_)[t]);
      }
    }
    cost_.scratch = scratch;
    cost_.max_scratch = *std::max_element(scratch->begin(), scratch->end());
    cost_.scratch_text = "A staging " + std::to_string(receive_bytes) +
                         " B, partials " + std::to_string(partial_bytes) +
                         " B, reduction " + std::to_string(remote_bytes) + " B";
    if (operand_copy_) {
      cost_.scratch_text += ", cast operand " + std::to_string(copy_max) + " B";
    }
  }

  const Coster& coster_;
  const Graph& graph_;
  const int op_;
  const Recipe& r_;
  const fb::OwnershipT& source_;
  const ValueNode* a_ = nullptr;
  const ValueNode* b_ = nullptr;
  const ValueNode* out_ = nullptr;
  fb::DType dtype_ = fb::DType::F16;
  kernels::DType kdtype_ = kernels::DType::kF16;
  int ab_ = 2;
  int T_ = 0;
  int align_ = 8;
  GemmGrid g_;
  bool to_value_ = false;
  int64_t operand_cast_ = 0;
  TileBytes operand_copy_;
  fb::OwnershipT staged_;
  std::vector<Box> local_boxes_;
  std::vector<int> local_at_;
  std::vector<Segments> a_storage_;
  int chunks_ = 1;
  bool staging_exchange_ = false;
  std::vector<int64_t> reduce_, convert_;
  std::vector<int> group_;
  bool all_aliased_ = true;
  // PriceTiles' variants and all_aliased_, by K pieces and groups.
  std::map<std::pair<bool, std::vector<int>>, std::pair<Variant, bool>> tiles_;
  fb::DType partials_ = fb::DType::F32;
  ExchangePhase reduction_;
  Variant best_;
  OpCost cost_;
  int step_ = 0;  // the serial step being priced
  // Over the steps: the slowest tiles' GEMM calls and copies, and the most
  // K-pieced tiles of a step.
  int64_t gemm_ = 0, copies_ = 0, k_pieced_ = 0;
};

}  // namespace

StatusOr<OpCost> Coster::PriceGemm(const Graph& graph, int op, const Recipe& r,
                                   const fb::OwnershipT& source) const {
  GemmPricing pricing(*this, graph, op, r, source);
  return pricing.Price();
}

}  // namespace tilec::plan
