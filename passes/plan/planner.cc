#include "passes/plan/planner.h"

#include <algorithm>
#include <charconv>
#include <set>
#include <sstream>
#include <vector>

#include "formats/ir.h"
#include "formats/print.h"
#include "passes/plan/attention_steps.h"
#include "passes/plan/cost.h"
#include "passes/plan/plan.h"
#include "passes/plan/price_cache.h"
#include "passes/plan/search.h"

namespace tilec::plan {
namespace {

std::string_view PassName() { return passes::kPlanOwnershipInfo.name; }

}  // namespace

StatusOr<std::optional<fb::DType>> ParseGemmDType(
    const std::optional<std::string>& text) {
  if (!text || text->empty() || *text == "native") {
    return std::optional<fb::DType>();
  }
  if (*text == "fp8" || *text == "fp8e4m3") {
    return std::optional<fb::DType>(fb::DType::FP8E4M3);
  }
  if (*text == "f16") return std::optional<fb::DType>(fb::DType::F16);
  if (*text == "f32") return std::optional<fb::DType>(fb::DType::F32);
  return Status::BadInput("--gemm_dtype=" + *text +
                          ": expected fp8, f16, f32 or native");
}

namespace {

// The parameters that decide the plan, as recorded in the PassRun: the same
// for a run and for any split of it into checkpoint + resume. Paths of
// checkpoints and the attempt count are not among them (the decisions show
// how many proposals were evaluated).
std::vector<std::string> RecordedFlags(uint64_t seed, int proposals_per_op,
                                       const std::string& gemm_dtype,
                                       std::optional<int64_t> max_decisions,
                                       const std::string& recipe_name,
                                       int attention_steps) {
  std::vector<std::string> flags = {
      "--seed=" + std::to_string(seed),
      "--proposals-per-op=" + std::to_string(proposals_per_op)};
  if (attention_steps > 1) {
    flags.push_back("--attention-steps=" + std::to_string(attention_steps));
  }
  if (!gemm_dtype.empty() && gemm_dtype != "native") {
    flags.push_back("--gemm_dtype=" + gemm_dtype);
  }
  if (max_decisions) {
    flags.push_back("--max-decisions=" + std::to_string(*max_decisions));
  }
  if (!recipe_name.empty()) flags.push_back("--recipe=" + recipe_name);
  return flags;
}

// The module a planner run starts from: `module` without any plan (or
// what was lowered from one).
void DropPlan(fb::ModuleT* module) {
  for (auto& v : module->values) v->ownership.reset();
  for (auto& op : module->ops) {
    op->recipe.reset();
    op->estimate.reset();
    op->reduction.reset();
  }
  module->checkpoint.reset();
  module->program.reset();
}

// A checkpoint file: the unplanned module `input`, a plan-ownership pass run
// with the recorded `flags` and the decisions so far, and the search state.
fb::ModuleT CheckpointModule(fb::ModuleT input,
                             const std::vector<std::string>& flags,
                             const fb::SearchCheckpointT& state,
                             const Decisions& decisions) {
  auto run = std::make_unique<fb::PassRunT>();
  run->pass = PassName();
  run->flags = flags;
  for (const auto& d : decisions) {
    run->decisions.push_back(std::make_unique<fb::DecisionT>(*d));
  }
  input.log.push_back(std::move(run));
  input.checkpoint = std::make_unique<fb::SearchCheckpointT>(state);
  return input;
}

// The value of "--NAME=" in a recorded flag list, if present.
std::optional<std::string> RecordedValue(const std::vector<std::string>& flags,
                                         const std::string& name) {
  const std::string prefix = "--" + name + "=";
  for (const std::string& f : flags) {
    if (f.rfind(prefix, 0) == 0) return f.substr(prefix.size());
  }
  return std::nullopt;
}

}  // namespace

StatusOr<std::map<int, Recipe>> ParseRecipeFile(const std::string& text,
                                                const std::string& name,
                                                const Graph& graph,
                                                const Coster& coster) {
  std::map<int, Recipe> pinned;
  std::istringstream in(text);
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    auto fail = [&](const std::string& what) {
      return Status::BadInput(name + ":" + std::to_string(number) + ": " +
                              what);
    };
    const size_t hash = line.find('#');
    if (hash != std::string::npos) line.resize(hash);
    const size_t begin = line.find_first_not_of(" \t\r");
    if (begin == std::string::npos) continue;
    std::string_view rest(line);
    rest.remove_prefix(begin);
    if (rest.substr(0, 3) != "op ") {
      return fail("expected 'op ID: RECIPE', got '" + std::string(rest) + "'");
    }
    rest.remove_prefix(3);
    const size_t colon = rest.find(':');
    if (colon == std::string_view::npos) {
      return fail("expected ':' after the op id");
    }
    std::string_view id_text = rest.substr(0, colon);
    while (!id_text.empty() && id_text.back() == ' ') id_text.remove_suffix(1);
    while (!id_text.empty() && id_text.front() == ' ') id_text.remove_prefix(1);
    uint32_t id = 0;
    const auto [ptr, ec] =
        std::from_chars(id_text.data(), id_text.data() + id_text.size(), id);
    if (ec != std::errc() || ptr != id_text.data() + id_text.size() ||
        id_text.empty()) {
      return fail("bad op id '" + std::string(id_text) + "'");
    }
    const int op = graph.OpIndex(id);
    if (op < 0) return fail("the graph has no op " + std::to_string(id));
    if (pinned.count(op)) {
      return fail("op " + std::to_string(id) + " is pinned twice");
    }
    StatusOr<Recipe> recipe = ParseRecipe(rest.substr(colon + 1));
    if (!recipe.ok()) return fail(recipe.status().message());
    const Status invalid = coster.CheckRecipe(graph, op, *recipe);
    if (!invalid.ok()) return fail(invalid.message());
    pinned[op] = *recipe;
  }
  return pinned;
}

