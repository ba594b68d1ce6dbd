// The candidate recipes of one op that plan-ownership's search
// (passes/plan/search.h) considers: context-free ones from the op alone,
// and the layouts it could adopt from its neighbours in a plan.

#ifndef TILEC_PASSES_PLAN_SEARCH_CANDIDATES_H_
#define TILEC_PASSES_PLAN_SEARCH_CANDIDATES_H_

#include <set>
#include <string>
#include <vector>

#include "formats/tilec_generated.h"
#include "passes/plan/cost.h"
#include "passes/plan/graph.h"
#include "passes/plan/plan.h"

namespace tilec::plan {

// Context-free candidate recipes of one op, best first by their own cost:
// GEMM grids (each with Complete, Streamed and Batched staging), elementwise
// blocked and flat layouts, row-wise row splits.
std::vector<Recipe> Candidates(const Graph& graph, const Coster& coster,
                               int op);

// A GEMM recipe with its rows in 2, 4 and 8 serial steps, as many as its
// largest row block has rows, and if `interleaved` with a K split the same
// interleaved, as many as each reducer has rows (docs/planning.md, "Serial
// row steps").
// Each step costs its own phases and saves scratch, so memory repair
// offers them; the searched candidates do not.
std::vector<Recipe> SerialStepVariants(const Graph& graph, int op,
                                       const Recipe& recipe, bool interleaved);

// The grids memory repair offers in serial steps to a GEMM that does not
// fit at its own step, with a new grid and steps in one move: K-split grids
// (interleaved steps need one), the 16 fastest by bound
// (passes/plan/gemm_bound.h) and the 6 that need the least memory in 8
// steps, where only the weight block does not shrink. Complete staging: a
// step stages only its rows.
std::vector<Recipe> SteppedGridCandidates(const Graph& graph,
                                          const Coster& coster, int op);

// Layouts an op could adopt from its neighbours in `plan`: its producer's
// result ownership and what its consumers need of its result.
std::vector<Recipe> NeighbourRecipes(const Graph& graph, const Coster& coster,
                                     const Plan& plan, const Evaluation& eval,
                                     int op);

// A recipe of `kind` in `layout`.
Recipe LayoutRecipe(fb::RecipeKind kind, fb::OwnershipT layout);
// The recipe kind of an op of class `c`.
fb::RecipeKind KindOf(OpClass c);
// Appends `r` to `list` unless a recipe of the same text is in `seen`.
void AddUnique(std::vector<Recipe>& list, std::set<std::string>& seen,
               const Recipe& r);

}  // namespace tilec::plan

#endif  // TILEC_PASSES_PLAN_SEARCH_CANDIDATES_H_
