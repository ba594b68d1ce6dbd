#include "formats/target.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <set>
#include <sstream>
#include <tuple>
#include <vector>

namespace tilec::ir {
namespace {

constexpr std::array<std::string_view, 8> kVariables = {
    "M", "K", "N", "n", "rows", "w", "P", "B"};

constexpr std::string_view kRequiredKernels[] = {
    formula::kGemmFp8,
    formula::kGemmF16,
    formula::kGemmF32,
    formula::kReducePartials,
    formula::kAdd,
    formula::kGelu,
    formula::kBiasGelu,
    formula::kBiasGeluFp8,
    formula::kCast,
    formula::kLayerNorm,
    formula::kLayerNormFp8,
    formula::kLnMoments,
    formula::kResidualMoments,
    formula::kMomentsCombine,
    formula::kNormalize,
    formula::kNormalizeFp8,
    formula::kSoftmax,
    formula::kSoftmaxFp8,
    formula::kCopy};

bool IsKnownVariable(std::string_view name) {
  return std::find(kVariables.begin(), kVariables.end(), name) !=
         kVariables.end();
}

// Collects problems so that one validation run reports all of them.
class Problems {
 public:
  template <typename... Args>
  void Add(const Args&... parts) {
    std::ostringstream os;
    (os << ... << parts);
    list_.push_back(os.str());
  }
  std::string Join() const {
    std::string out;
    for (const std::string& p : list_) {
      if (!out.empty()) out += "; ";
      out += p;
    }
    return out;
  }