namespace {

// The search parameters of a run, after resolving unset ones against a
// checkpoint.
struct Parameters {
  uint64_t seed = SearchOptions{}.seed;
  int proposals_per_op = SearchOptions{}.proposals_per_op;
  std::string gemm_dtype_text = "native";
  std::optional<fb::DType> gemm_dtype;
  std::optional<int64_t> max_decisions;
};

std::optional<std::string> IfSet(bool set, const std::string& text) {
  return set ? std::optional<std::string>(text) : std::nullopt;
}

// One run of plan-ownership over one module, in the order of its phases.
class Planning {
 public:
  Planning(const PlannerOptions& options, const passes::PassOptions& common,
           fb::ModuleT* module, passes::DecisionLog* log)
      : options_(options), common_(common), module_(*module), log_(*log) {}

  Status Run(std::vector<std::string>* recorded_flags) {
    TILEC_RETURN_IF_ERROR(PrepareModule());
    TILEC_RETURN_IF_ERROR(ReadCheckpoint());
    TILEC_RETURN_IF_ERROR(ResolveAttentionSteps());
    TILEC_RETURN_IF_ERROR(BuildGraph());
    TILEC_RETURN_IF_ERROR(CheckCheckpointGraph());
    TILEC_RETURN_IF_ERROR(ResolveParameters());
    TILEC_RETURN_IF_ERROR(LoadPins());
    auto search =
        std::make_unique<Search>(*graph_, *coster_, MakeSearchOptions());
    Status started = StartSearch(&search);
    if (started.code() == StatusCode::kInfeasible && MayStepAttention()) {
      started = PlanAttentionInImageSteps(
          started, search->closest_peak_bytes(), &search);
    }
    TILEC_RETURN_IF_ERROR(started);
    *recorded_flags = flags_;
    TILEC_RETURN_IF_ERROR(search->Run());
    Summarize(*search);
    TILEC_RETURN_IF_ERROR(ExplainOp(*search));
    TILEC_RETURN_IF_ERROR(WriteResult(*search));
    return SavePassPrices(common_, *coster_);
  }

 private:
  void Say(const std::string& line) const {
    if (common_.messages) *common_.messages << PassName() << ": " << line << "\n";
  }
  Status Refuse(const std::string& why) const {
    return Status::BadInput("checkpoint " + options_.resume_name + ": " + why);
  }

