#include "passes/quantize/quantize.h"

#include <glog/logging.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <thread>

#include "flatbuffers/flatbuffers.h"
#include "formats/ir.h"
#include "formats/print.h"
#include "formats/repeat.h"
#include "kernels/kernel_names.h"
#include "passes/plan/cost.h"
#include "passes/plan/graph.h"
#include "passes/plan/price_cache.h"
#include "passes/plan/search.h"
#include "passes/quantize/policy.h"
#include "passes/quantize/scale.h"
#include "passes/quantize/support.h"
#include "passes/quantize/trial_prices.h"
#include "sim/accuracy.h"
#include "sim/inputs.h"
#include "sim/tensor_data.h"

namespace tilec::quantize {

using passes::Numbers;
using passes::Thousands;

using ir::CloneModule;
using sim::AccuracyText;
using sim::CompareOutputs;
using sim::OutputAccuracy;

namespace {

// Why one operand kept in its dtype keeps its GEMM's others too.
constexpr char kAllOrNone[] =
    "; the GEMM kernel takes both operands FP8 or both in their own dtype";

class Quantizer {
 public:
  Quantizer(const QuantizeOptions& options, const passes::PassOptions& common,
            fb::ModuleT* module, passes::DecisionLog* log)
      : options_(options), common_(&common), module_(module), log_(log) {}

  StatusOr<bool> Run() {
    for (const auto& v : module_->values) {
      if (v->fp8_quantized) {
        return Status::BadInput(ValueLabel(*v) +
                                " is quantized already: quantize-fp8 runs once "
                                "on a graph");
      }
    }
    if (!module_->target) return Status::BadInput("the module has no target");
    if (options_.place_by_cost) {
      StatusOr<plan::Coster> coster =
          plan::Coster::Create(*module_->target, {});
      if (!coster.ok()) return coster.status();
      coster_ = std::move(*coster);
      plan::TakeSavedPrices(passes::kQuantizeFp8Info.name, *common_, *coster_);
    }
    if (!options_.policy_text.empty()) {
      StatusOr<Policy> policy =
          ParsePolicy(options_.policy_text, options_.policy_name, *module_);
      if (!policy.ok()) return policy.status();
      policy_ = std::move(*policy);
    }
    std::optional<AheadThread> ahead;
    if (options_.place_by_cost && options_.threads > 1) {
      prices_ = std::make_shared<TrialPrices>(
          *coster_, options_.save_initial_plan != nullptr);
      helper_start_ = std::make_shared<Quantizer>(AheadStart());
      helper_module_ = CloneModule(*module_);
      ahead.emplace(prices_, StartPricingAhead());
    }
    StatusOr<Priced> base = CalibrateAndPriceBase();
    if (!base.ok()) return base.status();
    baseline_ = current_ = *base;
    if (prices_) prices_->PassDeciding();
    StatusOr<bool> changed = Decide();
    if (prices_) prices_->Stop();
    if (!changed.ok()) return changed.status();
    if (*changed) TILEC_RETURN_IF_ERROR(LogAccuracy());
    LogSummary();
    TILEC_RETURN_IF_ERROR(SaveInitialPlan());
    return *changed;
  }

  // The prices its trial plans made, for the passes after it
  // (--price_cache); after Run, whose threads have stopped.
  Status SavePrices() const {
    if (!coster_) return Status::Ok();
    return plan::SavePassPrices(*common_, *coster_);
  }

 private:
  struct Calibration {
    MagnitudeHistogram magnitudes;
    uint32_t iterations = 0;  // tensors added
  };
  // The calibration run and what it measured: written by Calibrate, then
  // only read (the replays pricing ahead have stand-ins).
  struct Measured {
    kernels::ReferenceOptions reference;
    kernels::ReferenceResult unquantized;  // its inputs and outputs
    // The magnitudes of each GEMM's left operand over every iteration.
    std::map<uint32_t, Calibration> activations;
    // The unrounded magnitudes of each GEMM's right operand and its twins,
    // taken from the calibration run so that no weight is generated again;
    // empty where the run did not make it.
    std::map<uint32_t, std::optional<MagnitudeHistogram>> weights;
  };

  // The thread pricing trials ahead of the decisions (Speculate): stopped
  // and joined wherever Run returns.
  class AheadThread {
   public:
    AheadThread(std::shared_ptr<TrialPrices> prices, std::thread thread)
        : prices_(std::move(prices)), thread_(std::move(thread)) {}
    ~AheadThread() {
      prices_->Stop();
      thread_.join();
    }

   private:
    std::shared_ptr<TrialPrices> prices_;
    std::thread thread_;
  };

  // Every decision in order: each MatMul's operands, attention's GEMMs,
  // each kept cast's place. Whether any changed the module.
  StatusOr<bool> Decide() {
    bool changed = false;
    // Ids of the MatMuls first: the loop inserts Cast ops.
    std::vector<uint32_t> gemms;
    for (const auto& op : module_->ops) {
      if (op->kind == fb::OpKind::MatMul) gemms.push_back(op->id);
    }
    for (uint32_t id : gemms) {
      StatusOr<bool> q = QuantizeGemm(id);
      if (!q.ok()) return q.status();
      changed = changed || *q;
    }
    TILEC_RETURN_IF_ERROR(RepairFromNowOnIfNeeded());
    StatusOr<bool> attention = QuantizeAttentionGemms();
    if (!attention.ok()) return attention.status();
    changed = changed || *attention;
    for (const Cast& cast : casts_) TILEC_RETURN_IF_ERROR(PlaceCast(cast));
    return changed;
  }

  // A thread that plans the unquantized graph while the pass calibrates,
  // then replays the decisions on a copy of the module, pricing the trial
  // the pass is expected to make next: while the reference run still
  // calibrates, and then while the pass prices its own trial. A trial's
  // price does not depend on the scales and statistics the calibration
  // measures (TrialPrices), so the replays take stand-ins for them (where
  // one changes a decision, a value calibrated all zero, the replays price
  // trials the pass never asks for: time lost, not bytes). Each decision
  // takes the price of exactly its trial graph, whoever made it, so the
  // decisions are the ones a single thread makes.
  std::thread StartPricingAhead() const {
    return std::thread(
        [start = AheadStart(), module = CloneModule(*module_)]() mutable {
          start.Speculate(*module);
        });
  }

