// The simulator engine's execution on data: tile memory and the host's
// inputs, the compute and exchange phases, and the outputs read back.

#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "formats/print.h"
#include "kernels/kernels.h"
#include "kernels/registry.h"
#include "sim/engine.h"
#include "sim/patchify.h"

namespace tilec::sim::engine {

Status Engine::AllocateAndWriteInputs(HostTensors inputs) {
  memory_.resize(tiles_);
  ParallelFor(static_cast<size_t>(tiles_), options_.threads, [&](size_t t) {
    // 0xFF is NaN in F32, F16, BF16 and both FP8s: unwritten reads show.
    memory_[t].assign(static_cast<size_t>(tile_extent_[t]), 0xFF);
  });
  // Bindings go one at a time, each one's host data taken (or made by
  // SimOptions::host_data only then), encoded, written and freed, so that
  // a whole model's F32 weights never live at once beside the tiles'
  // memory.
  for (const BindingPlan& b : input_plans_) {
    std::vector<float> data;
    TILEC_RETURN_IF_ERROR(TakeHostData(b, &inputs, &data));
    std::vector<std::vector<uint8_t>> boxes;
    std::vector<size_t> fragment_box;
    EncodeBinding(b, data, &boxes, &fragment_box);
    data = std::vector<float>();
    // Tiles in parallel, each tile's fragments in order.
    std::map<int, std::vector<size_t>> by_tile;
    for (size_t f = 0; f < b.fragments.size(); ++f) {
      by_tile[b.fragments[f].tile].push_back(f);
    }
    const std::vector<std::pair<int, std::vector<size_t>>> tiles(
        by_tile.begin(), by_tile.end());
    ParallelFor(tiles.size(), options_.threads, [&](size_t k) {
      const int tile = tiles[k].first;
      for (size_t f : tiles[k].second) {
        const std::vector<uint8_t>& box = boxes[fragment_box[f]];
        if (box.empty()) continue;
        std::memcpy(memory_[tile].data() + b.fragments[f].addr, box.data(),
                    box.size());
      }
    });
  }
  return Status::Ok();
}

Status Engine::TakeHostData(const BindingPlan& b, HostTensors* inputs,
                            std::vector<float>* data) const {
  const std::string where = "input value %" + std::to_string(b.value->id) +
                            " \"" + b.value->name + "\"";
  if (auto it = inputs->find(b.value->id); it != inputs->end()) {
    *data = std::move(it->second);
    inputs->erase(it);
  } else if (options_.host_data) {
    TILEC_RETURN_IF_ERROR(options_.host_data(*b.value, data));
  } else {
    return Status::BadInput(where + ": no host data");
  }
  if (static_cast<int64_t>(data->size()) != b.value_elements) {
    return Status::BadInput(where + ": host data has " +
                            std::to_string(data->size()) +
                            " elements, the value " +
                            std::to_string(b.value_elements));
  }
  // The host's layout transform: it writes the image's patches.
  if (b.patch > 0) *data = kernels::Patchify(*data, b.value->shape, b.patch);
  return Status::Ok();
}

void Engine::EncodeBinding(const BindingPlan& b, const std::vector<float>& data,
                           std::vector<std::vector<uint8_t>>* boxes,
                           std::vector<size_t>* fragment_box) const {
  using BoxKey = std::tuple<std::vector<int64_t>, std::vector<int64_t>, DType,
                            int>;
  std::map<BoxKey, size_t> box_index;
  std::vector<size_t> sources;  // the fragment each new box is encoded from
  for (size_t f = 0; f < b.fragments.size(); ++f) {
    const FragmentPlan& fp = b.fragments[f];
    BoxKey key{fp.begin, fp.end, fp.dtype, fp.scale_exp};
    auto [it, added] = box_index.emplace(key, boxes->size() + sources.size());
    if (added) sources.push_back(f);
    fragment_box->push_back(it->second);
  }
  const size_t first = boxes->size();
  boxes->resize(first + sources.size());
  ParallelFor(sources.size(), options_.threads, [&](size_t u) {
    const FragmentPlan& f = b.fragments[sources[u]];
    const int eb = kernels::DTypeBytes(f.dtype);
    int64_t elements = 1;
    for (size_t d = 0; d < f.begin.size(); ++d) elements *= f.end[d] - f.begin[d];
    std::vector<uint8_t>& box = (*boxes)[first + u];
    box.resize(static_cast<size_t>(elements * eb));
    ForEachRow(b.shape, f.begin, f.end,
               [&](int64_t flat, int64_t n, int64_t r) {
                 kernels::StoreArrayAs(
                     f.dtype, std::span<const float>(data.data() + flat, n),
                     f.scale_exp,
                     std::span<uint8_t>(box.data() + r * n * eb,
                                        static_cast<size_t>(n * eb)));
               });
  });
}

Status Engine::RunComputePhase(int s) {
  const StepPlan& step = steps_[s];
  const size_t n = step.tiles.size();
  if (n == 0) return Status::Ok();
  // Each tile touches only its own memory, so tiles run in any order on any
  // thread; the first failure in program order is reported.
  std::vector<int> failed_index(n, INT_MAX);
  std::vector<std::string> failed_message(n);
  ParallelFor(n, options_.threads, [&](size_t i) {
    std::vector<Operand> operands;
    const int tile = step.tiles[i];
    uint8_t* mem = memory_[tile].data();
    for (const ComputePlan& cp : step.computes[i]) {
      operands.clear();
      for (const ArgPlan& a : cp.args) {
        operands.push_back(Operand{mem + a.addr, static_cast<size_t>(a.bytes),
                                   a.dtype, a.scale_exp});
      }
      const fb::ComputeT& c = *cp.compute;
      kernels::Status st = kernels::Run(c.kernel, operands, c.params, c.fparams);
      if (!st.ok()) {
        std::string args;
        for (const ArgPlan& a : cp.args) {
          args += (args.empty() ? "" : ", ") + BufferText(a.buffer);
        }
        failed_index[i] = cp.index;
        failed_message[i] = StepWhere(s, tile, c.op) + " compute " +
                            std::to_string(cp.index) + " (" + c.kernel +
                            ") on " + args + ": " + st.message();
        return;
      }
    }
  });
  size_t first = n;
  for (size_t i = 0; i < n; ++i) {
    if (failed_index[i] != INT_MAX &&
        (first == n || failed_index[i] < failed_index[first])) {
      first = i;
    }
  }
  if (first != n) return Status::BadInput(failed_message[first]);
  return Status::Ok();
}

void Engine::RunExchangePhase(int s) {
  const StepPlan& step = steps_[s];
  if (step.transfers.empty()) return;
  // Gather every source piece first, then scatter: all sources are read as
  // of the end of the compute phase, so transfer order never matters.
  size_t total = 0;
  for (const TransferPlan& t : step.transfers) total += t.rows * t.bytes;
  std::vector<uint8_t> staging(total);
  size_t at = 0;
  for (const TransferPlan& t : step.transfers) {
    const uint8_t* src = memory_[t.transfer->src_tile].data() + t.src_addr;
    for (int64_t i = 0; i < t.rows; ++i) {
      std::memcpy(staging.data() + at, src + i * t.src_pitch, t.bytes);
      at += t.bytes;
    }
  }
  at = 0;
  for (const TransferPlan& t : step.transfers) {
    for (const TransferPlan::Destination& d : t.destinations) {
      uint8_t* dst = memory_[d.tile].data() + d.addr;
      for (int64_t i = 0; i < t.rows; ++i) {
        std::memcpy(dst + i * t.dst_pitch, staging.data() + at + i * t.bytes,
                    t.bytes);
      }
    }
    at += t.rows * t.bytes;
  }
}

Status Engine::ReadOutputs(SimResult* result) {
  for (const BindingPlan& b : output_plans_) {
    const std::string where = "output value %" + std::to_string(b.value->id) +
                              " \"" + b.value->name + "\"";
    std::vector<float>& out = result->outputs[b.value->id];
    out.assign(static_cast<size_t>(b.elements), 0.0f);
    std::vector<uint8_t> covered(static_cast<size_t>(b.elements), 0);
    std::vector<float> row;
    for (size_t fi = 0; fi < b.fragments.size(); ++fi) {
      const FragmentPlan& f = b.fragments[fi];
      const int eb = kernels::DTypeBytes(f.dtype);
      const uint8_t* base = memory_[f.tile].data() + f.addr;
      Status status;
      ForEachRow(b.shape, f.begin, f.end,
                 [&](int64_t flat, int64_t n, int64_t r) {
                   if (!status.ok()) return;
                   row.resize(static_cast<size_t>(n));
                   kernels::LoadArrayAs(
                       f.dtype,
                       std::span<const uint8_t>(base + r * n * eb,
                                                static_cast<size_t>(n * eb)),
                       f.scale_exp, row);
                   for (int64_t j = 0; j < n; ++j) {
                     const size_t e = static_cast<size_t>(flat + j);
                     if (covered[e]) {
                       const float a = out[e], v = row[j];
                       const bool same =
                           a == v || (std::isnan(a) && std::isnan(v));
                       if (!same) {
                         status = Status::BadInput(
                             where + " fragment " + std::to_string(fi) +
                             " tile " + std::to_string(f.tile) + " " +
                             BufferText(f.buffer) + ": element " +
                             IndexText(Unflatten(flat + j, b.shape)) + " is " +
                             ir::NumberText(v) +
                             " but an earlier fragment read " +
                             ir::NumberText(a));
                         return;
                       }
                     }
                     out[e] = row[j];
                     covered[e] = 1;
                   }
                 });
      TILEC_RETURN_IF_ERROR(status);
    }
  }
  return Status::Ok();
}

}  // namespace tilec::sim::engine