  // A planned module is planned again from its graph: drop the old plan
  // (and what was lowered from it).
  Status PrepareModule() {
    if (options_.target) {
      module_.target = std::make_unique<fb::TargetT>(*options_.target);
    }
    if (!module_.target) {
      return Status::BadInput("the module has no target; give --target");
    }
    if (options_.attempts < 0) {
      return Status::BadInput("--attempts=" + std::to_string(options_.attempts) +
                              " must not be negative");
    }
    if (options_.proposals_per_op && *options_.proposals_per_op < 1) {
      return Status::BadInput("--proposals-per-op must be at least 1");
    }
    if (options_.attention_steps && *options_.attention_steps < 1) {
      return Status::BadInput("--attention_steps=" +
                              std::to_string(*options_.attention_steps) +
                              " must be at least 1");
    }
    DropPlan(&module_);
    // The module as given, for checkpoints (they carry the unplanned graph).
    input_ = module_;
    return Status::Ok();
  }

  Status BuildGraph() {
    StatusOr<Graph> graph = Graph::Build(module_);
    if (!graph.ok()) return graph.status();
    graph_.emplace(std::move(*graph));
    if (common_.explain.kind == passes::ExplainFilter::Kind::kOp) {
      explain_op_ = graph_->OpIndex(common_.explain.op);
      if (explain_op_ < 0) {
        return Status::BadInput("--explain=" + std::to_string(common_.explain.op) +
                                ": expected 'all' or an op id of the graph");
      }
    }
    return Status::Ok();
  }

  // On resume, the checkpoint must hold a planner run: its recorded flags
  // decide the parameters left unset.
  Status ReadCheckpoint() {
    if (!options_.resume) return Status::Ok();
    const fb::ModuleT& checkpoint = *options_.resume;
    if (const std::string why = NotACheckpoint(checkpoint); !why.empty()) {
      return Refuse(why);
    }
    checkpoint_flags_ = checkpoint.log.back()->flags;
    return Status::Ok();
  }

  // Why `saved` is not a checkpoint of this pass ("" where it is).
  static std::string NotACheckpoint(const fb::ModuleT& saved) {
    if (!saved.checkpoint) {
      return "has no search checkpoint (is it a --checkpoint file?)";
    }
    if (saved.log.empty() || saved.log.back()->pass != PassName()) {
      return "has no plan-ownership pass in its log";
    }
    return "";
  }

  // The first difference of `saved`'s graph from the input's ("" where
  // they are the same graph).
  StatusOr<std::string> GraphDifference(const fb::ModuleT& saved) const {
    StatusOr<Graph> graph = Graph::Build(saved);
    if (!graph.ok()) return graph.status();
    return graph_->Difference(*graph);
  }

  // --attention-steps, given or the checkpoint's: the graph is planned with
  // its attention in that many image steps. Unset, attention runs in steps
  // only when no plan fits without (PlanAttentionInImageSteps).
  Status ResolveAttentionSteps() {
    StatusOr<std::string> text = Pick(
        "attention-steps",
        IfSet(options_.attention_steps.has_value(),
              std::to_string(options_.attention_steps.value_or(0))),
        "");
    if (!text.ok()) return text.status();
    if (text->empty()) return Status::Ok();
    attention_steps_given_ = true;
    TILEC_RETURN_IF_ERROR(
        ParseRecorded("attention-steps", *text, 1, &attention_steps_));
    TILEC_RETURN_IF_ERROR(
        SplitAttentionIntoImageSteps(attention_steps_, &module_));
    input_ = module_;
    return Status::Ok();
  }

  bool MayStepAttention() const {
    return !attention_steps_given_ && !options_.resume && pinned_.empty() &&
           !AttentionStepCounts(input_).empty();
  }

  // The steps memory requires: accepted, not subject to --max-decisions.
  void RecordImageSteps(const std::string& action, int64_t unsplit_peak,
                        const Evaluation& e) {
    fb::DecisionT d;
    d.action = action;
    d.outcome = fb::Outcome::Accepted;
    d.reason = "no plan fits with every image's attention at once (the "
               "closest needs " +
               std::to_string(unsplit_peak) + " B on a tile); in steps the "
               "plan fits: " +
               std::to_string(e.total_cycles) + " cycles, peak " +
               std::to_string(e.peak_bytes) + " B per tile of " +
               std::to_string(e.capacity);
    d.bytes_before = unsplit_peak;
    d.bytes_after = e.peak_bytes;
    d.cycles_after = e.total_cycles;
    log_.Record(d);
  }