  // A copy of the pass before calibration that replays its decisions ahead,
  // with stand-ins for the magnitudes calibration measures.
  Quantizer AheadStart() const {
    Quantizer start = *this;
    start.ahead_ = true;
    start.measured_ = std::make_shared<Measured>();
    ListMeasured(start.measured_.get());
    const std::vector<float> unit = {1.0f};
    for (auto& [id, c] : start.measured_->activations) {
      c.magnitudes.Add(unit);
      c.iterations = 1;
    }
    for (auto& [id, w] : start.measured_->weights) {
      w.emplace();
      w->Add(unit);
    }
    return start;
  }

  // While the pass waits for a price the thread pricing ahead is making,
  // its own thread would idle (a small graph calibrates in a moment; then
  // the pass waits for the unquantized graph's price, and then for each
  // trial that thread guessed): one replay of the decisions as Speculate
  // makes them, from the graph before calibration, which counts a pending
  // trial as accepted and prices the first one no thread has claimed
  // unless it is a repaired one.
  // Until the unquantized graph is priced, the replay compares with a
  // stand-in that every trial beats, as a pending trial would. True if it
  // priced one. Replays on this thread share their stand-ins
  // (helper_start_), never the other thread's.
  bool HelpPriceAhead() {
    Quantizer replay = *helper_start_;
    std::optional<StatusOr<Priced>> base;
    if (prices_->PriceAhead(*helper_module_, replay.repair_, /*claim=*/false,
                            &base) == TrialPrices::Ahead::kKnown) {
      if (!base->ok()) return false;
      replay.baseline_ = replay.current_ = **base;
    } else {
      replay.baseline_ =
          replay.current_ = {.feasible = true,
                             .repaired = replay.repair_,
                             .cycles = std::numeric_limits<int64_t>::max() / 2};
    }
    replay.helping_ = true;
    return replay.ReplayPricedOne(*helper_module_);
  }

  // Prices `module` (the unquantized graph), then replays Decide from
  // there on copies of it until the prices stop, each replay priced by
  // PriceAhead. A replay that priced a trial restarts at once, with every
  // price made meanwhile; one that found none to price waits for the next
  // price claimed or made.
  void Speculate(const fb::ModuleT& module) {
    const StatusOr<Priced> base = prices_->Price(module, repair_);
    if (!base.ok()) return;  // the pass reports it
    baseline_ = current_ = *base;
    while (!prices_->stopped()) {
      const int64_t seen = prices_->version();
      if (!ReplayPricedOne(module)) prices_->WaitForChange(seen);
    }
  }

  // One replay of the decisions by a copy of this one on a copy of
  // `module`; whether it priced a trial.
  bool ReplayPricedOne(const fb::ModuleT& module) const {
    std::unique_ptr<fb::ModuleT> copy = CloneModule(module);
    // No limit: the pass's --max-decisions only makes some guesses wrong.
    passes::DecisionLog scratch;
    Quantizer replay = *this;
    replay.module_ = copy.get();
    replay.log_ = &scratch;
    // The pass reports the decisions' outcome; a replay's only prices.
    static_cast<void>(replay.Decide());
    return replay.priced_ahead_;
  }

  // A replay's price: a trial's made by any thread; a trial the pass is
  // pricing counts as accepted (the usual outcome: just cheaper than now),
  // so that the replay reaches the one after it; a trial no thread has
  // reached is priced here while the pass calibrates or past such a guess
  // (else it is the pass's next: the replay waits for the pass to claim
  // it). The replay ends (an error) once it has priced or waits.
  StatusOr<Priced> PriceAhead(const fb::ModuleT& m) {
    std::optional<StatusOr<Priced>> price;
    // The pass's own replays claim no repaired trial: one takes both cores
    // for seconds to minutes, while the pass may need its thread back as
    // soon as the price it waits for is made.
    const bool claim =
        (guessed_ || !prices_->pass_deciding()) && !(helping_ && repair_);
    switch (prices_->PriceAhead(m, repair_, claim, &price)) {
      case TrialPrices::Ahead::kKnown:
        return *price;
      case TrialPrices::Ahead::kPending:
        guessed_ = true;
        return Priced{.feasible = true,
                      .repaired = repair_,
                      .cycles = current_.cycles - 1,
                      .peak = current_.peak};
      case TrialPrices::Ahead::kMadeHere:
        priced_ahead_ = true;
        break;
      case TrialPrices::Ahead::kAbsent:
        break;
    }
    return Status::Internal("the replay ends here");
  }

  struct Cast {
    uint32_t op = 0;      // the Cast op
    uint32_t input = 0;   // the F16 value
    uint32_t output = 0;  // the FP8 value the GEMMs read
  };

  // The current plan's figures on both sides: a refusal changes nothing.
  Numbers Unchanged() const {
    return {current_.cycles, current_.cycles, current_.peak, current_.peak};
  }

  StatusOr<Priced> Price(const fb::ModuleT& m) {
    if (!options_.place_by_cost) return Priced{.feasible = true};
    if (!prices_) {
      return PriceByPlanning(m, *coster_, repair_,
                             options_.save_initial_plan != nullptr);
    }
    if (ahead_) return PriceAhead(m);
    return prices_->Price(m, repair_, [this] { return HelpPriceAhead(); });
  }

  // The decisions by cost compare plans that fit: when the graph with its
  // GEMMs decided does not fit as the greedy plan leaves it (a batch whose
  // activations crowd the weights), they compare the plans memory repair
  // makes of it, as plan-ownership will. Before that point repair is not
  // run: a graph whose weights do not fit yet is priced by its closest
  // plan (docs/quantize.md).
  Status RepairFromNowOnIfNeeded() {
    if (current_.feasible || !options_.place_by_cost) return Status::Ok();
    repair_ = true;
    StatusOr<Priced> repaired = Price(*module_);
    if (!repaired.ok()) return repaired.status();
    // Where even repair finds no plan that fits, repairing each trial would
    // cost minutes for nothing: they compare closest plans, as before.
    repair_ = repaired->feasible;
    log_->Info({},
               repair_ ? "price the decisions by cost after memory repair"
                       : "price the decisions by cost by their closest plans",
               "the graph with its GEMMs decided " + PricedText(current_) +
                   " as the greedy plan leaves it; repaired: " +
                   PricedText(*repaired),
               {current_.cycles, repaired->cycles, current_.peak,
                repaired->peak});
    if (repair_) current_ = *repaired;
    return Status::Ok();
  }

