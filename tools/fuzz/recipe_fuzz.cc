// libFuzzer target: the text parsers of plan-ownership's --recipe lines
// (passes/plan/graph.h) and of --explain (passes/core/decisions.h). A recipe
// that parses must print (Recipe::Text) to text that parses back to the
// same recipe: the text is also the recipe's identity in checkpoints.

#include <cstddef>
#include <cstdint>
#include <string>

#include "passes/core/decisions.h"
#include "passes/plan/graph.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  (void)tilec::passes::ExplainFilter::Parse(text);
  tilec::StatusOr<tilec::plan::Recipe> recipe = tilec::plan::ParseRecipe(text);
  if (!recipe.ok()) return 0;
  const std::string printed = recipe->Text();
  tilec::StatusOr<tilec::plan::Recipe> again =
      tilec::plan::ParseRecipe(printed);
  if (!again.ok() || !(*again == *recipe) || again->Text() != printed) {
    __builtin_trap();
  }
  return 0;
}