 private:
  std::vector<std::string> list_;
};

void ValidateFormula(const fb::KernelFormulaT& f, Problems& problems) {
  const std::string where = "kernel '" + f.kernel + "'";
  if (!(f.base >= 0)) problems.Add(where, ": base ", f.base, " is negative");
  if (!(f.multiplier > 0)) {
    problems.Add(where, ": multiplier ", f.multiplier, " is not positive");
  }
  if (!(f.slow_path_term_multiplier > 0)) {
    problems.Add(where, ": slow_path_term_multiplier ",
                 f.slow_path_term_multiplier, " is not positive");
  }
  for (double number : {f.base, f.multiplier, f.slow_path_term_multiplier}) {
    if (std::isinf(number)) problems.Add(where, ": a number is infinite");
  }
  for (size_t t = 0; t < f.terms.size(); ++t) {
    const fb::CostTermT* term = f.terms[t].get();
    if (term == nullptr) {
      problems.Add(where, ": term ", t, " is null");
      continue;
    }
    if (!(term->coefficient >= 0)) {
      problems.Add(where, ": term ", t, " coefficient ", term->coefficient,
                   " is negative");
    }
    if (std::isinf(term->coefficient)) {
      problems.Add(where, ": term ", t, " coefficient is infinite");
    }
    for (size_t i = 0; i < term->factors.size(); ++i) {
      const fb::CostFactorT* factor = term->factors[i].get();
      if (factor == nullptr) {
        problems.Add(where, ": term ", t, " factor ", i, " is null");
        continue;
      }
      if (!IsKnownVariable(factor->variable)) {
        problems.Add(where, ": term ", t, " uses unknown variable '",
                     factor->variable, "' (known: M K N n rows w P B)");
      }
      if (factor->divisor <= 0) {
        problems.Add(where, ": term ", t, " variable ", factor->variable,
                     " has divisor ", factor->divisor, " (must be positive)");
      }
    }
  }
}

}  // namespace

std::span<const std::string_view> FormulaVariables() { return kVariables; }

std::span<const std::string_view> RequiredKernels() {
  return kRequiredKernels;
}

Status ValidateTarget(const fb::TargetT& t, bool require_kernels) {
  Problems problems;
  auto positive = [&](const char* name, double v) {
    if (!(v > 0)) problems.Add("target '", t.name, "': ", name, " = ", v,
                               " must be positive");
  };
  auto non_negative = [&](const char* name, double v) {
    if (!(v >= 0)) problems.Add("target '", t.name, "': ", name, " = ", v,
                                " must not be negative");
  };
  positive("tiles", t.tiles);
  positive("clock_hz", t.clock_hz);
  positive("sram_bytes", t.sram_bytes);
  if (t.reserved_bytes != 0) {
    problems.Add("target '", t.name, "': reserved_bytes = ", t.reserved_bytes,
                 " is no longer used: code and exchange tables are sized per "
                 "program (runtime_code_bytes and the code_* numbers); set it "
                 "to 0");
  }
  positive("element_bytes", t.element_bytes);
  non_negative("standard_elements", t.standard_elements);
  positive("interleaved_element_bytes", t.interleaved_element_bytes);
  positive("workers", t.workers);
  positive("amp_macs_fp8", t.amp_macs_fp8);
  positive("amp_macs_f16", t.amp_macs_f16);
  positive("amp_macs_f32", t.amp_macs_f32);
  positive("exchange_bytes_per_cycle", t.exchange_bytes_per_cycle);
  non_negative("exchange_fragment_cycles", t.exchange_fragment_cycles);
  non_negative("sync_cycles", t.sync_cycles);
  positive("vector_elements", t.vector_elements);
  non_negative("exchange_route_latency_cycles",
               t.exchange_route_latency_cycles);
  non_negative("exchange_route_latency_per_row",
               t.exchange_route_latency_per_row);
  positive("exchange_tiles_per_row", t.exchange_tiles_per_row);
  positive("exchange_max_packet_words", t.exchange_max_packet_words);
  for (auto [name, bytes] :
       {std::pair<const char*, int>{"runtime_code_bytes", t.runtime_code_bytes},
        {"code_bytes_per_superstep", t.code_bytes_per_superstep},
        {"code_bytes_per_call", t.code_bytes_per_call},
        {"code_bytes_per_operand", t.code_bytes_per_operand},
        {"exchange_code_phase_bytes", t.exchange_code_phase_bytes},
        {"exchange_code_send_bytes", t.exchange_code_send_bytes},
        {"exchange_code_long_send_words", t.exchange_code_long_send_words},
        {"exchange_code_long_send_bytes", t.exchange_code_long_send_bytes},
        {"exchange_code_receive_bytes", t.exchange_code_receive_bytes},
        {"exchange_code_pointer_bytes", t.exchange_code_pointer_bytes},
        {"base_write_cycles", t.base_write_cycles},
        {"patch_call_cycles", t.patch_call_cycles},
        {"patch_word_cycles", t.patch_word_cycles}}) {
    non_negative(name, bytes);
  }
  positive("exchange_code_alignment", t.exchange_code_alignment);
  if (t.exchange_bytes_per_cycle > 0 && t.exchange_bytes_per_cycle != 4) {
    // The schedule moves one 32-bit word per cycle per lane.
    problems.Add("target '", t.name, "': exchange_bytes_per_cycle = ",
                 t.exchange_bytes_per_cycle,
                 ": exchange schedules move one 4-byte word per cycle");
  }
  if (t.tiles > kMaxTargetTiles) {
    problems.Add("target '", t.name, "': tiles = ", t.tiles,
                 " is more than the ", kMaxTargetTiles, " tilec supports");
  }
  const int64_t farthest_latency =
      t.exchange_route_latency_cycles +
      int64_t{t.exchange_route_latency_per_row} *
          ((t.tiles - 1) / std::max(t.exchange_tiles_per_row, 1));
  for (auto [name, value, limit] :
       {std::tuple<const char*, int64_t, int64_t>{"exchange_fragment_cycles",
                                                  t.exchange_fragment_cycles,
                                                  kMaxExchangeFragmentCycles},
        {"exchange_max_packet_words", t.exchange_max_packet_words,
         kMaxExchangePacketWords},
        {"the farthest tile's route latency (exchange_route_latency_cycles "
         "+ exchange_route_latency_per_row per row)",
         farthest_latency, kMaxRouteLatencyCycles}}) {
    if (value > limit) {
      problems.Add("target '", t.name, "': ", name, " = ", value,
                   " is more than the ", limit, " tilec supports");
    }
  }
  if (t.sram_bytes > kMaxTileSramBytes) {
    problems.Add("target '", t.name, "': sram_bytes = ", t.sram_bytes,
                 " is more than the ", kMaxTileSramBytes,
                 " bytes per tile tilec supports");
  }
  const int64_t standard_end = int64_t{t.standard_elements} * t.element_bytes;
  if (t.element_bytes > 0 && t.standard_elements > 0 &&
      standard_end > t.sram_bytes) {
    problems.Add("target '", t.name, "': standard_elements ",
                 t.standard_elements, " x element_bytes ", t.element_bytes,
                 " is more than sram_bytes ", t.sram_bytes);
  }
  if (t.element_bytes > 0 && t.runtime_code_bytes > 0 &&
      t.runtime_code_bytes >= standard_end) {
    problems.Add("target '", t.name, "': runtime_code_bytes ",
                 t.runtime_code_bytes, " leaves no room in the ",
                 standard_end, " bytes of standard memory that code lives in");
  }
  if (t.alignment <= 0 || (t.alignment & (t.alignment - 1)) != 0) {
    problems.Add("target '", t.name, "': alignment ", t.alignment,
                 " must be a positive power of two");
  }

  std::set<std::string, std::less<>> names;
  for (const auto& f : t.kernels) {
    if (f == nullptr) {
      problems.Add("target '", t.name, "': null kernel formula");
      continue;
    }
    if (!names.insert(f->kernel).second) {
      problems.Add("target '", t.name, "': kernel '", f->kernel,
                   "' is defined twice");
    }
    ValidateFormula(*f, problems);
  }
  std::string missing;
  for (std::string_view required : kRequiredKernels) {
    if (names.find(required) == names.end()) {
      missing += std::string(missing.empty() ? "" : ", ") + "'" +
                 std::string(required) + "'";
    }
  }
  if (require_kernels && !missing.empty()) {
    problems.Add("target '", t.name, "' lacks kernel formula ", missing);
  }
  const std::string message = problems.Join();
  return message.empty() ? Status::Ok() : Status::BadInput(message);
}

int64_t CodeRegionBytes(const fb::TargetT& target, int64_t code_bytes) {
  const int64_t element = std::max(target.element_bytes, 1);
  return (code_bytes + element - 1) / element * element;
}

int64_t MaxTileTensorBytes(const fb::TargetT& target) {
  return int64_t{target.sram_bytes} -
         CodeRegionBytes(target, target.runtime_code_bytes);
}

int64_t TargetTensorBytes(const fb::TargetT& target) {
  return int64_t{target.tiles} * MaxTileTensorBytes(target);
}

}  // namespace tilec::ir
