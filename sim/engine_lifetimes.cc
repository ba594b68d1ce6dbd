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
#include <queue>
#include <string>
#include <tuple>
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

}  // namespace

Status Engine::CheckBufferLifetimes() const {
  std::unordered_map<uint32_t, int64_t> rank;  // op id -> its place
  for (size_t i = 0; i < module_.ops.size(); ++i) {
    if (module_.ops[i]) rank[module_.ops[i]->id] = static_cast<int64_t>(i);
  }
  const int64_t ops = static_cast<int64_t>(module_.ops.size());
  const int64_t per_step = ops + 1;
  const int steps = static_cast<int>(program_->supersteps.size());
  std::vector<int> repeat_of(steps, -1);
  for (size_t r = 0; r < program_->repeats.size(); ++r) {
    const fb::SuperstepRepeatT& rep = *program_->repeats[r];
    for (int64_t s = rep.first; s < int64_t{rep.first} + rep.count && s < steps; ++s) {
      repeat_of[s] = static_cast<int>(r);
    }
  }
  std::unordered_map<uint32_t, Accesses> uses;
  auto touch = [&](uint32_t buffer, int s, int64_t slot, int64_t order,
                   bool read) {
    Accesses& a = uses[buffer];
    a.Touch(slot);
    const int r = repeat_of[s];
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
  };
  for (int s = 0; s < steps; ++s) {
    const fb::SuperstepT& step = *program_->supersteps[s];
    int64_t order = 0;
    for (const auto& c : step.compute) {
      auto it = rank.find(c->op);
      const int64_t slot =
          int64_t{s} * per_step + (it == rank.end() ? ops : it->second);
      for (size_t i = 0; i < c->args.size(); ++i) {
        touch(c->args[i]->buffer, s, slot, order, ReadsArg(*c, i));
      }
      ++order;
    }
    const int64_t slot = int64_t{s} * per_step + ops;
    for (const auto& t : step.exchange) {
      touch(t->src_buffer, s, slot, order, true);
      for (const auto& d : t->destinations) {
        touch(d->buffer, s, slot, order, false);
      }
    }
  }
  // A renamed buffer is what its body name means in that iteration.
  for (const auto& rep : program_->repeats) {
    for (const auto& it : rep->iterations) {
      for (const fb::BufferRename& rn : it->renames) {
        auto from = uses.find(rn.from());
        if (from == uses.end() || from->second.repeat < 0) continue;
        const Accesses body = from->second;
        Accesses& to = uses[rn.to()];
        to.Touch(body.body_first);
        to.Touch(body.body_last);
        to.repeat = body.repeat;
        to.body_first = std::min(to.body_first, body.body_first);
        to.body_last = std::max(to.body_last, body.body_last);
        to.body_reads_first |= body.body_reads_first;
      }
    }
  }
  std::unordered_map<uint32_t, char> host;  // 1 written, 2 read
  for (const auto& b : program_->inputs) {
    for (const auto& f : b->fragments) host[f->buffer] |= 1;
  }
  for (const auto& b : program_->outputs) {
    for (const auto& f : b->fragments) host[f->buffer] |= 2;
  }
  struct Live {
    int64_t start, end, offset, bytes;
    uint32_t id;
  };
  std::vector<std::vector<Live>> per_tile(tiles_);
  auto buffer = [&](uint32_t id) -> const fb::BufferT* {
    auto it = buffers_.find(id);
    return it == buffers_.end() ? nullptr : it->second.buffer;
  };
  for (const auto& [id, a] : uses) {
    const fb::BufferT* b = buffer(id);
    if (b == nullptr || b->bytes == 0) continue;
    int64_t start = a.first, end = a.last;
    const char h = host.count(id) ? host.at(id) : 0;
    if (h & 1) start = -1;
    if (h & 2) end = kForever;
    // A value the body reads before it writes it, or that lives on outside
    // the body, is live through every iteration.
    if (a.repeat >= 0 && (a.outside_body || a.body_reads_first || (h & 1))) {
      const fb::SuperstepRepeatT& rep = *program_->repeats[a.repeat];
      start = std::min(start, int64_t{rep.first} * per_step);
      end = std::max(end, int64_t{rep.first + rep.count} * per_step - 1);
    }
    per_tile[b->tile].push_back({start, end, b->offset, b->bytes, id});
  }
  auto slot_text = [&](int64_t slot) {
    if (slot < 0) return std::string("the program start");
    if (slot >= kForever) return std::string("the program end");
    return "superstep " + std::to_string(slot / per_step);
  };
  for (int tile = 0; tile < tiles_; ++tile) {
    std::vector<Live>& live = per_tile[tile];
    std::sort(live.begin(), live.end(), [](const Live& x, const Live& y) {
      return std::tie(x.start, x.offset, x.id) < std::tie(y.start, y.offset, y.id);
    });
    // The buffers live at the current start, by address: never overlapping.
    std::map<int64_t, const Live*> by_address;
    using Ending = std::pair<int64_t, const Live*>;
    std::priority_queue<Ending, std::vector<Ending>, std::greater<Ending>>
        ending;
    for (const Live& b : live) {
      while (!ending.empty() && ending.top().first < b.start) {
        by_address.erase(ending.top().second->offset);
        ending.pop();
      }
      const Live* clash = nullptr;
      auto next = by_address.lower_bound(b.offset);
      if (next != by_address.end() && next->first < b.offset + b.bytes) {
        clash = next->second;
      } else if (next != by_address.begin() &&
                 std::prev(next)->second->offset + std::prev(next)->second->bytes >
                     b.offset) {
        clash = std::prev(next)->second;
      }
      if (clash != nullptr) {
        auto describe = [&](const Live& x) {
          const fb::BufferT& buf = *buffer(x.id);
          return BufferText(x.id) + " \"" + buf.name + "\"" +
                 (buf.op >= 0 ? " (op " + std::to_string(buf.op) + ")"
                              : std::string()) +
                 ", live from " + slot_text(x.start) + " to " +
                 slot_text(x.end);
        };
        const int64_t lo = std::max(b.offset, clash->offset);
        const int64_t hi =
            std::min(b.offset + b.bytes, clash->offset + clash->bytes);
        return Status::BadInput(
            "tile " + std::to_string(tile) + ": " + describe(*clash) + ", and " +
            describe(b) + ", share bytes [" + std::to_string(lo) + ", " +
            std::to_string(hi) +
            "): memory reused while its value is still to be read");
      }
      by_address[b.offset] = &b;
      ending.push({b.end, &b});
    }
  }
  return Status::Ok();
}

}  // namespace tilec::sim::engine
