// The simulator engine's execution on data: tile memory and the host's
// inputs, the compute and exchange phases, and the outputs read back.

#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <deque>
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
  // Host data first, so that a missing tensor is reported before any work.
  std::vector<const float*> data(input_plans_.size());
  std::deque<std::vector<float>> patched;  // stable addresses
  for (size_t i = 0; i < input_plans_.size(); ++i) {
    const BindingPlan& b = input_plans_[i];
    auto it = inputs.find(b.value->id);
    const std::string where = "input value %" + std::to_string(b.value->id) +
                              " \"" + b.value->name + "\"";
    if (it == inputs.end()) {
      return Status::BadInput(where + ": no host data");
    }
    if (static_cast<int64_t>(it->second.size()) != b.value_elements) {
      return Status::BadInput(where + ": host data has " +
                              std::to_string(it->second.size()) +
                              " elements, the value " +
                              std::to_string(b.value_elements));
    }
    data[i] = it->second.data();
    if (b.patch > 0) {
      // The host's layout transform: it writes the image's patches.
      patched.push_back(
          kernels::Patchify(it->second, b.value->shape, b.patch));
      data[i] = patched.back().data();
    }
  }
  // Replicas write the same box many times (a weight on every tile of a
  // group): each distinct (box, dtype, scale) is encoded once.
  using BoxKey = std::tuple<size_t, std::vector<int64_t>, std::vector<int64_t>,
                            DType, int>;
  std::map<BoxKey, size_t> box_index;
  std::vector<std::pair<size_t, size_t>> box_source;  // (binding, fragment)
  std::vector<std::vector<size_t>> fragment_box(input_plans_.size());
  // Each tile's (binding, fragment) pairs, so that tiles fill in parallel.
  std::vector<std::vector<std::pair<size_t, size_t>>> by_tile(tiles_);
  for (size_t i = 0; i < input_plans_.size(); ++i) {
    for (size_t f = 0; f < input_plans_[i].fragments.size(); ++f) {
      const FragmentPlan& fp = input_plans_[i].fragments[f];
      BoxKey key{i, fp.begin, fp.end, fp.dtype, fp.scale_exp};
      auto [it, added] = box_index.emplace(key, box_source.size());
      if (added) box_source.push_back({i, f});
      fragment_box[i].push_back(it->second);
      by_tile[fp.tile].push_back({i, f});
    }
  }
  std::vector<std::vector<uint8_t>> boxes(box_source.size());
  ParallelFor(boxes.size(), options_.threads, [&](size_t u) {
    // Not a structured binding: clang 14 (the fuzz build) cannot capture
    // one in the lambda below.
    const size_t i = box_source[u].first, fi = box_source[u].second;
    const BindingPlan& b = input_plans_[i];
    const FragmentPlan& f = b.fragments[fi];
    const int eb = kernels::DTypeBytes(f.dtype);
    int64_t elements = 1;
    for (size_t d = 0; d < f.begin.size(); ++d) elements *= f.end[d] - f.begin[d];
    boxes[u].resize(static_cast<size_t>(elements * eb));
    ForEachRow(b.shape, f.begin, f.end,
               [&](int64_t flat, int64_t n, int64_t r) {
                 kernels::StoreArrayAs(
                     f.dtype, std::span<const float>(data[i] + flat, n),
                     f.scale_exp,
                     std::span<uint8_t>(boxes[u].data() + r * n * eb,
                                        static_cast<size_t>(n * eb)));
               });
  });
  // Every box is encoded: the host's F32 data is no longer read.
  inputs.clear();
  patched.clear();
  memory_.resize(tiles_);
  ParallelFor(static_cast<size_t>(tiles_), options_.threads, [&](size_t t) {
    // 0xFF is NaN in F32, F16, BF16 and both FP8s: unwritten reads show.
    memory_[t].assign(static_cast<size_t>(tile_extent_[t]), 0xFF);
    for (const auto& [i, fi] : by_tile[t]) {
      const std::vector<uint8_t>& box = boxes[fragment_box[i][fi]];
      if (!box.empty()) {
        std::memcpy(memory_[t].data() + input_plans_[i].fragments[fi].addr,
                    box.data(), box.size());
      }
    }
  });
  return Status::Ok();
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
