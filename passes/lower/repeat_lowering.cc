#include "passes/lower/repeat_lowering.h"

#include <algorithm>
#include <string>
#include <utility>

namespace tilec::lower {
namespace {

// carried_in's buffer -> carried_out's on every tile that holds it.
StatusOr<std::map<int, int>> CarriedRenames(const fb::RepeatT& r,
                                            const Lowering& lowering) {
  std::map<int, int> renames;
  const std::vector<int> in_tiles = lowering.TilesOf(r.carried_in);
  const std::vector<int> out_tiles = lowering.TilesOf(r.carried_out);
  const std::string what = "carried_in %" + std::to_string(r.carried_in) +
                           " and carried_out %" +
                           std::to_string(r.carried_out);
  if (in_tiles != out_tiles) {
    return Status::Internal(what + " are stored on different tiles: the plan "
                            "must give them one ownership");
  }
  const std::vector<VBuffer>& buffers = lowering.buffers();
  for (int t : in_tiles) {
    const Storage* in = lowering.Find(r.carried_in, t);
    const Storage* out = lowering.Find(r.carried_out, t);
    if (buffers[in->buffer].bytes != buffers[out->buffer].bytes ||
        in->segments.size() != out->segments.size()) {
      return Status::Internal(what + " are stored differently on tile " +
                              std::to_string(t));
    }
    if (in->buffer != out->buffer) renames[in->buffer] = out->buffer;
  }
  return renames;
}

}  // namespace

StatusOr<BodyLowering> LowerRepeat(const ir::RepeatBody& body,
                                   Lowering* lowering) {
  const fb::RepeatT& r = *body.repeat;
  BodyLowering b;
  b.body = body;
  StatusOr<std::map<int, int>> carried = CarriedRenames(r, *lowering);
  if (!carried.ok()) return carried.status();
  for (const auto& [in, out] : *carried) {
    b.carried_in.insert(in);
    b.carried_out.insert(out);
  }
  b.renames.resize(r.count);
  for (uint32_t i = 1; i < r.count; ++i) {
    std::map<int, int>& renames = b.renames[i];
    renames = *carried;
    for (const auto& [weight, twin] : ir::IterationWeights(r, i)) {
      for (const auto& [from, to] : lowering->StoreLike(twin, weight)) {
        renames[from] = to;
      }
    }
  }
  return b;
}

void KeepBodyDataLive(const BodyLowering& b, int64_t body_first_slot,
                      int64_t body_last_slot, std::vector<int64_t>* first,
                      std::vector<int64_t>* last) {
  for (size_t id = 0; id < first->size(); ++id) {
    int64_t& f = (*first)[id];
    int64_t& l = (*last)[id];
    const int buffer = static_cast<int>(id);
    if (b.carried_out.count(buffer)) {
      f = std::min(f, body_first_slot);
      l = std::max(l, body_last_slot);
    } else if (!b.carried_in.count(buffer) && f < body_first_slot &&
               l >= body_first_slot) {
      l = std::max(l, body_last_slot);
    }
  }
}

void AddRenamedRules(const BodyLowering& b, const std::vector<VBuffer>& buffers,
                     std::vector<std::vector<AllocRule>>* per_tile) {
  for (std::vector<AllocRule>& rules : *per_tile) {
    const size_t n = rules.size();
    for (size_t k = 0; k < n; ++k) {
      const AllocRule rule = rules[k];
      for (const std::map<int, int>& renames : b.renames) {
        auto a = renames.find(rule.a);
        auto c = renames.find(rule.b);
        if (a == renames.end() && c == renames.end()) continue;
        AllocRule renamed = rule;
        if (a != renames.end()) renamed.a = a->second;
        if (c != renames.end()) renamed.b = c->second;
        if (buffers[renamed.a].tile == buffers[renamed.b].tile) {
          rules.push_back(renamed);
        }
      }
    }
  }
}

std::unique_ptr<fb::SuperstepRepeatT> EmitRepeat(
    const BodyLowering& b, const std::vector<int64_t>& id_of) {
  auto repeat = std::make_unique<fb::SuperstepRepeatT>();
  repeat->first = static_cast<uint32_t>(b.first_step);
  repeat->count = static_cast<uint32_t>(b.last_step - b.first_step + 1);
  for (const std::map<int, int>& renames : b.renames) {
    auto iteration = std::make_unique<fb::RepeatIterationT>();
    for (const auto& [from, to] : renames) {
      if (id_of[from] < 0 || id_of[to] < 0) continue;
      iteration->renames.emplace_back(static_cast<uint32_t>(id_of[from]),
                                      static_cast<uint32_t>(id_of[to]));
    }
    std::sort(iteration->renames.begin(), iteration->renames.end(),
              [](const fb::BufferRename& x, const fb::BufferRename& y) {
                return x.from() < y.from();
              });
    repeat->iterations.push_back(std::move(iteration));
  }
  return repeat;
}

}  // namespace tilec::lower
