// The verifier's check that buffers sharing tile memory are never live at
// once (docs/device-program.md, "Buffer lifetimes"): emit-device reuses
// memory between buffers whose lifetimes do not meet (a serial step's
// scratch, an op's scratch after the op), and a program that reuses it
// while a value is still to be read would compute with another buffer's
// data. Lifetimes are read from the program alone, in the order the
// simulator runs it, with a repeat body taken once (its iterations are
// alike but for renamed buffers).

#include <algorithm>
#include <limits>
#include <map>
#include <optional>
#include <queue>
#include <string>
#include <tuple>
#include <utility>
#include <unordered_map>
#include <vector>

#include "kernels/registry.h"
#include "sim/engine.h"

namespace tilec::sim::engine {
namespace {

constexpr int64_t kForever = std::numeric_limits<int64_t>::max() / 4;

// A buffer's accesses in slots: superstep s's computes of the module's
// r-th op at s * per_step + r, its exchange after every compute at
// s * per_step + ops.
struct Accesses {
  int64_t first = kForever, last = -kForever;
  // In a repeat body: its first and last slot there, and whether the first
  // access there reads a value written before (an earlier iteration's or
  // the program's before the body).
  int repeat = -1;
  int64_t body_first = kForever, body_last = -kForever;
  int64_t body_first_order = kForever;  // call order within body_first's slot
  bool body_reads_first = false;
  bool outside_body = false;  // also accessed outside its repeat

  void Touch(int64_t slot) {
    first = std::min(first, slot);
    last = std::max(last, slot);
  }
};

// Whether the call reads arg `arg` (kernels/registry.h: outputs last; a
// GEMM that accumulates reads its output too).
bool ReadsArg(const fb::ComputeT& c, size_t arg) {
  const kernels::KernelInfo* k = kernels::FindKernel(c.kernel);
  const size_t outputs = k ? static_cast<size_t>(k->outputs) : 1;
  if (arg + outputs < c.args.size()) return true;
  return k && k->memory_rule == kernels::MemoryRule::kGemmAccumulator &&
         c.params.size() >= 4 && c.params[3] != 0;
}

// A buffer's bytes on its tile and the slots it is live in.
struct Live {
  int64_t start, end, offset, bytes;
  uint32_t id;
};

// The lifetimes of a program's buffers, phase by phase: the accesses of
// every superstep, the renamed buffers' accesses through their body names,
// the lifetimes those make with the host's bindings, and per tile the
// first two buffers that meet in both bytes and slots.
class Lifetimes {
 public:
  Lifetimes(const fb::ModuleT& module, const fb::DeviceProgramT& program)
      : program_(program),
        ops_(static_cast<int64_t>(module.ops.size())),
        per_step_(ops_ + 1) {
    for (size_t i = 0; i < module.ops.size(); ++i) {
      if (module.ops[i]) rank_[module.ops[i]->id] = static_cast<int64_t>(i);
    }
    const int steps = static_cast<int>(program.supersteps.size());
    repeat_of_.assign(steps, -1);
    for (size_t r = 0; r < program.repeats.size(); ++r) {
      const fb::SuperstepRepeatT& rep = *program.repeats[r];
      for (int64_t s = rep.first;
           s < int64_t{rep.first} + rep.count && s < steps; ++s) {
        repeat_of_[s] = static_cast<int>(r);
      }
    }
  }

  void CollectAccesses() {
    for (size_t s = 0; s < program_.supersteps.size(); ++s) {
      const fb::SuperstepT& step = *program_.supersteps[s];
      const int64_t first_slot = static_cast<int64_t>(s) * per_step_;
      int64_t order = 0;
      for (const auto& c : step.compute) {
        auto it = rank_.find(c->op);
        const int64_t slot = first_slot + (it == rank_.end() ? ops_ : it->second);
        for (size_t i = 0; i < c->args.size(); ++i) {
          Touch(c->args[i]->buffer, s, slot, order, ReadsArg(*c, i));
        }
        ++order;
      }
      for (const auto& t : step.exchange) {
        Touch(t->src_buffer, s, first_slot + ops_, order, true);
        for (const auto& d : t->destinations) {
          Touch(d->buffer, s, first_slot + ops_, order, false);
        }
      }
    }
  }

  // A renamed buffer is what its body name means in that iteration.
  void ApplyRenames() {
    for (const auto& rep : program_.repeats) {
      for (const auto& it : rep->iterations) {
        for (const fb::BufferRename& rn : it->renames) {
          auto from = uses_.find(rn.from());
          if (from == uses_.end() || from->second.repeat < 0) continue;
          const Accesses body = from->second;
          Accesses& to = uses_[rn.to()];
          to.Touch(body.body_first);
          to.Touch(body.body_last);
          to.repeat = body.repeat;
          to.body_first = std::min(to.body_first, body.body_first);
          to.body_last = std::max(to.body_last, body.body_last);
          to.body_reads_first |= body.body_reads_first;
        }
      }
    }
  }