  // Calibrate, and the unquantized graph's price, which with two threads
  // or more the thread pricing ahead plans while the reference runs (it
  // only reads the module; the run only fills the measurements); a
  // calibration error comes first either way.
  StatusOr<Priced> CalibrateAndPriceBase() {
    TILEC_RETURN_IF_ERROR(Calibrate());
    return Price(*module_);
  }

  // The values calibration measures, as keys of `m`'s maps: every GEMM's
  // left operand and every attention GEMM's operands (activations), every
  // MatMul's right operand and its twins (weights).
  void ListMeasured(Measured* m) const {
    for (const auto& op : module_->ops) {
      if (op->kind == fb::OpKind::MatMul && !op->operands.empty()) {
        m->activations[op->operands[0]];
      }
      if (op->kind == fb::OpKind::MatMul && op->operands.size() > 1) {
        m->weights[op->operands[1]];
        for (uint32_t twin : TwinsOf(op->operands[1])) m->weights[twin];
      }
      // An attention GEMM's operands are all activations.
      if (op->kind != fb::OpKind::MatMul && IsQuantizableGemm(op->kind)) {
        for (uint32_t id : op->operands) m->activations[id];
      }
    }
  }

  // One reference run of the unquantized graph: the magnitudes of every
  // GEMM's left operand over every iteration and of every right operand's
  // (and twin's) unrounded contents as the run makes them, and the inputs
  // and outputs that LogAccuracy compares with (nothing else is kept:
  // memory does not grow with the layers).
  Status Calibrate() {
    measured_->reference.sidecar_dir = options_.sidecar_dir;
    measured_->reference.threads = options_.threads;
    if (!options_.calibration_dir.empty()) {
      TILEC_RETURN_IF_ERROR(kernels::LoadInputs(
          *module_, options_.calibration_dir, &measured_->reference.provided));
      TILEC_RETURN_IF_ERROR(CheckCalibration(*module_, options_.calibration_dir,
                                             measured_->reference.provided));
    }
    ListMeasured(measured_.get());
    kernels::ReferenceOptions run = measured_->reference;
    run.keep = kernels::ReferenceOptions::Keep::kInputsAndOutputs;
    run.observe = [this](const kernels::ReferenceTensor& t,
                         uint32_t iteration) { Observe(t, iteration); };
    // The map's keys are all in place, so threads making different values
    // write different entries; a value made again is measured afresh.
    run.observe_source = [this](const fb::ValueT& v,
                                std::span<const float> unrounded) {
      auto it = measured_->weights.find(v.id);
      if (it == measured_->weights.end()) return;
      MagnitudeHistogram h;
      h.Add(unrounded);
      it->second = h;
    };
    TILEC_RETURN_IF_ERROR(
        kernels::RunReference(*module_, run, &measured_->unquantized));
    return CalibrateSources();
  }

  // What a body activation holds in each iteration; a repeat's carried_out
  // is also what its carried_in holds in the next iteration.
  void Observe(const kernels::ReferenceTensor& t, uint32_t iteration) {
    auto add = [&](uint32_t id) {
      auto it = measured_->activations.find(id);
      if (it == measured_->activations.end()) return;
      it->second.magnitudes.Add(t.data);
      ++it->second.iterations;
    };
    add(t.id);
    for (const auto& r : module_->repeats) {
      if (t.id == r->carried_out && iteration + 1 < r->count) {
        add(r->carried_in);
      }
    }
  }

  // Activations no op makes (graph inputs, a carried_in's first data): the
  // run's kept inputs, or the value's own contents.
  Status CalibrateSources() {
    for (auto& [id, c] : measured_->activations) {
      if (ProducerIndex(*module_, id) >= 0) continue;
      const kernels::ReferenceTensor* t = measured_->unquantized.Find(id);
      std::vector<float> data;
      if (t != nullptr && !t->data.empty()) {
        c.magnitudes.Add(t->data);
      } else {
        TILEC_RETURN_IF_ERROR(kernels::MaterializeValue(
            *FindValue(*module_, id), options_.sidecar_dir, &data));
        c.magnitudes.Add(data);
      }
      ++c.iterations;
    }
    return Status::Ok();
  }

  const ValueRule* Rule(uint32_t value) const {
    auto it = policy_.values.find(value);
    return it == policy_.values.end() ? nullptr : &it->second;
  }
  std::string RuleText(const ValueRule& r) const {
    return options_.policy_name + ":" + std::to_string(r.line);
  }

  // Format and exponent for a value from the policy or the defaults, or a
  // reason it stays as it is.
  struct Choice {
    fb::DType dtype = fb::DType::FP8E4M3;
    int scale_exp = 0;
    MagnitudeHistogram magnitudes;  // what the stats are measured on
    std::string source;           // how the exponent was chosen
    std::string refusal;
  };