  // No plan fits: plan again with every self-attention in image steps, the
  // fewest steps whose plan fits (fewer steps, fewer phases and calls).
  // Each count tried is a Decision with the peak bytes both ways.
  Status PlanAttentionInImageSteps(const Status& unsplit, int64_t unsplit_peak,
                                   std::unique_ptr<Search>* search) {
    const fb::ModuleT whole = input_;
    Status last = unsplit;
    for (int steps : AttentionStepCounts(whole)) {
      search->reset();  // it reads the graph rebuilt below
      module_ = whole;
      TILEC_RETURN_IF_ERROR(SplitAttentionIntoImageSteps(steps, &module_));
      input_ = module_;
      attention_steps_ = steps;
      // Its prices by op index belong to the graph it priced.
      coster_.emplace(coster_->ForAnotherGraph());
      TILEC_RETURN_IF_ERROR(BuildGraph());
      TILEC_RETURN_IF_ERROR(LoadPins());
      Say("no plan fits yet: planning with attention in " +
          std::to_string(steps) + " image steps");
      *search =
          std::make_unique<Search>(*graph_, *coster_, MakeSearchOptions());
      last = (*search)->Initialize();
      const std::string action = "run attention in " + std::to_string(steps) +
                                 " image steps";
      if (last.ok()) {
        RecordImageSteps(action, unsplit_peak, (*search)->evaluation());
        return Status::Ok();
      }
      if (last.code() != StatusCode::kInfeasible) return last;
      Say("attention in " + std::to_string(steps) + " image steps: " +
          last.message());
      const bool chains_over =
          ChainsOverCapacity(module_, *graph_, (*search)->closest());
      log_.Reject({}, action,
                  "no plan fits in " + std::to_string(steps) +
                      " steps either: the closest needs " +
                      std::to_string((*search)->closest_peak_bytes()) +
                      " B on a tile" +
                      (chains_over ? ""
                                   : "; its attention steps fit, so more "
                                     "steps would only add phases and "
                                     "exchange tables: none tried"),
                  {0, 0, unsplit_peak, (*search)->closest_peak_bytes()});
      if (!chains_over) break;
    }
    return Status::Infeasible(unsplit.message() +
                              " (nor with attention in image steps: " +
                              last.message() + ")");
  }

  // On resume, the checkpoint must hold this graph.
  Status CheckCheckpointGraph() {
    if (!options_.resume) return Status::Ok();
    StatusOr<std::string> difference = GraphDifference(*options_.resume);
    if (!difference.ok()) return Refuse(difference.status().message());
    if (!difference->empty()) {
      return Refuse("its graph does not match the input: input " + *difference +
                    " in the checkpoint");
    }
    return Status::Ok();
  }

  // A given value, else the checkpoint's, else the default; a given value
  // that differs from the checkpoint's is an error.
  StatusOr<std::string> Pick(const char* name, std::optional<std::string> given,
                             const std::string& fallback) const {
    std::optional<std::string> saved = RecordedValue(checkpoint_flags_, name);
    if (options_.resume && given && saved && *given != *saved) {
      return Status::BadInput("--" + std::string(name) + "=" + *given +
                              " differs from the checkpoint's --" + name + "=" +
                              *saved);
    }
    if (given) return *given;
    if (options_.resume && saved) return *saved;
    return fallback;
  }

  // A number from a flag or, when resuming, from the checkpoint's recorded
  // flags, which a damaged file can make anything: refused, never thrown.
  template <typename T>
  Status ParseRecorded(const char* name, const std::string& text, T least,
                       T* out) const {
    const char* end = text.data() + text.size();
    auto [ptr, error] = std::from_chars(text.data(), end, *out);
    if (error == std::errc() && ptr == end && *out >= least) {
      return Status::Ok();
    }
    return Refuse("recorded --" + std::string(name) + "=" + text +
                  " is not a whole number from " + std::to_string(least));
  }

