// Self-attention in image steps (docs/planning.md, "Attention in image
// steps"): the chain from a scores op to the context op that reads its
// probabilities runs once per group of images, one group after another, so
// the scores and probabilities of only one group are live at a time.
//
// A chain is a self-attention AttentionScores op, the single-operand ops of
// the same [B,H,T,T] shape that follow it one after another (the softmax,
// a cast to FP8), each read only by the next, and the AttentionContext that
// reads the last of them and the same qkv. With S steps of G = B/S images,
// step s is a copy of every op of the chain on images [s*G, (s+1)*G): its
// attention ops read those images of qkv in place (`first_image`), and the
// steps' contexts [G*T, H*D] are joined into the original context value by
// one CopyRows. Step 0 keeps the chain's op and value ids; nothing outside
// the chain changes.

#ifndef TILEC_PASSES_PLAN_ATTENTION_STEPS_H_
#define TILEC_PASSES_PLAN_ATTENTION_STEPS_H_

#include <cstdint>
#include <vector>

#include "formats/status.h"
#include "formats/tilec_generated.h"
#include "passes/plan/graph.h"
#include "passes/plan/plan.h"

namespace tilec::plan {

struct AttentionChain {
  std::vector<int> ops;  // indexes into module.ops: scores, ..., context
  int64_t images = 1;    // B
};

// The chains of `module`, in op order.
std::vector<AttentionChain> FindAttentionChains(const fb::ModuleT& module);

// The step counts every chain admits, smallest first: the divisors of the
// chains' common image count greater than 1 (empty without chains, or when
// their image counts differ).
std::vector<int> AttentionStepCounts(const fb::ModuleT& module);

// Runs every chain in `steps` image steps (1: unchanged). An error (one
// sentence) when `steps` does not divide a chain's image count.
Status SplitAttentionIntoImageSteps(int steps, fb::ModuleT* module);

// Whether `closest`, a plan of `graph` (built from `module`) that does not
// fit, is over capacity at an op of a chain or at a redistribution of a
// value a chain makes: all that more image steps shrink. Elsewhere they
// only add phases and exchange tables.
bool ChainsOverCapacity(const fb::ModuleT& module, const Graph& graph,
                        const Evaluation& closest);

}  // namespace tilec::plan

#endif  // TILEC_PASSES_PLAN_ATTENTION_STEPS_H_
