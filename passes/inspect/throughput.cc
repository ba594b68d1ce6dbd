#include "passes/inspect/throughput.h"

#include <map>
#include <string>
#include <vector>

#include "formats/repeat.h"

namespace tilec::inspect {
namespace {

std::string OpText(const fb::OperationT& op) {
  return "op " + std::to_string(op.id) + " (" + op.name + ")";
}

// M*K*N of a MatMul a [M,K] x b [K,N]; B*H*Tq*Tk*head_dim of attention's
// scores [B,H,Tq,Tk] or of its context from the probabilities
// [B,H,Tq,Tk]; 0 for an op that is no GEMM.
Status OpMacs(const fb::OperationT& op,
              const std::map<uint32_t, const fb::ValueT*>& values,
              int64_t* macs) {
  auto find = [&](const std::vector<uint32_t>& ids,
                  size_t i) -> const fb::ValueT* {
    if (i >= ids.size()) return nullptr;
    auto it = values.find(ids[i]);
    return it == values.end() ? nullptr : it->second;
  };
  *macs = 0;
  std::vector<int64_t> factors;
  switch (op.kind) {
    case fb::OpKind::MatMul: {
      const fb::ValueT* a = find(op.operands, 0);
      const fb::ValueT* b = find(op.operands, 1);
      if (!a || !b || a->shape.size() != 2 || b->shape.size() != 2) {
        return Status::BadInput(OpText(op) + " has no [M,K] x [K,N] operands");
      }
      factors = {a->shape[0], a->shape[1], b->shape[1]};
      break;
    }
    case fb::OpKind::AttentionScores:
    case fb::OpKind::AttentionContext: {
      const fb::ValueT* grid = op.kind == fb::OpKind::AttentionScores
                                   ? find(op.results, 0)
                                   : find(op.operands, 0);
      if (!grid || grid->shape.size() != 4) {
        return Status::BadInput(OpText(op) + " has no [B,H,Tq,Tk] " +
                                (op.kind == fb::OpKind::AttentionScores
                                     ? "result"
                                     : "probabilities"));
      }
      factors = grid->shape;
      factors.push_back(op.head_dim);
      break;
    }
    default:
      return Status::Ok();
  }
  int64_t product = 1;
  for (int64_t f : factors) {
    if (f < 0 || __builtin_mul_overflow(product, f, &product)) {
      return Status::BadInput(OpText(op) + ": its GEMM's MACs overflow");
    }
  }
  *macs = product;
  return Status::Ok();
}

}  // namespace

StatusOr<int64_t> GraphGemmMacs(const fb::ModuleT& module) {
  std::map<uint32_t, const fb::ValueT*> values;
  for (const auto& v : module.values) values[v->id] = v.get();
  StatusOr<std::vector<ir::RepeatBody>> bodies = ir::RepeatBodies(module);
  if (!bodies.ok()) return bodies.status();
  int64_t total = 0;
  for (size_t i = 0; i < module.ops.size(); ++i) {
    int64_t macs = 0;
    TILEC_RETURN_IF_ERROR(OpMacs(*module.ops[i], values, &macs));
    for (const ir::RepeatBody& body : *bodies) {
      if (body.Contains(i) &&
          __builtin_mul_overflow(macs, int64_t{body.repeat->count}, &macs)) {
        return Status::BadInput("the repeated GEMMs' MACs overflow");
      }
    }
    if (__builtin_add_overflow(total, macs, &total)) {
      return Status::BadInput("the graph's GEMM MACs overflow");
    }
  }
  return total;
}

StatusOr<Throughput> ThroughputOf(const fb::ModuleT& module, int64_t cycles) {
  StatusOr<int64_t> macs = GraphGemmMacs(module);
  if (!macs.ok()) return macs.status();
  Throughput t;
  t.cycles = cycles;
  t.gemm_macs = *macs;
  if (module.model && module.model->batch > 0) t.batch = module.model->batch;
  const fb::TargetT& target = *module.target;
  t.fp8_peak_macs_per_cycle =
      static_cast<int64_t>(target.tiles) * target.amp_macs_fp8;
  if (cycles <= 0) return t;
  if (t.batch > 0) {
    t.cycles_per_image = static_cast<double>(cycles) / t.batch;
    t.images_per_second = target.clock_hz / t.cycles_per_image;
  }
  if (t.fp8_peak_macs_per_cycle > 0) {
    t.fp8_peak_fraction =
        static_cast<double>(t.gemm_macs) /
        (static_cast<double>(cycles) * t.fp8_peak_macs_per_cycle);
  }
  return t;
}

}  // namespace tilec::inspect