  Status ResolveParameters() {
    StatusOr<std::string> seed = Pick(
        "seed", IfSet(options_.seed.has_value(),
                      std::to_string(options_.seed.value_or(0))),
        std::to_string(SearchOptions{}.seed));
    if (!seed.ok()) return seed.status();
    StatusOr<std::string> k =
        Pick("proposals-per-op",
             IfSet(options_.proposals_per_op.has_value(),
                   std::to_string(options_.proposals_per_op.value_or(0))),
             std::to_string(SearchOptions{}.proposals_per_op));
    if (!k.ok()) return k.status();
    StatusOr<std::string> dtype = Pick("gemm_dtype", options_.gemm_dtype, "native");
    if (!dtype.ok()) return dtype.status();
    StatusOr<std::string> max =
        Pick("max-decisions",
             IfSet(common_.max_decisions >= 0,
                   std::to_string(common_.max_decisions)),
             "");
    if (!max.ok()) return max.status();
    TILEC_RETURN_IF_ERROR(
        ParseRecorded("seed", *seed, uint64_t{0}, &params_.seed));
    TILEC_RETURN_IF_ERROR(ParseRecorded("proposals-per-op", *k, 1,
                                        &params_.proposals_per_op));
    params_.gemm_dtype_text = *dtype;
    if (!max->empty()) {
      int64_t limit = 0;
      TILEC_RETURN_IF_ERROR(
          ParseRecorded("max-decisions", *max, int64_t{0}, &limit));
      params_.max_decisions = limit;
    }
    // The log was made with the flag; on resume the limit may be the
    // checkpoint's.
    log_.set_max_decisions(params_.max_decisions.value_or(-1));
    StatusOr<std::optional<fb::DType>> gemm_dtype =
        ParseGemmDType(std::optional<std::string>(*dtype));
    if (!gemm_dtype.ok()) return gemm_dtype.status();
    params_.gemm_dtype = *gemm_dtype;
    PriceOptions price;
    price.gemm_dtype = params_.gemm_dtype;
    StatusOr<Coster> coster = Coster::Create(*module_.target, price);
    if (!coster.ok()) return coster.status();
    coster_.emplace(std::move(*coster));
    TakeSavedPrices(passes::kPlanOwnershipInfo.name, common_, *coster_);
    return Status::Ok();
  }

  Status LoadPins() {
    if (!options_.recipe_name.empty()) {
      StatusOr<std::map<int, Recipe>> parsed = ParseRecipeFile(
          options_.recipe_text, options_.recipe_name, *graph_, *coster_);
      if (!parsed.ok()) return parsed.status();
      pinned_ = std::move(*parsed);
    }
    flags_ = RecordedFlags(params_.seed, params_.proposals_per_op,
                           params_.gemm_dtype_text, params_.max_decisions,
                           options_.recipe_name, attention_steps_);
    if (!options_.resume) return Status::Ok();
    std::optional<std::string> saved_recipe =
        RecordedValue(checkpoint_flags_, "recipe");
    if (saved_recipe.value_or("") == options_.recipe_name) return Status::Ok();
    return Status::BadInput(
        "checkpoint " + options_.resume_name + " was made " +
        (saved_recipe ? "with --recipe=" + *saved_recipe
                      : std::string("without --recipe")) +
        ", this run has " +
        (options_.recipe_name.empty() ? std::string("none")
                                      : "--recipe=" + options_.recipe_name));
  }

  SearchOptions MakeSearchOptions() {
    SearchOptions search;
    search.seed = params_.seed;
    search.attempts = options_.attempts;
    search.proposals_per_op = params_.proposals_per_op;
    search.pinned = pinned_;
    search.checkpoint_every = options_.checkpoint_every;
    search.log = &log_;
    if (common_.messages) {
      search.on_progress = [this](const std::string& line) { Say(line); };
    }
    if (options_.save_checkpoint) {
      search.save_checkpoint = [this](const fb::SearchCheckpointT& state,
                                      const Decisions& decisions) {
        return options_.save_checkpoint(
            CheckpointModule(input_, flags_, state, decisions));
      };
    }
    return search;
  }

  // The initial plan (--initial_plan's where it fits this run, else
  // planned here), or the search restored from --resume's checkpoint.
  Status StartSearch(std::unique_ptr<Search>* search) {
    if (!options_.resume && options_.initial_plan) {
      const Status taken = TakeInitialPlan(search->get());
      if (taken.ok()) return Status::Ok();
      Say("--initial_plan " + options_.initial_plan_name + " not used (" +
          taken.message() + "): planning the initial plan here");
      // A failed restore may have left part of its state.
      *search =
          std::make_unique<Search>(*graph_, *coster_, MakeSearchOptions());
    }
    if (!options_.resume) return (*search)->Initialize();
    return Resume(search->get());
  }