  // Each tile's live buffers (`buffer` finds a checked buffer by id).
  template <typename FindBuffer>
  std::vector<std::vector<Live>> PerTile(int tiles, FindBuffer buffer) const {
    std::unordered_map<uint32_t, char> host;  // 1 written, 2 read
    for (const auto& b : program_.inputs) {
      for (const auto& f : b->fragments) host[f->buffer] |= 1;
    }
    for (const auto& b : program_.outputs) {
      for (const auto& f : b->fragments) host[f->buffer] |= 2;
    }
    std::vector<std::vector<Live>> per_tile(tiles);
    for (const auto& [id, a] : uses_) {
      const fb::BufferT* b = buffer(id);
      if (b == nullptr || b->bytes == 0) continue;
      int64_t start = a.first, end = a.last;
      const char h = host.count(id) ? host.at(id) : 0;
      if (h & 1) start = -1;
      if (h & 2) end = kForever;
      // A value the body reads before it writes it, or that lives on
      // outside the body, is live through every iteration.
      if (a.repeat >= 0 && (a.outside_body || a.body_reads_first || (h & 1))) {
        const fb::SuperstepRepeatT& rep = *program_.repeats[a.repeat];
        start = std::min(start, int64_t{rep.first} * per_step_);
        end = std::max(end, int64_t{rep.first + rep.count} * per_step_ - 1);
      }
      per_tile[b->tile].push_back({start, end, b->offset, b->bytes, id});
    }
    return per_tile;
  }

  std::string SlotText(int64_t slot) const {
    if (slot < 0) return "the program start";
    if (slot >= kForever) return "the program end";
    return "superstep " + std::to_string(slot / per_step_);
  }

 private:
  void Touch(uint32_t buffer, size_t s, int64_t slot, int64_t order,
             bool read) {
    Accesses& a = uses_[buffer];
    a.Touch(slot);
    const int r = repeat_of_[s];
    if (r < 0) {
      a.outside_body = true;
      return;
    }
    if (a.repeat >= 0 && a.repeat != r) a.outside_body = true;
    a.repeat = r;
    if (slot < a.body_first ||
        (slot == a.body_first && order < a.body_first_order)) {
      a.body_first = slot;
      a.body_first_order = order;
      a.body_reads_first = read;
    }
    a.body_last = std::max(a.body_last, slot);
  }

  const fb::DeviceProgramT& program_;
  const int64_t ops_, per_step_;
  std::unordered_map<uint32_t, int64_t> rank_;  // op id -> its place
  std::vector<int> repeat_of_;                  // by superstep, -1: none
  std::unordered_map<uint32_t, Accesses> uses_;
};

// The first pair of `live` (one tile's buffers) that meet in both bytes
// and slots, by a sweep over starts keeping the live buffers by address.
std::optional<std::pair<Live, Live>> FirstClash(std::vector<Live> live) {
  std::sort(live.begin(), live.end(), [](const Live& x, const Live& y) {
    return std::tie(x.start, x.offset, x.id) < std::tie(y.start, y.offset, y.id);
  });
  // Live at the current start, by address: never overlapping.
  std::map<int64_t, const Live*> by_address;
  using Ending = std::pair<int64_t, const Live*>;
  std::priority_queue<Ending, std::vector<Ending>, std::greater<Ending>> ending;
  for (const Live& b : live) {
    while (!ending.empty() && ending.top().first < b.start) {
      by_address.erase(ending.top().second->offset);
      ending.pop();
    }
    auto next = by_address.lower_bound(b.offset);
    if (next != by_address.end() && next->first < b.offset + b.bytes) {
      return std::pair(*next->second, b);
    }
    if (next != by_address.begin()) {
      const Live& before = *std::prev(next)->second;
      if (before.offset + before.bytes > b.offset) return std::pair(before, b);
    }
    by_address[b.offset] = &b;
    ending.push({b.end, &b});
  }
  return std::nullopt;
}

}  // namespace

Status Engine::CheckBufferLifetimes() const {
  Lifetimes lifetimes(module_, *program_);
  lifetimes.CollectAccesses();
  lifetimes.ApplyRenames();
  auto buffer = [&](uint32_t id) -> const fb::BufferT* {
    auto it = buffers_.find(id);
    return it == buffers_.end() ? nullptr : it->second.buffer;
  };
  std::vector<std::vector<Live>> per_tile = lifetimes.PerTile(tiles_, buffer);
  for (int tile = 0; tile < tiles_; ++tile) {
    const std::optional<std::pair<Live, Live>> clash =
        FirstClash(std::move(per_tile[tile]));
    if (!clash) continue;
    auto describe = [&](const Live& x) {
      const fb::BufferT& b = *buffer(x.id);
      return BufferText(x.id) + " \"" + b.name + "\"" +
             (b.op >= 0 ? " (op " + std::to_string(b.op) + ")" : std::string()) +
             ", live from " + lifetimes.SlotText(x.start) + " to " +
             lifetimes.SlotText(x.end);
    };
    const auto& [a, b] = *clash;
    const int64_t lo = std::max(a.offset, b.offset);
    const int64_t hi = std::min(a.offset + a.bytes, b.offset + b.bytes);
    return Status::BadInput(
        "tile " + std::to_string(tile) + ": " + describe(a) + ", and " +
        describe(b) + ", share bytes [" + std::to_string(lo) + ", " +
        std::to_string(hi) +
        "): memory reused while its value is still to be read");
  }
  return Status::Ok();
}

}  // namespace tilec::sim::engine