  // `rule`: the policy's for `v` (for a twin, its body weight's).
  Choice Choose(const fb::ValueT& v, bool weight, const ValueRule* rule) {
    Choice c;
    c.dtype = weight ? options_.weight_format : options_.activation_format;
    if (rule != nullptr && rule->keep) {
      c.refusal = ValueLabel(v) + " is kept in " + ir::DTypeText(v.dtype) +
                  " by " + RuleText(*rule);
      return c;
    }
    if (rule != nullptr) c.dtype = rule->dtype;
    if (v.dtype != fb::DType::F16 && v.dtype != fb::DType::F32 &&
        v.dtype != fb::DType::BF16) {
      c.refusal = ValueLabel(v) + " is " + ir::DTypeText(v.dtype) +
                  " already";
      return c;
    }
    uint32_t iterations = 1;
    if (weight) {
      auto it = measured_->weights.find(v.id);
      if (it != measured_->weights.end() && it->second.has_value()) {
        c.magnitudes = *it->second;
      } else {
        // Not made by the calibration run: from its own contents.
        std::vector<float> contents;
        Status s =
            kernels::MaterializeUnrounded(v, options_.sidecar_dir, &contents);
        if (!s.ok()) {
          c.refusal = s.message();
          return c;
        }
        c.magnitudes.Add(contents);
      }
    } else if (auto it = measured_->activations.find(v.id);
               it != measured_->activations.end()) {
      c.magnitudes = it->second.magnitudes;
      iterations = it->second.iterations;
    }
    const float amax = c.magnitudes.amax();
    const int margin = weight ? options_.weight_margin : options_.activation_margin;
    if (rule != nullptr && rule->scale_exp) {
      c.scale_exp = *rule->scale_exp;
      c.source = "exponent fixed by " + RuleText(*rule);
    } else if (!(amax > 0)) {
      c.refusal = ValueLabel(v) + (weight ? " is all zero" :
                  " is all zero on the calibration input") +
                  ": no scale to choose";
      return c;
    } else {
      c.scale_exp = ChooseScaleExp(amax, FormatOf(c.dtype), margin);
      c.source = "amax " + ir::NumberText(amax) + ", margin " +
                 std::to_string(margin) + (weight ? "" : ", calibrated");
      if (iterations > 1) {
        c.source += " over " + std::to_string(iterations) + " iterations";
      }
    }
    return c;
  }

  // Both operands of MatMul `id` to FP8, or a refusal with its reason.
  StatusOr<bool> QuantizeGemm(uint32_t id) {
    fb::OperationT* op = FindOp(id);
    const std::vector<uint32_t> ids = {id};
    const std::string action = "quantize " + OpLabel(*op) + " operands to FP8";
    if (policy_.excluded_ops.count(id)) {
      log_->Reject(ids, action, "excluded by " + options_.policy_name,
                   Unchanged());
      return false;
    }
    // Pointers into module_ stay valid until the swap below; the trial's
    // copies are read for the reason.
    const fb::ValueT* a = FindValue(*module_, op->operands[0]);
    const fb::ValueT* w = FindValue(*module_, op->operands[1]);
    if (a == nullptr || w == nullptr) {
      return Status::BadInput(OpLabel(*op) + " names a missing operand");
    }
    const uint32_t a_id = a->id;
    const uint32_t w_id = w->id;
    // The weight is quantized in place, so every reader must take it FP8.
    std::string refusal;
    if (w->role != fb::ValueRole::Weight || ProducerIndex(*module_, w->id) >= 0) {
      refusal = ValueLabel(*w) + " is not a weight (an activation right "
                "operand is not quantized)";
    }
    for (const auto& [i, slot] : Uses(*module_, w->id)) {
      const fb::OperationT& user = *module_->ops[i];
      if (refusal.empty() && (user.kind != fb::OpKind::MatMul || slot != 1 ||
                              policy_.excluded_ops.count(user.id))) {
        refusal = ValueLabel(*w) + " is also read by " + OpLabel(user) +
                  ", which does not take it in FP8";
      }
    }
    Choice ac;
    WeightChoice wc;
    const bool weight_done = w->fp8_quantized;  // shared with an earlier GEMM
    if (refusal.empty() && !weight_done) refusal = ChooseWeight(*w, &wc);
    auto existing = quantized_activation_.find(a->id);
    if (refusal.empty() && existing == quantized_activation_.end()) {
      ac = Choose(*a, false, Rule(a->id));
      refusal = ac.refusal;
    }
    if (!refusal.empty()) {
      log_->Reject(ids, action, refusal + kAllOrNone, Unchanged());
      return false;
    }
    // Price the quantized graph (cast as a Cast op, the conservative form;
    // placement is decided afterwards) against the current one.
    std::unique_ptr<fb::ModuleT> trial = CloneModule(*module_);
    Cast cast;
    ApplyGemm(trial.get(), id, weight_done ? nullptr : &wc,
              existing == quantized_activation_.end() ? &ac : nullptr, &cast);
    if (Status rolled = ir::VerifyRepeats(*trial); !rolled.ok()) {
      log_->Reject(ids, action, "quantized, " + rolled.message(), Unchanged());
      return false;
    }
    StatusOr<Priced> after = Price(*trial);
    if (!after.ok()) return after.status();
    const fb::ValueT* wq = FindValue(*trial, w->id);
    const fb::ValueT* aq = FindValue(*trial, cast.output);
    std::string reason =
        "weight " + ValueLabel(*w) + " " + StatsText(*wq) +
        (weight_done ? " (quantized for an earlier GEMM)"
                     : ", " + wc.body.source) +
        "; activation " + ValueLabel(*a) + " -> " + ValueLabel(*aq) + " " +
        StatsText(*aq) +
        (existing != quantized_activation_.end() ? " (cast for an earlier GEMM)"
                                                 : ", " + ac.source) +
        "; planned: F16 " + PricedText(current_) + ", FP8 " +
        PricedText(*after);
    // A graph that does not fit in F16 may fit only once every GEMM is
    // FP8 (a whole model's weights): while nothing fits, a GEMM is
    // quantized when its FP8 weights bring the closest plan nearer to
    // fitting.
    const bool nearer = NearerToFitting(*after, current_);
    if (!after->feasible && !nearer) {
      log_->Reject(ids, action, reason, {current_.cycles, current_.cycles, 0, 0});
      return false;
    }
    if (nearer) {
      reason += "; neither fits yet, FP8 brings " + NearerText(*after, current_);
    }
    const Numbers numbers{current_.cycles, after->cycles, current_.peak,
                          after->peak};
    if (!log_->Apply(ids, action, reason, numbers)) return false;
    module_->values.swap(trial->values);
    module_->ops.swap(trial->ops);
    current_ = *after;
    if (existing == quantized_activation_.end()) {
      quantized_activation_[a_id] = cast.output;
      casts_.push_back(cast);
    }
    if (!wc.twins.empty()) LogTwins(id, w_id, wc);
    return true;
  }

  // A weight's choice and, for a repeat's body weight, its twins' (the
  // same weight in later iterations), each scaled from its own contents.
  struct WeightChoice {
    Choice body;
    std::vector<std::pair<uint32_t, Choice>> twins;
  };