  // --initial_plan's plan, if it is a checkpoint of no attempts made for
  // this graph with this run's recorded parameters (and it re-prices to its
  // saved cycles: Search::Restore).
  Status TakeInitialPlan(Search* search) {
    const fb::ModuleT& saved = *options_.initial_plan;
    if (const std::string why = NotACheckpoint(saved); !why.empty()) {
      return Status::BadInput("it " + why);
    }
    if (saved.checkpoint->attempts != 0) {
      return Status::BadInput("its search has made " +
                              std::to_string(saved.checkpoint->attempts) +
                              " attempts (--resume continues a search)");
    }
    if (saved.log.back()->flags != flags_) {
      return Status::BadInput("it was made with other parameters");
    }
    StatusOr<std::string> difference = GraphDifference(saved);
    if (!difference.ok()) return difference.status();
    if (!difference->empty()) {
      return Status::BadInput("another graph: input " + *difference +
                              " in the file");
    }
    return search->Restore(*saved.checkpoint, saved.log.back()->decisions);
  }

  Status Resume(Search* search) {
    const fb::ModuleT& checkpoint = *options_.resume;
    Status restored = search->Restore(*checkpoint.checkpoint,
                                      checkpoint.log.back()->decisions);
    if (!restored.ok()) {
      return Status(restored.code(), "checkpoint " + options_.resume_name +
                                         ": " + restored.message());
    }
    return Status::Ok();
  }

  // "repeat: 7 body ops planned once for 3 iterations: 1234 cycles per
  // iteration, 3 x 1234 in the total" for each repeat.
  std::vector<std::string> RepeatLines(const Evaluation& eval) const {
    std::vector<std::string> lines;
    for (size_t k = 0; k < graph_->repeats().size(); ++k) {
      const RepeatNode& r = graph_->repeats()[k];
      const std::string per = std::to_string(eval.repeat_cycles[k]);
      lines.push_back(
          "repeat: " + std::to_string(r.end - r.begin) +
          " body ops planned once for " + std::to_string(r.count) +
          " iterations: " + per + " cycles per iteration, " +
          std::to_string(r.count) + " x " + per + " in the total");
    }
    return lines;
  }

  void Summarize(const Search& search) const {
    std::string repeats;
    for (const std::string& line : RepeatLines(search.evaluation())) {
      repeats += "; " + line;
    }
    Say(std::to_string(search.attempts()) + " attempts, " +
        std::to_string(search.accepted()) + " accepted" +
        (search.converged() ? " (converged: every proposal for the incumbent "
                              "was tried and rejected)"
                            : "") +
        "; " + std::to_string(search.evaluation().total_cycles) +
        " cycles, peak " + std::to_string(search.evaluation().peak_bytes) +
        " B per tile" + repeats);
  }

  // One Info decision per repeat: how its body counts in the total.
  void LogRepeats(const Evaluation& eval) {
    const std::vector<std::string> lines = RepeatLines(eval);
    for (size_t k = 0; k < lines.size(); ++k) {
      const RepeatNode& r = graph_->repeats()[k];
      std::vector<uint32_t> ops;
      for (int op = r.begin; op < r.end; ++op) ops.push_back(graph_->op(op).id);
      log_.Info(std::move(ops), lines[k],
                "each op's estimate is one iteration's; its twins (" +
                    std::to_string((r.count - 1) * r.weights.size()) +
                    " weights) take their body weight's ownership and are "
                    "resident for the whole program",
                {eval.total_cycles, eval.total_cycles, eval.peak_bytes,
                 eval.peak_bytes});
    }
  }

  // --explain=OP: every recipe considered for the op in the final plan.
  Status ExplainOp(const Search& search) const {
    if (explain_op_ < 0 || !common_.messages) return Status::Ok();
    StatusOr<std::vector<Search::Alternative>> alternatives =
        search.Alternatives(explain_op_);
    if (!alternatives.ok()) return alternatives.status();
    std::ostream& os = *common_.messages;
    os << PassName() << ": alternatives for " << graph_->OpLabel(explain_op_)
       << " in the final plan (plan cycles, op cycles, peak bytes per tile):\n";
    for (const Search::Alternative& a : *alternatives) {
      os << (a.chosen ? "  * " : "    ") << a.recipe.Text() << ": plan "
         << a.total_cycles << ", op " << a.op_cycles << ", peak "
         << a.peak_bytes << (a.feasible ? "" : " (does not fit)") << "\n";
    }
    return Status::Ok();
  }

