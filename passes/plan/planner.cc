#include "passes/plan/planner.h"

#include <algorithm>
#include <charconv>
#include <set>
#include <sstream>
#include <vector>

#include "formats/ir.h"
#include "formats/print.h"
#include "passes/plan/cost.h"
#include "passes/plan/plan.h"
#include "passes/plan/search.h"

namespace tilec::plan {
namespace {

constexpr char kPassName[] = "plan-ownership";

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

// The parameters that decide the plan, as recorded in the PassRun: the same
// for a run and for any split of it into checkpoint + resume. Paths of
// checkpoints and the attempt count are not among them (the decisions show
// how many proposals were evaluated).
std::vector<std::string> RecordedFlags(uint64_t seed, int proposals_per_op,
                                       const std::string& gemm_dtype,
                                       std::optional<int64_t> max_decisions,
                                       const std::string& recipe_name) {
  std::vector<std::string> flags = {
      "--seed=" + std::to_string(seed),
      "--proposals-per-op=" + std::to_string(proposals_per_op)};
  if (!gemm_dtype.empty() && gemm_dtype != "native") {
    flags.push_back("--gemm_dtype=" + gemm_dtype);
  }
  if (max_decisions) {
    flags.push_back("--max-decisions=" + std::to_string(*max_decisions));
  }
  if (!recipe_name.empty()) flags.push_back("--recipe=" + recipe_name);
  return flags;
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

void Say(const PlannerOptions& options, const std::string& line) {
  if (options.messages) *options.messages << kPassName << ": " << line << "\n";
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
    const std::string invalid = coster.CheckRecipe(graph, op, *recipe);
    if (!invalid.empty()) return fail(invalid);
    pinned[op] = *recipe;
  }
  return pinned;
}

Status PlanOwnership(const PlannerOptions& options, fb::ModuleT* module) {
  if (!options.target.empty()) {
    auto target = std::make_unique<fb::TargetT>();
    TILEC_RETURN_IF_ERROR(ir::LoadTarget(options.target, target.get()));
    module->target = std::move(target);
  }
  if (!module->target) {
    return Status::BadInput("the module has no target; give --target");
  }
  if (options.attempts < 0) {
    return Status::BadInput("--attempts=" + std::to_string(options.attempts) +
                            " must not be negative");
  }
  if (options.proposals_per_op && *options.proposals_per_op < 1) {
    return Status::BadInput("--proposals-per-op must be at least 1");
  }
  if (options.max_decisions && *options.max_decisions < 0) {
    return Status::BadInput("--max-decisions must not be negative");
  }
  // A planned module is planned again from its graph: drop the old plan.
  for (auto& v : module->values) v->ownership.reset();
  for (auto& op : module->ops) {
    op->recipe.reset();
    op->estimate.reset();
  }
  module->checkpoint.reset();
  // The module as given, for checkpoints (they carry the unplanned graph).
  const fb::ModuleT input = *module;

  StatusOr<Graph> graph = Graph::Build(*module);
  if (!graph.ok()) return graph.status();
  int explain_op = -1;
  if (!options.explain.empty() && options.explain != "all") {
    uint32_t id = 0;
    const char* end = options.explain.data() + options.explain.size();
    const auto [ptr, ec] = std::from_chars(options.explain.data(), end, id);
    explain_op = ec == std::errc() && ptr == end ? graph->OpIndex(id) : -1;
    if (explain_op < 0) {
      return Status::BadInput("--explain=" + options.explain +
                              ": expected 'all' or an op id of the graph");
    }
  }

  // On resume, the checkpoint decides the search parameters that were not
  // given, and must agree with those that were.
  std::optional<fb::ModuleT> checkpoint;
  std::vector<std::string> checkpoint_flags;
  std::string resume_name = ir::DisplayName(options.resume_path);
  if (!options.resume_path.empty()) {
    checkpoint.emplace();
    TILEC_RETURN_IF_ERROR(ir::ReadModule(options.resume_path, &*checkpoint));
    auto refuse = [&](const std::string& why) {
      return Status::BadInput("checkpoint " + resume_name + ": " + why);
    };
    if (!checkpoint->checkpoint) {
      return refuse("has no search checkpoint (is it a --checkpoint file?)");
    }
    if (checkpoint->log.empty() || checkpoint->log.back()->pass != kPassName) {
      return refuse("has no plan-ownership pass in its log");
    }
    StatusOr<Graph> saved = Graph::Build(*checkpoint);
    if (!saved.ok()) return refuse(saved.status().message());
    const std::string difference = graph->Difference(*saved);
    if (!difference.empty()) {
      return refuse("its graph does not match the input: input " + difference +
                    " in the checkpoint");
    }
    checkpoint_flags = checkpoint->log.back()->flags;
  }
  auto pick = [&](const char* name, std::optional<std::string> given,
                  const std::string& fallback) -> StatusOr<std::string> {
    std::optional<std::string> saved = RecordedValue(checkpoint_flags, name);
    if (checkpoint && given && saved && *given != *saved) {
      return Status::BadInput("--" + std::string(name) + "=" + *given +
                              " differs from the checkpoint's --" + name + "=" +
                              *saved);
    }
    if (given) return *given;
    if (checkpoint && saved) return *saved;
    return fallback;
  };
  StatusOr<std::string> seed_text = pick(
      "seed",
      options.seed ? std::optional<std::string>(std::to_string(*options.seed))
                   : std::nullopt,
      "1");
  if (!seed_text.ok()) return seed_text.status();
  StatusOr<std::string> k_text = pick(
      "proposals-per-op",
      options.proposals_per_op ? std::optional<std::string>(
                                     std::to_string(*options.proposals_per_op))
                               : std::nullopt,
      "4");
  if (!k_text.ok()) return k_text.status();
  StatusOr<std::string> dtype_text =
      pick("gemm_dtype", options.gemm_dtype, "native");
  if (!dtype_text.ok()) return dtype_text.status();
  StatusOr<std::string> max_text = pick(
      "max-decisions",
      options.max_decisions
          ? std::optional<std::string>(std::to_string(*options.max_decisions))
          : std::nullopt,
      "");
  if (!max_text.ok()) return max_text.status();
  const uint64_t seed = std::stoull(*seed_text);
  const int proposals_per_op = std::stoi(*k_text);
  const std::optional<int64_t> max_decisions =
      max_text->empty() ? std::nullopt
                        : std::optional<int64_t>(std::stoll(*max_text));

  StatusOr<std::optional<fb::DType>> gemm_dtype =
      ParseGemmDType(std::optional<std::string>(*dtype_text));
  if (!gemm_dtype.ok()) return gemm_dtype.status();
  PriceOptions price;
  price.gemm_dtype = *gemm_dtype;
  StatusOr<Coster> coster = Coster::Create(*module->target, price);
  if (!coster.ok()) return coster.status();

  std::map<int, Recipe> pinned;
  std::string recipe_name;
  if (!options.recipe_path.empty()) {
    recipe_name = ir::DisplayName(options.recipe_path);
    std::string text;
    TILEC_RETURN_IF_ERROR(ir::ReadFile(options.recipe_path, &text));
    StatusOr<std::map<int, Recipe>> parsed =
        ParseRecipeFile(text, recipe_name, *graph, *coster);
    if (!parsed.ok()) return parsed.status();
    pinned = std::move(*parsed);
  }
  const std::vector<std::string> flags = RecordedFlags(
      seed, proposals_per_op, *dtype_text, max_decisions, recipe_name);
  if (checkpoint) {
    std::optional<std::string> saved_recipe =
        RecordedValue(checkpoint_flags, "recipe");
    if (saved_recipe.value_or("") != recipe_name) {
      return Status::BadInput("checkpoint " + resume_name + " was made " +
                              (saved_recipe ? "with --recipe=" + *saved_recipe
                                            : std::string("without --recipe")) +
                              ", this run has " +
                              (recipe_name.empty()
                                   ? std::string("none")
                                   : "--recipe=" + recipe_name));
    }
  }

  SearchOptions search_options;
  search_options.seed = seed;
  search_options.attempts = options.attempts;
  search_options.proposals_per_op = proposals_per_op;
  search_options.max_decisions = max_decisions.value_or(-1);
  search_options.pinned = pinned;
  search_options.checkpoint_every = options.checkpoint_every;
  const bool explain_all = options.explain == "all";
  if (explain_all && options.messages) {
    search_options.on_decision = [&](const fb::DecisionT& d) {
      *options.messages << kPassName << ": " << ir::DecisionText(d) << "\n";
    };
  }
  if (options.messages) {
    search_options.on_progress = [&](const std::string& line) {
      Say(options, line);
    };
  }
  if (!options.checkpoint_path.empty()) {
    search_options.save_checkpoint =
        [&](const fb::SearchCheckpointT& state,
            const std::vector<fb::DecisionT>& decisions) -> Status {
      fb::ModuleT saved = input;
      auto run = std::make_unique<fb::PassRunT>();
      run->pass = kPassName;
      run->flags = flags;
      for (const fb::DecisionT& d : decisions) {
        run->decisions.push_back(std::make_unique<fb::DecisionT>(d));
      }
      saved.log.push_back(std::move(run));
      saved.checkpoint = std::make_unique<fb::SearchCheckpointT>(state);
      return ir::WriteModule(saved, kPassName, options.checkpoint_path);
    };
  }

  Search search(*graph, *coster, search_options);
  if (checkpoint) {
    std::vector<fb::DecisionT> decisions;
    for (const auto& d : checkpoint->log.back()->decisions) {
      decisions.push_back(*d);
    }
    Status restored =
        search.Restore(*checkpoint->checkpoint, std::move(decisions));
    if (!restored.ok()) {
      return Status(restored.code(),
                    "checkpoint " + resume_name + ": " + restored.message());
    }
    if (explain_all && options.messages) {
      for (const fb::DecisionT& d : search.decisions()) {
        *options.messages << kPassName << ": " << ir::DecisionText(d) << "\n";
      }
    }
  } else {
    TILEC_RETURN_IF_ERROR(search.Initialize());
  }
  TILEC_RETURN_IF_ERROR(search.Run());
  Say(options, std::to_string(search.attempts()) + " attempts, " +
                   std::to_string(search.accepted()) + " accepted" +
                   (search.converged() ? " (converged: every proposal "
                                         "for the incumbent was tried and "
                                         "rejected)"
                                       : "") +
                   "; " + std::to_string(search.evaluation().total_cycles) +
                   " cycles, peak " +
                   std::to_string(search.evaluation().peak_bytes) +
                   " B per tile");

  if (explain_op >= 0) {
    const int op = explain_op;
    const uint32_t id = graph->op(op).id;
    StatusOr<std::vector<Search::Alternative>> alternatives =
        search.Alternatives(op);
    if (!alternatives.ok()) return alternatives.status();
    if (options.messages) {
      std::ostream& os = *options.messages;
      os << kPassName << ": alternatives for " << graph->OpLabel(op)
         << " in the final plan (plan cycles, op cycles, peak bytes per "
            "tile):\n";
      for (const Search::Alternative& a : *alternatives) {
        os << (a.chosen ? "  * " : "    ") << a.recipe.Text() << ": plan "
           << a.total_cycles << ", op " << a.op_cycles << ", peak "
           << a.peak_bytes << (a.feasible ? "" : " (does not fit)") << "\n";
      }
      int64_t touched = 0;
      for (const fb::DecisionT& d : search.decisions()) {
        if (std::find(d.ops.begin(), d.ops.end(), id) != d.ops.end()) {
          ++touched;
          os << "  decision: " << ir::DecisionText(d) << "\n";
        }
      }
      os << "  " << touched << " decisions touched op " << id << "\n";
    }
  }

  // Write the plan.
  std::string note;
  if (price.gemm_dtype) {
    note = "inputs priced as " + ir::DTypeText(*price.gemm_dtype) +
           " (--gemm_dtype)";
  }
  auto run = std::make_unique<fb::PassRunT>();
  run->pass = kPassName;
  run->flags = flags;
  for (const fb::DecisionT& d : search.decisions()) {
    run->decisions.push_back(std::make_unique<fb::DecisionT>(d));
  }
  const Evaluation& eval = search.evaluation();
  StatusOr<std::vector<uint32_t>> inserted =
      WritePlan(*graph, *coster, search.incumbent(), eval, note, module);
  if (!inserted.ok()) return inserted.status();
  for (size_t i = 0; i < eval.redistributions.size(); ++i) {
    const Redistribution& red = eval.redistributions[i];
    const ValueNode& v = graph->value(red.value);
    auto d = std::make_unique<fb::DecisionT>();
    d->ops = {(*inserted)[i]};
    for (const auto& use : red.uses) d->ops.push_back(graph->op(use.first).id);
    d->action = "insert redistribute of %" + std::to_string(v.id) + " " +
                v.name + ": " +
                passes::FormatOwnership(eval.owners[red.value]) + " -> " +
                passes::FormatOwnership(red.to);
    d->outcome = fb::Outcome::Info;
    d->reason = "its consumers need another ownership: " +
                std::to_string(red.cost.phase_cycles) + " exchange + " +
                std::to_string(red.cost.local_copy_cycles) +
                " local copy cycles";
    d->cycles_before = d->cycles_after = red.Cycles();
    d->bytes_before = d->bytes_after = red.cost.bytes_received;
    run->decisions.push_back(std::move(d));
  }
  if (price.gemm_dtype) {
    auto d = std::make_unique<fb::DecisionT>();
    d->action = "GEMM inputs priced as " + ir::DTypeText(*price.gemm_dtype);
    d->outcome = fb::Outcome::Info;
    d->reason =
        "--gemm_dtype: no quantize pass yet; left operands are cast at their "
        "owners (cast kernel charged) and delivered in it, weights resident "
        "in it; the graph's dtypes are unchanged";
    d->cycles_before = d->cycles_after = eval.total_cycles;
    d->bytes_before = d->bytes_after = eval.peak_bytes;
    run->decisions.insert(run->decisions.begin(), std::move(d));
  }
  module->log.push_back(std::move(run));
  return Status::Ok();
}

}  // namespace tilec::plan