  // The twins of body weight `weight` in iteration order (none if it is
  // not one).
  std::vector<uint32_t> TwinsOf(uint32_t weight) const {
    std::vector<uint32_t> twins;
    for (const auto& r : module_->repeats) {
      for (size_t j = 0; j < r->weights.size(); ++j) {
        if (r->weights[j] != weight) continue;
        for (uint32_t it = 1; it < r->count; ++it) {
          twins.push_back(ir::IterationWeights(*r, it).at(weight));
        }
      }
    }
    return twins;
  }

  // Fills `wc`; returns the refusal, "" if every iteration's weight can be
  // quantized. A policy rule on a body weight rules its twins too.
  std::string ChooseWeight(const fb::ValueT& w, WeightChoice* wc) {
    wc->body = Choose(w, true, Rule(w.id));
    if (!wc->body.refusal.empty()) return wc->body.refusal;
    for (uint32_t id : TwinsOf(w.id)) {
      Choice c = Choose(*FindValue(*module_, id), true, Rule(w.id));
      if (!c.refusal.empty())
        return c.refusal + " (a twin of " + ValueLabel(w) + ")";
      wc->twins.emplace_back(id, std::move(c));
    }
    // One scale for every iteration's weight, as for a body activation:
    // the body's program moves and reads the weight through buffers of one
    // scale whatever the iteration (docs/repeat.md), so the exponent is
    // the smallest, the one that fits the largest magnitude of them all.
    int common = wc->body.scale_exp;
    for (const auto& [id, c] : wc->twins) common = std::min(common, c.scale_exp);
    if (!wc->twins.empty()) {
      wc->body.source += ", exponent " + std::to_string(common) +
                         " shared with its " +
                         std::to_string(wc->twins.size()) +
                         " twins (the one that fits them all)";
    }
    wc->body.scale_exp = common;
    for (auto& [id, c] : wc->twins) c.scale_exp = common;
    return "";
  }

  // One line for a body GEMM's twins: their scales and statistics in
  // summary (dump-ir shows each).
  void LogTwins(uint32_t gemm, uint32_t weight, const WeightChoice& wc) {
    std::map<int, int> exps;
    float amax_min = 0, amax_max = 0;
    double saturated = 0, flushed = 0;
    fb::DType dtype = wc.body.dtype;
    for (size_t i = 0; i < wc.twins.size(); ++i) {
      const fb::ValueT& t = *FindValue(*module_, wc.twins[i].first);
      ++exps[t.fp8_scale_exp];
      amax_min = i == 0 ? t.fp8_amax : std::min(amax_min, t.fp8_amax);
      amax_max = std::max(amax_max, t.fp8_amax);
      saturated = std::max<double>(saturated, t.fp8_saturated);
      flushed = std::max<double>(flushed, t.fp8_flushed);
    }
    std::string scales;
    for (const auto& [exp, n] : exps) {
      scales += (scales.empty() ? "" : ", ") + ir::DTypeText(dtype, exp) +
                " x" + std::to_string(n);
    }
    auto range = [](const std::string& lo, const std::string& hi) {
      return lo == hi ? lo : lo + ".." + hi;
    };
    const int n = static_cast<int>(wc.twins.size());
    const fb::ValueT& w = *FindValue(*module_, weight);
    log_->Info({gemm},
               "quantize the " + passes::Count(n, "twin") + " of " +
                   ValueLabel(w) + " (iteration" + (n > 1 ? "s " : " ") +
                   range("1", std::to_string(n)) + ")",
               "each scaled from its own contents: " + scales + "; amax " +
                   range(ir::NumberText(amax_min), ir::NumberText(amax_max)) +
                   "; saturated at most " + Fraction(saturated) +
                   ", flushed at most " + Fraction(flushed),
               Unchanged());
  }

  fb::OperationT* FindOp(uint32_t id) {
    for (auto& op : module_->ops) {
      if (op->id == id) return op.get();
    }
    return nullptr;
  }

  // The attention GEMMs, contexts first: P V has the most to gain (the
  // softmax stores FP8 probabilities, halving their delivery), and the
  // scores then share its FP8 copy of qkv instead of paying the cast alone.
  std::vector<uint32_t> AttentionOrder() const {
    std::vector<uint32_t> order;
    for (fb::OpKind kind :
         {fb::OpKind::AttentionContext, fb::OpKind::AttentionScores}) {
      for (const auto& op : module_->ops) {
        if (op->kind == kind) order.push_back(op->id);
      }
    }
    return order;
  }

  // Every attention GEMM by QuantizeAttention, in AttentionOrder. One
  // refused while it would pay for a cast alone is priced once more if
  // another has made that cast since (the scores' FP8 qkv serves the
  // context too).
  StatusOr<bool> QuantizeAttentionGemms() {
    bool changed = false;
    std::map<uint32_t, int> refused;  // op -> its operands cast then
    auto cast_operands = [this](uint32_t id) {
      int n = 0;
      for (uint32_t a : FindOp(id)->operands) {
        n += quantized_activation_.count(a);
      }
      return n;
    };
    for (int round = 0; round < 2; ++round) {
      for (uint32_t id : AttentionOrder()) {
        if (round == 1 &&
            (!refused.count(id) || policy_.excluded_ops.count(id) ||
             cast_operands(id) == refused[id])) {
          continue;
        }
        StatusOr<bool> q = QuantizeAttention(id);
        if (!q.ok()) return q.status();
        changed = changed || *q;
        if (*q) {
          refused.erase(id);
        } else {
          refused[id] = cast_operands(id);
        }
      }
    }
    return changed;
  }

  // One operand of an attention GEMM: an earlier cast's FP8 value serves
  // it, or `choice` says how to cast it.
  struct AttentionOperand {
    uint32_t value = 0;
    bool shared = false;
    Choice choice;
  };

