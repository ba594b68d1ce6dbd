#ifndef TILEC_FORMATS_PRINT_H_
#define TILEC_FORMATS_PRINT_H_

// The stable text form of the IR used by dump-ir, golden files and people:
// fixed ordering, fixed number formats, one op per line.

#include <string>
#include <vector>

#include "formats/ownership_text.h"
#include "formats/tilec_generated.h"

namespace tilec::ir {

struct PrintOptions {
  // Print every buffer, compute and transfer of a device program, not only
  // per-superstep totals.
  bool program_detail = false;
};

std::string PrintModule(const fb::ModuleT& module,
                        const PrintOptions& options = {});

// Pieces of the text form, shared with tools that print reports (and
// OwnershipText, from ownership_text.h).
std::string DTypeText(fb::DType dtype, int fp8_scale_exp = 0);
std::string ShapeText(const std::vector<int64_t>& shape);
std::string RecipeText(const fb::RecipeT& recipe);
std::string OpKindText(fb::OpKind kind);
std::string DecisionText(const fb::DecisionT& decision);
// "siglip-so400m-384 part=mlp-block layers=1 ...": the model line.
std::string ModelText(const fb::ModelT& model);
// Shortest text that reads back as the same float; stable across runs.
std::string NumberText(double value);
std::string NumberText(float value);

}  // namespace tilec::ir

#endif  // TILEC_FORMATS_PRINT_H_
