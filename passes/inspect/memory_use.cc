#include "passes/inspect/memory_use.h"

#include <algorithm>
#include <map>
#include <tuple>

namespace tilec::inspect {
namespace {

// Buffer id -> index into MemoryUse::buffers.
using BufferIndex = std::map<uint32_t, size_t>;

void DeclareBuffers(const fb::DeviceProgramT& program, MemoryUse* use,
                    BufferIndex* index) {
  for (const auto& b : program.buffers) {
    BufferLife life;
    life.id = b->id;
    life.tile = static_cast<int>(b->tile);
    life.offset = b->offset;
    life.bytes = b->bytes;
    life.value = b->value;
    life.op = b->op;
    life.name = b->name;
    life.first = use->supersteps;  // nothing seen yet: first > last
    life.last = -1;
    (*index)[b->id] = use->buffers.size();
    use->buffers.push_back(std::move(life));
  }
}

// First and last superstep that names each buffer.
Status TouchBuffers(const fb::DeviceProgramT& program, const BufferIndex& index,
                    MemoryUse* use) {
  for (int s = 0; s < use->supersteps; ++s) {
    auto touch = [&](uint32_t id) -> Status {
      auto it = index.find(id);
      if (it == index.end()) {
        return Status::BadInput("superstep " + std::to_string(s) +
                                " names buffer #" + std::to_string(id) +
                                ", which the program does not declare");
      }
      BufferLife& b = use->buffers[it->second];
      b.first = std::min(b.first, s);
      b.last = std::max(b.last, s);
      return Status::Ok();
    };
    const fb::SuperstepT& step = *program.supersteps[s];
    for (const auto& c : step.compute) {
      for (const auto& a : c->args) TILEC_RETURN_IF_ERROR(touch(a->buffer));
    }
    for (const auto& t : step.exchange) {
      TILEC_RETURN_IF_ERROR(touch(t->src_buffer));
      for (const auto& d : t->destinations) {
        TILEC_RETURN_IF_ERROR(touch(d->buffer));
      }
    }
  }
  return Status::Ok();
}

// Host bindings extend lifetimes to the program's ends.
Status ApplyBindings(const fb::ModuleT& module, const BufferIndex& index,
                     MemoryUse* use) {
  std::map<uint32_t, fb::ValueRole> roles;
  for (const auto& v : module.values) roles[v->id] = v->role;
  auto mark = [&](const char* what, const fb::HostBindingT& binding,
                  bool input) -> Status {
    const bool weight = input && roles.count(binding.value) &&
                        roles[binding.value] == fb::ValueRole::Weight;
    for (const auto& f : binding.fragments) {
      auto it = index.find(f->buffer);
      if (it == index.end()) {
        return Status::BadInput(std::string(what) + " binding of value %" +
                                std::to_string(binding.value) +
                                " names buffer #" + std::to_string(f->buffer) +
                                ", which the program does not declare");
      }
      BufferLife& b = use->buffers[it->second];
      (input ? b.host_written : b.host_read) = true;
      b.weight = b.weight || weight;
    }
    return Status::Ok();
  };
  const fb::DeviceProgramT& program = *module.program;
  for (const auto& b : program.inputs) {
    TILEC_RETURN_IF_ERROR(mark("input", *b, true));
  }
  for (const auto& b : program.outputs) {
    TILEC_RETURN_IF_ERROR(mark("output", *b, false));
  }
  const int end = use->supersteps - 1;
  for (BufferLife& b : use->buffers) {
    if (end < 0) break;
    const bool named = b.first <= b.last;
    if (b.host_written || b.weight) b.first = 0;
    if (b.weight || b.host_read) b.last = end;
    if (!named && b.host_written && !b.weight && !b.host_read) b.last = 0;
    if (!named && b.host_read && !b.host_written) b.first = end;
  }
  return Status::Ok();
}

// Union bytes of a group of buffers whose address ranges chain into one
// overlapping run, added to `live` for every superstep: elementary address
// segments between the members' boundaries carry a count of live members,
// and the covered bytes change only where a member starts or ends.
void AddOverlappingGroup(const std::vector<const BufferLife*>& group,
                         std::vector<int64_t>* live) {
  std::vector<int64_t> cuts;
  for (const BufferLife* b : group) {
    cuts.push_back(b->offset);
    cuts.push_back(b->offset + b->bytes);
  }
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  auto segment = [&](int64_t addr) {
    return static_cast<size_t>(
        std::lower_bound(cuts.begin(), cuts.end(), addr) - cuts.begin());
  };
  // (superstep, +1 start / -1 end after it, member)
  std::vector<std::tuple<int, int, size_t>> events;
  for (size_t i = 0; i < group.size(); ++i) {
    events.emplace_back(group[i]->first, 1, i);
    events.emplace_back(group[i]->last + 1, -1, i);
  }
  std::sort(events.begin(), events.end());
  std::vector<int> count(cuts.size(), 0);
  int64_t covered = 0;
  const int steps = static_cast<int>(live->size());
  size_t e = 0;
  while (e < events.size()) {
    const int step = std::get<0>(events[e]);
    for (; e < events.size() && std::get<0>(events[e]) == step; ++e) {
      const BufferLife& b = *group[std::get<2>(events[e])];
      const int delta = std::get<1>(events[e]);
      for (size_t k = segment(b.offset); k < segment(b.offset + b.bytes); ++k) {
        const int64_t bytes = cuts[k + 1] - cuts[k];
        if (delta > 0 && count[k]++ == 0) covered += bytes;
        if (delta < 0 && --count[k] == 0) covered -= bytes;
      }
    }
    const int until = e < events.size() ? std::get<0>(events[e]) : steps;
    for (int s = std::max(step, 0); s < std::min(until, steps); ++s) {
      (*live)[s] += covered;
    }
  }
}

// One tile's live bytes per superstep: buffers sorted by address form
// groups of chained overlaps; a buffer that overlaps nothing adds its bytes
// over its lifetime directly.
std::vector<int64_t> TileLiveBytes(std::vector<const BufferLife*> buffers,
                                   int supersteps) {
  std::vector<int64_t> live(supersteps, 0);
  std::sort(buffers.begin(), buffers.end(),
            [](const BufferLife* a, const BufferLife* b) {
              return a->offset != b->offset ? a->offset < b->offset
                                            : a->id < b->id;
            });
  size_t i = 0;
  while (i < buffers.size()) {
    int64_t end = buffers[i]->offset + buffers[i]->bytes;
    size_t j = i + 1;
    while (j < buffers.size() && buffers[j]->offset < end) {
      end = std::max(end, buffers[j]->offset + buffers[j]->bytes);
      ++j;
    }
    if (j == i + 1) {
      for (int s = buffers[i]->first; s <= buffers[i]->last; ++s) {
        live[s] += buffers[i]->bytes;
      }
    } else {
      AddOverlappingGroup({buffers.begin() + i, buffers.begin() + j}, &live);
    }
    i = j;
  }
  return live;
}

}  // namespace

StatusOr<MemoryUse> MemoryOverTime(const fb::ModuleT& module) {
  StatusOr<VerifiedProgram> program = VerifiedProgram::Verify(module);
  if (!program.ok()) return program.status();
  return MemoryOverTime(*program);
}

StatusOr<MemoryUse> MemoryOverTime(const VerifiedProgram& program) {
  const fb::ModuleT& module = program.module();
  const int tiles = module.target->tiles;
  MemoryUse use;
  use.supersteps = static_cast<int>(module.program->supersteps.size());
  BufferIndex index;
  DeclareBuffers(*module.program, &use, &index);
  TILEC_RETURN_IF_ERROR(TouchBuffers(*module.program, index, &use));
  TILEC_RETURN_IF_ERROR(ApplyBindings(module, index, &use));

  std::vector<std::vector<const BufferLife*>> by_tile(tiles);
  use.highest_end.assign(tiles, 0);
  for (const BufferLife& b : use.buffers) {
    use.highest_end[b.tile] =
        std::max(use.highest_end[b.tile], b.offset + b.bytes);
    if (b.live() && b.bytes > 0) {
      by_tile[b.tile].push_back(&b);
    } else if (!b.live()) {
      ++use.never_live;
    }
  }
  use.live.resize(tiles);
  use.peak_live.assign(tiles, 0);
  use.peak_step.assign(tiles, -1);
  for (int t = 0; t < tiles; ++t) {
    use.live[t] = TileLiveBytes(by_tile[t], use.supersteps);
    for (int s = 0; s < use.supersteps; ++s) {
      if (use.live[t][s] > use.peak_live[t]) {
        use.peak_live[t] = use.live[t][s];
        use.peak_step[t] = s;
      }
    }
  }
  return use;
}

}  // namespace tilec::inspect