  // Attention op `id` (scores or context) on FP8 operands when that plans
  // cheaper: every operand cast (the GEMM kernels take all FP8 or none),
  // each cast stored by its producer's FP8-output kernel where it can be
  // (the softmax's softmax_fp8 for the probabilities: a Cast op would read
  // and write the whole score tensor again), else a Cast op the planner
  // places (qkv: its producer has no FP8 form, and the scores may read it
  // in F16). Unlike a MatMul's, this is decided by cost alone, unless the
  // policy forces it ("op ID: fp8").
  StatusOr<bool> QuantizeAttention(uint32_t id) {
    const fb::OperationT* op = FindOp(id);
    const std::vector<uint32_t> ids = {id};
    const std::string action = "run " + OpLabel(*op) + " on FP8 operands";
    if (policy_.excluded_ops.count(id)) {
      log_->Reject(ids, action, "excluded by " + options_.policy_name,
                   Unchanged());
      return false;
    }
    std::vector<AttentionOperand> operands;
    std::string refusal;
    for (uint32_t a : op->operands) {
      AttentionOperand o;
      o.value = a;
      o.shared = quantized_activation_.count(a) > 0;
      if (!o.shared) {
        o.choice = Choose(*FindValue(*module_, a), false, Rule(a));
        if (refusal.empty()) refusal = o.choice.refusal;
        FitProbabilities(a, &o.choice);
      }
      operands.push_back(std::move(o));
    }
    if (!refusal.empty()) {
      log_->Reject(ids, action, refusal + kAllOrNone, Unchanged());
      return false;
    }
    std::unique_ptr<fb::ModuleT> trial = CloneModule(*module_);
    std::map<uint32_t, uint32_t> fp8_of;  // this op's F16 operand -> FP8
    std::vector<Cast> kept;               // new casts left as Cast ops
    std::string reason = ApplyAttention(trial.get(), id, operands, &fp8_of,
                                        &kept);
    if (Status rolled = ir::VerifyRepeats(*trial); !rolled.ok()) {
      log_->Reject(ids, action, "quantized, " + rolled.message(), Unchanged());
      return false;
    }
    StatusOr<Priced> after = Price(*trial);
    if (!after.ok()) return after.status();
    reason += "; planned: F16 " + PricedText(current_) + ", FP8 " +
              PricedText(*after);
    const Numbers numbers{current_.cycles, after->cycles, current_.peak,
                          after->peak};
    const bool nearer = NearerToFitting(*after, current_);
    if (nearer) {
      reason += "; neither fits yet, FP8 brings " + NearerText(*after, current_);
    }
    const bool cheaper =
        after->feasible &&
        (!current_.feasible || after->cycles < current_.cycles);
    // Forced whatever the price, unless the forcing alone breaks a plan
    // that fit.
    const bool forced = policy_.forced_ops.count(id) &&
                        (after->feasible || !current_.feasible);
    if (!cheaper && !nearer && !forced) {
      log_->Reject(ids, action, "by cost: " + reason, numbers);
      return false;
    }
    if (!cheaper && !nearer) reason += "; forced by " + options_.policy_name;
    if (!log_->Apply(ids, action, reason, numbers)) return false;
    module_->values.swap(trial->values);
    module_->ops.swap(trial->ops);
    current_ = *after;
    for (const auto& [f16, fp8] : fp8_of) quantized_activation_[f16] = fp8;
    casts_.insert(casts_.end(), kept.begin(), kept.end());
    return true;
  }

  // A softmax's probabilities lie in [0, 1] whatever the input: unless the
  // policy fixes it, their exponent fits 1 exactly (no margin), so that no
  // input saturates them where calibration saw only smaller ones.
  void FitProbabilities(uint32_t value, Choice* c) const {
    const int p = ProducerIndex(*module_, value);
    const ValueRule* rule = Rule(value);
    if (!c->refusal.empty() || p < 0 ||
        module_->ops[p]->kind != fb::OpKind::Softmax ||
        (rule != nullptr && rule->scale_exp)) {
      return;
    }
    c->scale_exp = ChooseScaleExp(1.0f, FormatOf(c->dtype), 0);
    c->source = "exponent fits the probabilities' bound 1, no margin";
  }

  // In `m`: attention op `id` reads every operand in FP8 (a new cast, fused
  // into its producer where FuseRefusal allows, or the shared one), each
  // Cast op before its first reader. Returns the decision's text for the
  // operands; fills `fp8_of` with the new casts and `kept` with those left
  // as Cast ops.
  std::string ApplyAttention(fb::ModuleT* m, uint32_t id,
                             const std::vector<AttentionOperand>& operands,
                             std::map<uint32_t, uint32_t>* fp8_of,
                             std::vector<Cast>* kept) const {
    auto index = [m](uint32_t op_id) {
      int at = 0;
      while (m->ops[at]->id != op_id) ++at;
      return at;
    };
    fb::OperationT* op = m->ops[index(id)].get();
    std::string text;
    for (const AttentionOperand& o : operands) {
      if (!text.empty()) text += "; ";
      text += ValueLabel(*FindValue(*m, o.value));
      uint32_t fp8 = 0;
      std::string how;
      if (o.shared) {
        fp8 = quantized_activation_.at(o.value);
        how = " (cast for an earlier GEMM)";
      } else if (fp8_of->count(o.value)) {
        fp8 = fp8_of->at(o.value);  // read twice (self-attention's qkv)
        how = " (cast above)";
      } else {
        const Cast cast = InsertCast(m, index(id), o.value, o.choice);
        std::replace(op->operands.begin(), op->operands.end(), o.value,
                     cast.output);
        std::string kernel;
        const std::string no_fuse = FuseRefusal(*m, cast, &kernel);
        if (no_fuse.empty()) {
          Fuse(m, cast);
          fp8 = o.value;
          how = ", " + o.choice.source + ", stored FP8 by its producer (" +
                kernel + ")";
        } else {
          fp8 = cast.output;
          kept->push_back(cast);
          how = ", " + o.choice.source + ", a Cast op (" + no_fuse + ")";
        }
        (*fp8_of)[o.value] = fp8;
      }
      std::replace(op->operands.begin(), op->operands.end(), o.value, fp8);
      MoveCastBeforeReaders(m, fp8);
      const fb::ValueT* v = FindValue(*m, fp8);
      text += (fp8 == o.value ? " " : " -> " + ValueLabel(*v) + " ") +
              StatsText(*v) + how;
    }
    return text;
  }