  void LogRedistributions(const Evaluation& eval,
                          const std::vector<uint32_t>& inserted) {
    for (size_t i = 0; i < eval.redistributions.size(); ++i) {
      const Redistribution& red = eval.redistributions[i];
      const ValueNode& v = graph_->value(red.value);
      std::vector<uint32_t> ops = {inserted[i]};
      for (const auto& use : red.uses) ops.push_back(graph_->op(use.first).id);
      if (red.loop_edge) {
        log_.Info(std::move(ops),
                  "insert redistribute of carried_out %" +
                      std::to_string(v.id) + " " + v.name + ": " +
                      passes::FormatOwnership(eval.owners[red.value]) +
                      " -> " + passes::FormatOwnership(red.to) +
                      " as the last op of its repeat's body",
                  "loop edge: the next iteration reads carried_out where "
                  "iteration 0 read carried_in, which is owned " +
                      passes::FormatOwnership(red.to) + "; " +
                      std::to_string(red.Cycles()) + " cycles every one of " +
                      std::to_string(red.runs) + " iterations",
                  {red.runs * red.Cycles(), red.runs * red.Cycles(),
                   red.cost.bytes_received, red.cost.bytes_received});
        continue;
      }
      log_.Info(std::move(ops),
                "insert redistribute of %" + std::to_string(v.id) + " " +
                    v.name + ": " +
                    passes::FormatOwnership(eval.owners[red.value]) + " -> " +
                    passes::FormatOwnership(red.to),
                "its consumers need another ownership: " +
                    std::to_string(red.cost.phase_cycles) + " exchange + " +
                    std::to_string(red.cost.local_copy_cycles) +
                    " local copy cycles",
                {red.Cycles(), red.Cycles(), red.cost.bytes_received,
                 red.cost.bytes_received});
    }
  }

  Status WriteResult(const Search& search) {
    const Evaluation& eval = search.evaluation();
    std::string note;
    if (params_.gemm_dtype) {
      note = "inputs priced as " + ir::DTypeText(*params_.gemm_dtype) +
             " (--gemm_dtype)";
      log_.Info({}, "GEMM inputs priced as " + ir::DTypeText(*params_.gemm_dtype),
                "--gemm_dtype: no quantize pass yet; left operands are cast "
                "at their owners (cast kernel charged) and delivered in it, "
                "weights resident in it; the graph's dtypes are unchanged",
                {eval.total_cycles, eval.total_cycles, eval.peak_bytes,
                 eval.peak_bytes});
    }
    StatusOr<std::vector<uint32_t>> inserted =
        WritePlan(*graph_, *coster_, search.incumbent(), eval, note, &module_);
    if (!inserted.ok()) return inserted.status();
    LogRedistributions(eval, *inserted);
    LogRepeats(eval);
    return Status::Ok();
  }

  const PlannerOptions& options_;
  const passes::PassOptions& common_;
  fb::ModuleT& module_;
  passes::DecisionLog& log_;
  fb::ModuleT input_;
  std::optional<Graph> graph_;
  std::optional<Coster> coster_;
  int explain_op_ = -1;
  std::vector<std::string> checkpoint_flags_;
  Parameters params_;
  std::map<int, Recipe> pinned_;
  std::vector<std::string> flags_;
  int attention_steps_ = 1;
  bool attention_steps_given_ = false;
};

}  // namespace

fb::ModuleT InitialPlanCheckpoint(const fb::ModuleT& module,
                                  const InitialPlan& plan) {
  fb::ModuleT input = module;
  DropPlan(&input);
  const SearchOptions defaults;
  return CheckpointModule(
      std::move(input),
      RecordedFlags(defaults.seed, defaults.proposals_per_op, "", std::nullopt,
                    "", 1),
      plan.state, plan.decisions);
}

StatusOr<bool> PlanOwnershipPass::Transform(fb::ModuleT* module,
                                            passes::DecisionLog* log) {
  Planning planning(options_, options(), module, log);
  TILEC_RETURN_IF_ERROR(planning.Run(&recorded_flags_));
  return true;
}

}  // namespace tilec::plan