  // Keeps the op order topological: a Cast op that a reader before it now
  // reads (a cast made for a later GEMM) moves just before that reader.
  static void MoveCastBeforeReaders(fb::ModuleT* m, uint32_t value) {
    const int c = ProducerIndex(*m, value);
    if (c < 0 || m->ops[c]->kind != fb::OpKind::Cast) return;
    int first = c;
    for (const auto& [i, slot] : Uses(*m, value)) first = std::min(first, i);
    if (first == c) return;
    std::unique_ptr<fb::OperationT> cast = std::move(m->ops[c]);
    m->ops.erase(m->ops.begin() + c);
    m->ops.insert(m->ops.begin() + first, std::move(cast));
  }

  // In `m`: the weight quantized in place (if `wc`), the activation cast
  // into a new FP8 value by a new Cast op just before the GEMM (if `ac`;
  // otherwise the earlier cast's value is read), the GEMM rewired to it.
  void ApplyGemm(fb::ModuleT* m, uint32_t gemm, const WeightChoice* wc,
                 const Choice* ac, Cast* cast) {
    int at = 0;
    while (m->ops[at]->id != gemm) ++at;
    fb::OperationT* op = m->ops[at].get();
    if (wc != nullptr) {
      MarkQuantized(FindValue(*m, op->operands[1]), wc->body.dtype,
                    wc->body.scale_exp, wc->body.magnitudes);
      for (const auto& [twin, c] : wc->twins) {
        MarkQuantized(FindValue(*m, twin), c.dtype, c.scale_exp, c.magnitudes);
      }
    }
    const uint32_t a = op->operands[0];
    if (ac == nullptr) {
      op->operands[0] = quantized_activation_.at(a);
      cast->output = op->operands[0];
      return;
    }
    *cast = InsertCast(m, at, a, *ac);
    op->operands[0] = cast->output;
  }

  // In `m`: a Cast op of value `a` into a new FP8 value (`<name>.fp8`, as
  // `choice` says) inserted at op index `at`; nothing reads it yet.
  static Cast InsertCast(fb::ModuleT* m, int at, uint32_t a,
                         const Choice& choice) {
    uint32_t value_id = 0, op_id = 0;
    for (const auto& v : m->values) value_id = std::max(value_id, v->id + 1);
    for (const auto& o : m->ops) op_id = std::max(op_id, o->id + 1);
    const fb::ValueT* in = FindValue(*m, a);
    auto out = std::make_unique<fb::ValueT>();
    out->id = value_id;
    out->name = in->name + ".fp8";
    out->shape = in->shape;
    out->dtype = in->dtype;
    out->role = fb::ValueRole::Activation;
    MarkQuantized(out.get(), choice.dtype, choice.scale_exp,
                  choice.magnitudes);
    auto c = std::make_unique<fb::OperationT>();
    c->id = op_id;
    c->kind = fb::OpKind::Cast;
    c->name = in->name + ".cast";
    c->operands = {a};
    c->results = {value_id};
    // Values are listed with the value they are cast from, for dump-ir.
    auto pos = std::find_if(m->values.begin(), m->values.end(),
                            [&](const auto& v) { return v->id == a; });
    m->values.insert(pos + 1, std::move(out));
    m->ops.insert(m->ops.begin() + at, std::move(c));
    return Cast{op_id, a, value_id};
  }

  // Fused into the producer's FP8-output kernel, or a Cast op: by planning
  // both.
  Status PlaceCast(const Cast& cast) {
    const fb::ValueT* in = FindValue(*module_, cast.input);
    const fb::ValueT* out = FindValue(*module_, cast.output);
    const int p = ProducerIndex(*module_, cast.input);
    const std::vector<uint32_t> ids =
        p >= 0 ? std::vector<uint32_t>{module_->ops[p]->id, cast.op}
               : std::vector<uint32_t>{cast.op};
    const std::string subject = "cast " + ValueLabel(*in) + " -> " +
                                ir::DTypeText(out->dtype, out->fp8_scale_exp);
    if (p < 0) {
      log_->Info(ids, subject + ": a Cast op",
                 ValueLabel(*in) + " is a graph input: no producer to fuse "
                 "into; the planner places the cast",
                 Unchanged());
      return Status::Ok();
    }
    const fb::OperationT& producer = *module_->ops[p];
    const std::string action =
        subject + ": fuse into " + OpLabel(producer) + ", which stores FP8";
    std::string kernel;
    const std::string refusal = FuseRefusal(*module_, cast, &kernel);
    const std::string kept =
        "; kept as a Cast op (cast kernel), which the planner places: at the "
        "producer's owners when that is cheapest, so the copy to the GEMM "
        "moves FP8 bytes";
    if (!refusal.empty()) {
      log_->Reject(ids, action, refusal + kept,
                   Unchanged());
      return Status::Ok();
    }
    std::unique_ptr<fb::ModuleT> fused = CloneModule(*module_);
    Fuse(fused.get(), cast);
    StatusOr<Priced> priced = Price(*fused);
    if (!priced.ok()) return priced.status();
    const std::string both = "Cast op: " + PricedText(current_) + "; fused (" +
                             kernel + "): " + PricedText(*priced);
    const Numbers numbers{current_.cycles, priced->cycles, current_.peak,
                          priced->peak};
    const bool cheaper =
        priced->feasible &&
        (!current_.feasible || priced->cycles < current_.cycles ||
         (priced->cycles == current_.cycles && priced->peak <= current_.peak));
    if (!cheaper) {
      log_->Reject(ids, action, "by cost: " + both + kept, numbers);
      return Status::Ok();
    }
    if (!log_->Apply(ids, action, "cheapest that fits: " + both, numbers)) {
      return Status::Ok();
    }
    module_->values.swap(fused->values);
    module_->ops.swap(fused->ops);
    current_ = *priced;
    return Status::Ok();
  }

  // Why the producer of `cast`'s input in `m` cannot store the FP8 value
  // itself ("" if it can), and its FP8-output kernel.
  static std::string FuseRefusal(const fb::ModuleT& m, const Cast& cast,
                                 std::string* kernel) {
    const fb::ValueT* in = FindValue(m, cast.input);
    const int p = ProducerIndex(m, cast.input);
    if (p < 0) return ValueLabel(*in) + " is a graph input";
    const fb::OperationT& producer = *m.ops[p];
    *kernel = Fp8OutputKernel(producer);
    if (kernel->empty()) {
      return OpLabel(producer) + " (" + ir::OpKindText(producer.kind) +
             ") has no FP8-output kernel";
    }
    for (const auto& r : m.repeats) {
      if (cast.input == r->carried_in || cast.input == r->carried_out) {
        return ValueLabel(*in) +
               " is carried from one iteration of a "
               "repeat to the next, whose two ends keep one dtype";
      }
    }
    for (const auto& [i, slot] : Uses(m, cast.input)) {
      if (m.ops[i]->id != cast.op) {
        return ValueLabel(*in) + " is also read in " +
               ir::DTypeText(in->dtype) + " by " + OpLabel(*m.ops[i]);
      }
    }
    return "";
  }

  // In `m`: the producer stores the cast's FP8 value directly (the input
  // value takes the FP8 dtype and statistics), the Cast op and its result
  // removed and their readers rewired.
  static void Fuse(fb::ModuleT* m, const Cast& cast) {
    fb::ValueT* in = FindValue(*m, cast.input);
    const fb::ValueT* out = FindValue(*m, cast.output);
    in->unquantized_dtype = in->dtype;
    in->fp8_quantized = true;
    in->dtype = out->dtype;
    in->fp8_scale_exp = out->fp8_scale_exp;
    in->fp8_amax = out->fp8_amax;
    in->fp8_saturated = out->fp8_saturated;
    in->fp8_flushed = out->fp8_flushed;
    for (auto& op : m->ops) {
      for (uint32_t& id : op->operands) {
        if (id == cast.output) id = cast.input;
      }
    }
    std::erase_if(m->ops, [&](const auto& op) { return op->id == cast.op; });
    std::erase_if(m->values,
                  [&](const auto& v) { return v->id == cast.output; });
  }

  // The greedy plan the decisions priced the output graph by, for
  // plan-ownership to start from: the graph as written differs from the one
  // priced only in its FP8 scales, which no price depends on (a trial's
  // price is keyed without them). None where that plan does not fit.
  Status SaveInitialPlan() const {
    if (!options_.save_initial_plan || !current_.initial_plan) {
      return Status::Ok();
    }
    return options_.save_initial_plan(
        plan::InitialPlanCheckpoint(*module_, *current_.initial_plan));
  }

  Status LogAccuracy() {
    kernels::ReferenceResult quantized;
    kernels::ReferenceOptions run = measured_->reference;
    run.keep = kernels::ReferenceOptions::Keep::kOutputs;
    run.fp8_in_k_order = false;  // figures only: nothing compares bit for bit
    TILEC_RETURN_IF_ERROR(kernels::RunReference(*module_, run, &quantized));
    for (const OutputAccuracy& a :
         CompareOutputs(*module_, quantized, measured_->unquantized)) {
      std::string reason = "against the unquantized graph on the " +
                           std::string(options_.calibration_dir.empty()
                                           ? "seeded inputs"
                                           : "calibration inputs") +
                           ": " + AccuracyText(a.full);
      if (a.has_branch) {
        reason += "; branch (minus residual %" + std::to_string(a.residual) +
                  "): " + AccuracyText(a.branch);
      }
      const int p = ProducerIndex(*module_, a.value);
      std::vector<uint32_t> ids;
      if (p >= 0) ids.push_back(module_->ops[p]->id);
      log_->Info(ids, "accuracy of %" + std::to_string(a.value) + " " + a.name,
                 reason, {});
    }
    return Status::Ok();
  }

  void LogSummary() {
    int weights = 0, activations = 0;
    int64_t before = 0, after = 0;
    for (const auto& v : module_->values) {
      if (!v->fp8_quantized) continue;
      if (v->role == fb::ValueRole::Weight) {
        ++weights;
        int64_t n = 1;
        for (int64_t d : v->shape) n *= d;
        before += n * ir::DTypeBytes(v->unquantized_dtype);
        after += n * ir::DTypeBytes(v->dtype);
      } else {
        ++activations;
      }
    }
    log_->Info({}, "FP8: " + passes::Count(weights, "weight") + ", " +
                       passes::Count(activations, "activation") + " quantized",
               "weight bytes " + Thousands(before) + " -> " + Thousands(after) +
                   "; planned (greedy initial plan): " + PricedText(baseline_) +
                   " unquantized, " + PricedText(current_) + " quantized",
               {baseline_.cycles, current_.cycles, baseline_.peak,
                current_.peak});
  }

  const QuantizeOptions& options_;
  const passes::PassOptions* common_;
  fb::ModuleT* module_;
  passes::DecisionLog* log_;
  Policy policy_;
  std::optional<plan::Coster> coster_;  // for PriceByPlanning
  std::shared_ptr<Measured> measured_ = std::make_shared<Measured>();
  Priced baseline_, current_;
  bool repair_ = false;  // price with memory repair (RepairFromNowOnIfNeeded)
  std::map<uint32_t, uint32_t> quantized_activation_;  // F16 id -> FP8 id
  std::vector<Cast> casts_;
  // With two threads or more: every trial's price, shared with the thread
  // pricing ahead.
  std::shared_ptr<TrialPrices> prices_;
  // A copy replaying the decisions ahead (Speculate) and, in one replay,
  // whether it counted a pending trial as accepted and priced one.
  bool ahead_ = false;
  bool guessed_ = false;
  bool priced_ahead_ = false;
  // The pass's own replays while it waits (HelpPriceAhead): their start,
  // and the graph as it was before calibration; whether this is one.
  std::shared_ptr<const Quantizer> helper_start_;
  bool helping_ = false;
  std::shared_ptr<const fb::ModuleT> helper_module_;
};

}  // namespace

StatusOr<bool> QuantizeFp8Pass::Transform(fb::ModuleT* module,
                                          passes::DecisionLog* log) {
  if (!options_.enabled) {
    log->Info({}, "FP8 off (--fp8=false)",
              "every value keeps its dtype: the F16 pipeline", {});
    return false;
  }
  Quantizer quantizer(options_, options(), module, log);
  StatusOr<bool> changed = quantizer.Run();
  if (changed.ok()) TILEC_RETURN_IF_ERROR(quantizer.SavePrices());
  return changed;
}

std::unique_ptr<passes::Pass> KeepDTypesPass() {
  QuantizeOptions off;
  off.enabled = false;
  return std::make_unique<QuantizeFp8Pass>(off);
}

}  // namespace tilec::quantize
