#include "sim/simulator.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "formats/ir.h"
#include "kernels/exchange_schedule.h"
#include "kernels/numerics.h"

namespace tilec::sim {
namespace {

using ::testing::HasSubstr;

// The runtime's code takes tiny's standard element 0; the hand-made programs
// here need far less than the rest of it.
constexpr uint32_t kTensorBase = 16384;

// Builds device programs on the `tiny` target: 16 tiles, tensor memory
// [16384, 81920): standard elements [16384, 32768) and [32768, 49152),
// interleaved from 49152 (one effective element of 32 KiB, index 3).
// Buffer offsets are given relative to kTensorBase.
class Builder {
 public:
  Builder() {
    module.target = std::make_unique<fb::TargetT>();
    Status s = ir::LoadTarget("tiny", module.target.get());
    EXPECT_TRUE(s.ok()) << s.message();
    module.program = std::make_unique<fb::DeviceProgramT>();
  }

  uint32_t Value(const std::string& name, std::vector<int64_t> shape,
                 fb::DType dtype, fb::ValueRole role) {
    auto v = std::make_unique<fb::ValueT>();
    v->id = static_cast<uint32_t>(module.values.size());
    v->name = name;
    v->shape = std::move(shape);
    v->dtype = dtype;
    v->role = role;
    module.values.push_back(std::move(v));
    return module.values.back()->id;
  }

  void Op(uint32_t id, fb::OpKind kind, const std::string& name) {
    auto op = std::make_unique<fb::OperationT>();
    op->id = id;
    op->kind = kind;
    op->name = name;
    module.ops.push_back(std::move(op));
  }

  uint32_t Buffer(uint32_t tile, uint32_t offset, uint32_t bytes,
                  fb::DType dtype, const std::string& name = "") {
    auto b = std::make_unique<fb::BufferT>();
    b->id = next_buffer_++;
    b->tile = tile;
    b->offset = kTensorBase + offset;
    b->bytes = bytes;
    b->dtype = dtype;
    b->name = name;
    module.program->buffers.push_back(std::move(b));
    return module.program->buffers.back()->id;
  }
  fb::BufferT& BufferRef(uint32_t id) {
    for (auto& b : module.program->buffers) {
      if (b->id == id) return *b;
    }
    ADD_FAILURE() << "no buffer " << id;
    return *module.program->buffers[0];
  }

  fb::SuperstepT& Step(const std::string& label) {
    auto s = std::make_unique<fb::SuperstepT>();
    s->label = label;
    module.program->supersteps.push_back(std::move(s));
    return *module.program->supersteps.back();
  }

  struct Slice {
    uint32_t buffer, offset, bytes;
  };
  static fb::ComputeT& Compute(fb::SuperstepT& step, uint32_t tile,
                               const std::string& kernel,
                               std::vector<Slice> args,
                               std::vector<int64_t> params, uint32_t op,
                               std::vector<float> fparams = {}) {
    auto c = std::make_unique<fb::ComputeT>();
    c->tile = tile;
    c->kernel = kernel;
    for (const Slice& s : args) {
      auto a = std::make_unique<fb::BufferSliceT>();
      a->buffer = s.buffer;
      a->offset = s.offset;
      a->bytes = s.bytes;
      c->args.push_back(std::move(a));
    }
    c->params = std::move(params);
    c->fparams = std::move(fparams);
    c->op = op;
    step.compute.push_back(std::move(c));
    return *step.compute.back();
  }

  struct Dest {
    uint32_t tile, buffer, offset;
  };
  static fb::TransferT& Transfer(fb::SuperstepT& step, uint32_t src_tile,
                                 uint32_t src_buffer, uint32_t src_offset,
                                 uint32_t bytes, fb::DType dtype,
                                 std::vector<Dest> dests, uint32_t op) {
    auto t = std::make_unique<fb::TransferT>();
    t->src_tile = src_tile;
    t->src_buffer = src_buffer;
    t->src_offset = src_offset;
    t->bytes = bytes;
    t->dtype = dtype;
    for (const Dest& d : dests) {
      auto dd = std::make_unique<fb::DestinationT>();
      dd->tile = d.tile;
      dd->buffer = d.buffer;
      dd->offset = d.offset;
      t->destinations.push_back(std::move(dd));
    }
    t->op = op;
    step.exchange.push_back(std::move(t));
    return *step.exchange.back();
  }

  struct Frag {
    uint32_t tile, buffer, offset;
    std::vector<int64_t> begin, end;
  };
  void Bind(bool output, uint32_t value, std::vector<Frag> frags) {
    auto hb = std::make_unique<fb::HostBindingT>();
    hb->value = value;
    for (Frag& f : frags) {
      auto fr = std::make_unique<fb::FragmentT>();
      fr->tile = f.tile;
      fr->buffer = f.buffer;
      fr->offset = f.offset;
      fr->begin = f.begin;
      fr->end = f.end;
      hb->fragments.push_back(std::move(fr));
    }
    (output ? module.program->outputs : module.program->inputs)
        .push_back(std::move(hb));
  }

  fb::ModuleT module;

 private:
  uint32_t next_buffer_ = 0;
};

// The hand-made program with its exchanges scheduled and its code sized,
// as emit-device would, unless the test wrote them itself.
fb::ModuleT Completed(const fb::ModuleT& module) {
  fb::ModuleT completed(module);
  if (completed.program->code.empty()) {
    Status s =
        kernels::CompleteProgram(*completed.target, completed.program.get());
    EXPECT_TRUE(s.ok()) << s.message();
  }
  return completed;
}

Status RunSim(const fb::ModuleT& module, const HostTensors& inputs,
              SimResult* result, SimOptions options = {}) {
  return Simulate(Completed(module), inputs, options, result);
}

// ---------------------------------------------------------------- GEMM

constexpr int64_t kM = 8, kK = 64, kN = 32;
constexpr uint32_t kMatMulOp = 7;

// C[8,32] = A[8,64] x B[64,32] in F16 on 4 tiles: 2 K partitions x 2 N
// partitions. Tile 2k+n holds A[:, 32k:32k+32] and B[32k:32k+32,
// 16n:16n+16] and computes an F32 partial; the k=1 tiles send their
// partials to the k=0 tiles, which reduce them into F16 C blocks.
struct GemmProgram {
  Builder b;
  uint32_t a, bw, c;                 // values
  uint32_t partial[4], remote[2], out[2], a_buf[4], b_buf[4];
  HostTensors inputs;
  std::vector<float> expected;

  GemmProgram() {
    a = b.Value("x", {kM, kK}, fb::DType::F16, fb::ValueRole::Input);
    bw = b.Value("w", {kK, kN}, fb::DType::F16, fb::ValueRole::Weight);
    c = b.Value("y", {kM, kN}, fb::DType::F16, fb::ValueRole::Output);
    b.Op(kMatMulOp, fb::OpKind::MatMul, "mm");
    for (uint32_t t = 0; t < 4; ++t) {
      a_buf[t] = b.Buffer(t, 0, kM * 32 * 2, fb::DType::F16, "a");
      b_buf[t] = b.Buffer(t, 512, 32 * 16 * 2, fb::DType::F16, "b");
      partial[t] = b.Buffer(t, 32768, kM * 16 * 4, fb::DType::F32, "partial");
    }
    for (uint32_t n = 0; n < 2; ++n) {
      remote[n] = b.Buffer(n, 1536, kM * 16 * 4, fb::DType::F32, "remote");
      out[n] = b.Buffer(n, 2048, kM * 16 * 2, fb::DType::F16, "c");
    }
    fb::SuperstepT& s0 = b.Step("gemm");
    for (uint32_t t = 0; t < 4; ++t) {
      Builder::Compute(s0, t, "gemm",
                       {{a_buf[t], 0, 512}, {b_buf[t], 0, 1024},
                        {partial[t], 0, 512}},
                       {kM, 32, 16, 0}, kMatMulOp);
    }
    for (uint32_t n = 0; n < 2; ++n) {
      Builder::Transfer(s0, 2 + n, partial[2 + n], 0, 512, fb::DType::F32,
                        {{n, remote[n], 0}}, kMatMulOp);
    }
    fb::SuperstepT& s1 = b.Step("reduce");
    for (uint32_t n = 0; n < 2; ++n) {
      Builder::Compute(s1, n, "reduce_partials",
                       {{partial[n], 0, 512}, {remote[n], 0, 512},
                        {out[n], 0, 256}},
                       {kM * 16}, kMatMulOp);
    }
    for (uint32_t t = 0; t < 4; ++t) {
      const int64_t k = t / 2, n = t % 2;
      b.Bind(false, a, {{t, a_buf[t], 0, {0, 32 * k}, {kM, 32 * k + 32}}});
      b.Bind(false, bw,
             {{t, b_buf[t], 0, {32 * k, 16 * n}, {32 * k + 32, 16 * n + 16}}});
    }
    // One binding per value: merge the per-tile fragments.
    MergeBindings(&b.module.program->inputs);
    b.Bind(true, c,
           {{0, out[0], 0, {0, 0}, {kM, 16}},
            {1, out[1], 0, {0, 16}, {kM, kN}}});

    // Small integers: every product and sum is exact in F32 and F16, so the
    // simulated C must equal the direct product exactly.
    std::vector<float> av(kM * kK), bv(kK * kN);
    for (size_t i = 0; i < av.size(); ++i) av[i] = float(int(i * 7 % 5) - 2);
    for (size_t i = 0; i < bv.size(); ++i) bv[i] = float(int(i * 3 % 7) - 3);
    inputs[a] = av;
    inputs[bw] = bv;
    expected.assign(kM * kN, 0);
    for (int64_t i = 0; i < kM; ++i) {
      for (int64_t j = 0; j < kN; ++j) {
        double sum = 0;
        for (int64_t k = 0; k < kK; ++k) sum += av[i * kK + k] * bv[k * kN + j];
        expected[i * kN + j] = static_cast<float>(sum);
      }
    }
  }

  static void MergeBindings(std::vector<std::unique_ptr<fb::HostBindingT>>* v) {
    std::vector<std::unique_ptr<fb::HostBindingT>> merged;
    for (auto& hb : *v) {
      fb::HostBindingT* into = nullptr;
      for (auto& m : merged) {
        if (m->value == hb->value) into = m.get();
      }
      if (into == nullptr) {
        merged.push_back(std::move(hb));
      } else {
        for (auto& f : hb->fragments) into->fragments.push_back(std::move(f));
      }
    }
    *v = std::move(merged);
  }

  fb::ComputeT& Compute(int step, int index) {
    return *b.module.program->supersteps[step]->compute[index];
  }
};

// docs/machine.md by hand, on tiny (every formula as ipu21):
//   gemm_f16 M8 K32 N16: 294 + ceil(32/16)*ceil(16/16)*(4*8+160) = 678
//   exchange: one 512 B partial (128 words) per receiving tile, both on
//     row 0: the Sends issue in cycles [0, 2), the payloads arrive in
//     [2 + 52, 2 + 52 + 128) = [54, 182), and sync adds 277: 459. The
//     endpoint bound is max(512/4, 512/4, 2*1) = 128.
//   reduce_partials n=128 P=2: 282 + 6*ceil(128/48)*(11+2*1) = 516
constexpr int64_t kGemmCycles = 678;
constexpr int64_t kScheduledCycles = 182;
constexpr int64_t kExchangeCycles = kScheduledCycles + 277;
constexpr int64_t kReduceCycles = 516;

TEST(SimulatorTest, SplitGemmMatchesDirectProductAndHandCycles) {
  GemmProgram p;
  SimResult r;
  Status s = RunSim(p.b.module, p.inputs, &r);
  ASSERT_TRUE(s.ok()) << s.message();
  ASSERT_EQ(r.outputs.count(p.c), 1u);
  EXPECT_EQ(r.outputs[p.c], p.expected);

  ASSERT_EQ(r.supersteps.size(), 2u);
  EXPECT_EQ(r.supersteps[0].compute_cycles, kGemmCycles);
  EXPECT_EQ(r.supersteps[0].exchange_cycles, kExchangeCycles);
  EXPECT_EQ(r.supersteps[0].exchange_scheduled_cycles, kScheduledCycles);
  EXPECT_EQ(r.supersteps[0].sync_cycles, 277);
  EXPECT_EQ(r.supersteps[0].exchange_bound_cycles, 128);
  EXPECT_EQ(r.supersteps[0].slowest_tile, 0);
  EXPECT_EQ(r.supersteps[1].compute_cycles, kReduceCycles);
  EXPECT_EQ(r.supersteps[1].exchange_cycles, 0);
  EXPECT_EQ(r.total_cycles, kGemmCycles + kExchangeCycles + kReduceCycles);
  EXPECT_EQ(r.exchange_phases, 1);
  EXPECT_DOUBLE_EQ(r.seconds, 1653 / 1.5e9);
  EXPECT_EQ(r.gemm_macs, kM * kK * kN);
  EXPECT_EQ(r.bytes_sent, 1024);
  EXPECT_EQ(r.bytes_received, 1024);

  ASSERT_EQ(r.ops.size(), 1u);
  EXPECT_EQ(r.ops[0].op, kMatMulOp);
  EXPECT_EQ(r.ops[0].name, "mm");
  EXPECT_EQ(r.ops[0].kind, "mat_mul");
  EXPECT_EQ(r.ops[0].compute_cycles, kGemmCycles + kReduceCycles);
  EXPECT_EQ(r.ops[0].exchange_cycles, kExchangeCycles);
  EXPECT_EQ(r.ops[0].kernel_calls, 6);
  EXPECT_EQ(r.ops[0].transfers, 2);
  EXPECT_EQ(r.ops[0].bytes_received, 1024);

  // Busiest tiles: 0 and 1 compute both steps and receive until cycle 182.
  ASSERT_GE(r.slowest_tiles.size(), 2u);
  EXPECT_EQ(r.slowest_tiles[0].tile, 0);
  EXPECT_EQ(r.slowest_tiles[0].busy_cycles, 678 + kScheduledCycles + 516);
  EXPECT_EQ(r.slowest_tiles[1].tile, 1);
}

TEST(SimulatorTest, CyclesOnlyRunCountsTheSameWithoutData) {
  GemmProgram p;
  SimResult r;
  SimOptions options;
  options.execute = false;
  Status s = RunSim(p.b.module, {}, &r, options);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(r.total_cycles, kGemmCycles + kExchangeCycles + kReduceCycles);
  EXPECT_TRUE(r.outputs.empty());
}

TEST(SimulatorTest, DeterministicAcrossRunsAndThreadCounts) {
  GemmProgram p;
  SimResult one, two, again;
  SimOptions single;
  single.threads = 1;
  ASSERT_TRUE(RunSim(p.b.module, p.inputs, &one, single).ok());
  ASSERT_TRUE(RunSim(p.b.module, p.inputs, &two).ok());
  ASSERT_TRUE(RunSim(p.b.module, p.inputs, &again).ok());
  for (const SimResult* r : {&two, &again}) {
    EXPECT_EQ(r->outputs, one.outputs);
    EXPECT_EQ(r->total_cycles, one.total_cycles);
    ASSERT_EQ(r->ops.size(), one.ops.size());
    for (size_t i = 0; i < r->ops.size(); ++i) {
      EXPECT_EQ(r->ops[i].compute_cycles, one.ops[i].compute_cycles);
      EXPECT_EQ(r->ops[i].exchange_cycles, one.ops[i].exchange_cycles);
    }
  }
}

// Verify then Run (checks done once, as simulate-device does) gives what
// Simulate gives.
TEST(SimulatorTest, VerifiedRunMatchesSimulate) {
  GemmProgram p;
  const fb::ModuleT module = Completed(p.b.module);
  SimResult direct, verified;
  ASSERT_TRUE(Simulate(module, p.inputs, {}, &direct).ok());
  Simulator simulator(module, {});
  ASSERT_TRUE(simulator.Verify().ok());
  ASSERT_TRUE(simulator.Run(p.inputs, &verified).ok());
  EXPECT_EQ(verified.outputs, direct.outputs);
  EXPECT_EQ(verified.total_cycles, direct.total_cycles);
  EXPECT_EQ(verified.kernel_calls, direct.kernel_calls);
  EXPECT_EQ(verified.transfers, direct.transfers);
}

// FP8 buffers with a scale: the host encodes into the buffer's dtype and
// scale, the GEMM is charged the FP8 formula.
TEST(SimulatorTest, Fp8GemmWithScaledOperands) {
  Builder b;
  const uint32_t a = b.Value("a", {4, 32}, fb::DType::F16, fb::ValueRole::Input);
  const uint32_t w = b.Value("w", {32, 16}, fb::DType::F16, fb::ValueRole::Weight);
  const uint32_t c = b.Value("c", {4, 16}, fb::DType::F32, fb::ValueRole::Output);
  const uint32_t a_buf = b.Buffer(5, 0, 4 * 32, fb::DType::FP8E4M3);
  b.BufferRef(a_buf).fp8_scale_exp = 4;  // stored = x * 16
  const uint32_t w_buf = b.Buffer(5, 16384, 32 * 16, fb::DType::FP8E4M3);
  const uint32_t c_buf = b.Buffer(5, 32768, 4 * 16 * 4, fb::DType::F32);
  b.Bind(false, a, {{5, a_buf, 0, {0, 0}, {4, 32}}});
  b.Bind(false, w, {{5, w_buf, 0, {0, 0}, {32, 16}}});
  b.Bind(true, c, {{5, c_buf, 0, {0, 0}, {4, 16}}});
  Builder::Compute(b.Step("gemm"), 5, "gemm",
                   {{a_buf, 0, 128}, {w_buf, 0, 512}, {c_buf, 0, 256}},
                   {4, 32, 16, 0}, 1);
  // Multiples of 1/16 up to 7/16 (exact in E4M3 with the scale) and
  // small integers.
  std::vector<float> av(4 * 32), wv(32 * 16), expected(4 * 16, 0);
  for (size_t i = 0; i < av.size(); ++i) av[i] = float(int(i % 15) - 7) / 16;
  for (size_t i = 0; i < wv.size(); ++i) wv[i] = float(int(i % 5) - 2);
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 16; ++j) {
      for (int k = 0; k < 32; ++k) expected[i * 16 + j] += av[i * 32 + k] * wv[k * 16 + j];
    }
  }
  SimResult r;
  Status st = RunSim(b.module, {{a, av}, {w, wv}}, &r);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(r.outputs[c], expected);
  // gemm_fp8 M4 K32 N16: 294 + ceil(32/32)*ceil(16/16)*(4*4+160) = 470.
  EXPECT_EQ(r.total_cycles, 470);
  EXPECT_TRUE(ModuleHasFp8(b.module));
}

// ---------------------------------------------------------------- errors

Status RunExpectingError(const fb::ModuleT& module, const HostTensors& inputs) {
  SimResult r;
  Status s = RunSim(module, inputs, &r);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kBadInput) << s.message();
  EXPECT_EQ(s.message().find('\n'), std::string::npos);
  return s;
}

// Memory may be reused once its value has been read for the last time:
// tile 0's C block may take A's bytes (A is read in superstep 0, C written
// in superstep 1), and the product is still exact.
TEST(SimulatorTest, MemoryOfADeadBufferMayBeReused) {
  GemmProgram p;
  p.b.BufferRef(p.out[0]).offset = p.b.BufferRef(p.a_buf[0]).offset;
  SimResult r;
  Status s = RunSim(p.b.module, p.inputs, &r);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(r.outputs[p.c], p.expected);
}

// ... but not while the value is still to be read: C's block on the bytes
// of the remote partial that its reduction reads is refused before any
// data moves, naming both buffers and their lifetimes.
TEST(SimulatorErrorTest, MemoryReusedWhileLiveIsRefused) {
  GemmProgram p;
  p.b.BufferRef(p.out[0]).offset = p.b.BufferRef(p.remote[0]).offset + 128;
  Status s = RunExpectingError(p.b.module, p.inputs);
  EXPECT_EQ(s.message(),
            "tile 0: buffer #12 \"remote\", live from superstep 0 to "
            "superstep 1, and buffer #13 \"c\", live from superstep 1 to the "
            "program end, share bytes [18048, 18304): memory reused while its "
            "value is still to be read");
}

TEST(SimulatorErrorTest, SliceOutsideBuffer) {
  GemmProgram p;
  p.Compute(0, 1).args[1]->bytes = 2048;  // B block holds 1024 bytes
  Status s = RunExpectingError(p.b.module, p.inputs);
  EXPECT_EQ(s.message(),
            "superstep 0 tile 1 op 7 compute 1 (gemm): arg 1 buffer #4: slice "
            "[0, 2048) is outside the buffer's 1024 bytes");
}

TEST(SimulatorErrorTest, UnknownBuffer) {
  GemmProgram p;
  p.Compute(1, 0).args[1]->buffer = 999;
  Status s = RunExpectingError(p.b.module, p.inputs);
  EXPECT_EQ(s.message(),
            "superstep 1 tile 0 op 7 compute 0 (reduce_partials): arg 1 buffer "
            "#999 does not exist");
}

// The verifier plans supersteps on several threads; the error is still the
// first superstep's that fails, whichever thread finds which.
TEST(SimulatorErrorTest, FirstFailingSuperstepWhateverTheThreads) {
  GemmProgram p;
  p.Compute(0, 1).args[1]->bytes = 2048;
  p.Compute(1, 0).args[1]->buffer = 999;
  for (int threads : {1, 2, 2, 2}) {
    SimOptions options;
    options.threads = threads;
    SimResult r;
    Status s = RunSim(p.b.module, p.inputs, &r, options);
    EXPECT_EQ(s.message(),
              "superstep 0 tile 1 op 7 compute 1 (gemm): arg 1 buffer #4: "
              "slice [0, 2048) is outside the buffer's 1024 bytes")
        << threads << " threads";
  }
}

TEST(SimulatorErrorTest, BufferOnAnotherTile) {
  GemmProgram p;
  p.Compute(1, 0).args[1]->buffer = p.remote[1];
  Status s = RunExpectingError(p.b.module, p.inputs);
  EXPECT_THAT(s.message(), HasSubstr("superstep 1 tile 0 op 7"));
  EXPECT_THAT(s.message(), HasSubstr("lives on tile 1"));
}

TEST(SimulatorErrorTest, MisalignedBuffer) {
  GemmProgram p;
  p.b.BufferRef(p.b_buf[2]).offset = kTensorBase + 516;
  Status s = RunExpectingError(p.b.module, p.inputs);
  EXPECT_EQ(s.message(),
            "buffer #7 \"b\" on tile 2: offset 16900 is not aligned to 8 bytes");
}

TEST(SimulatorErrorTest, BufferOutsideTensorMemory) {
  GemmProgram p;
  p.b.BufferRef(p.partial[3]).offset = 81920 - 256;
  Status s = RunExpectingError(p.b.module, p.inputs);
  EXPECT_THAT(s.message(), HasSubstr("buffer #11 \"partial\" on tile 3"));
  EXPECT_THAT(s.message(),
              HasSubstr("bytes [81664, 82176) are outside the tile's tensor "
                        "memory [16384, 81920) (code lies below 16384)"));
}

TEST(SimulatorErrorTest, GemmOutputInStandardMemory) {
  GemmProgram p;
  p.b.BufferRef(p.partial[1]).offset = kTensorBase + 4096;
  Status s = RunExpectingError(p.b.module, p.inputs);
  EXPECT_EQ(s.message(),
            "superstep 0 tile 1 op 7 compute 1 (gemm): output C buffer #5 at "
            "[20480, 20992) is not in interleaved memory (which starts at "
            "49152)");
}

TEST(SimulatorErrorTest, GemmOutputSharesElementWithA) {
  GemmProgram p;
  // A moves into the interleaved element that holds C.
  p.b.BufferRef(p.a_buf[0]).offset = 49152 + 4096;
  Status s = RunExpectingError(p.b.module, p.inputs);
  EXPECT_EQ(s.message(),
            "superstep 0 tile 0 op 7 compute 0 (gemm): output C buffer #2 "
            "shares memory element 3 with left operand A buffer #0");
}

TEST(SimulatorErrorTest, OverlappingTransferDestinations) {
  GemmProgram p;
  // A second transfer writes the upper half of the same remote partial.
  Builder::Transfer(*p.b.module.program->supersteps[0], 3, p.partial[3], 0,
                    256, fb::DType::F32, {{0, p.remote[0], 256}}, 9);
  Status s = RunExpectingError(p.b.module, p.inputs);
  EXPECT_EQ(s.message(),
            "superstep 0 tile 0 op 9 transfer 2 destination 0 buffer #12: "
            "writes tile bytes [18176, 18432) that transfer 0 (op 7) also writes "
            "through buffer #12");
}

TEST(SimulatorErrorTest, TransferOutsideDestinationBuffer) {
  GemmProgram p;
  p.b.module.program->supersteps[0]->exchange[1]->destinations[0]->offset = 8;
  Status s = RunExpectingError(p.b.module, p.inputs);
  EXPECT_EQ(s.message(),
            "superstep 0 tile 3 op 7 transfer 1: destination 0 tile 1 buffer "
            "#14: bytes [8, 520) are outside the buffer's 512 bytes");
}

TEST(SimulatorErrorTest, TransferDtypeMismatch) {
  GemmProgram p;
  p.b.module.program->supersteps[0]->exchange[0]->dtype = fb::DType::F16;
  Status s = RunExpectingError(p.b.module, p.inputs);
  EXPECT_EQ(s.message(),
            "superstep 0 tile 2 op 7 transfer 0: source buffer #8: transfer "
            "dtype f16 differs from the buffer's f32");
}

TEST(SimulatorErrorTest, TransferBetweenBuffersOfDifferentDtypes) {
  GemmProgram p;
  // An F32 partial into the F16 output buffer would be reinterpreted.
  p.b.BufferRef(p.out[0]).bytes = 512;
  p.b.module.program->supersteps[0]->exchange[0]->destinations[0]->buffer =
      p.out[0];
  Status s = RunExpectingError(p.b.module, p.inputs);
  EXPECT_EQ(s.message(),
            "superstep 0 tile 2 op 7 transfer 0: destination 0 tile 0 buffer "
            "#13: buffer is f16 but source buffer #8 is f32");
}

TEST(SimulatorErrorTest, ScaleOnANonFp8Buffer) {
  GemmProgram p;
  p.b.BufferRef(p.out[1]).fp8_scale_exp = 3;
  Status s = RunExpectingError(p.b.module, p.inputs);
  EXPECT_EQ(s.message(),
            "buffer #15 \"c\" on tile 1: fp8_scale_exp 3 on a f16 "
            "buffer (FP8 only)");
}

TEST(SimulatorErrorTest, UncoveredOutput) {
  GemmProgram p;
  p.b.module.program->outputs[0]->fragments.pop_back();
  Status s = RunExpectingError(p.b.module, p.inputs);
  EXPECT_EQ(s.message(),
            "output binding 0 value %2 \"y\": element [0, 16] is not read from "
            "any fragment (128 of 256 elements are not covered)");
}

TEST(SimulatorErrorTest, UnboundGraphOutput) {
  GemmProgram p;
  p.b.module.program->outputs.clear();
  Status s = RunExpectingError(p.b.module, p.inputs);
  EXPECT_THAT(s.message(), HasSubstr("graph output %2 \"y\" has no output"));
}

TEST(SimulatorErrorTest, KernelOperandTooSmallNamesTheBuffers) {
  GemmProgram p;
  // The slice is in bounds but too small for M=8 rows of A.
  p.Compute(0, 3).args[0]->bytes = 256;
  Status s = RunExpectingError(p.b.module, p.inputs);
  EXPECT_EQ(s.message(),
            "superstep 0 tile 3 op 7 compute 3 (gemm) on buffer #9, buffer "
            "#10, buffer #11: gemm: operand A needs 512 bytes (256 f16 "
            "elements) but holds 256");
}

TEST(SimulatorErrorTest, UnknownKernel) {
  GemmProgram p;
  p.Compute(1, 1).kernel = "reduce";
  Status s = RunExpectingError(p.b.module, p.inputs);
  EXPECT_THAT(s.message(),
              HasSubstr("superstep 1 tile 1 op 7 compute 1 (reduce) on buffer "
                        "#5, buffer #14, buffer #15: unknown kernel 'reduce'"));
}

TEST(SimulatorErrorTest, TileOutOfRange) {
  GemmProgram p;
  p.b.module.program->supersteps[0]->exchange[0]->destinations[0]->tile = 16;
  Status s = RunExpectingError(p.b.module, p.inputs);
  EXPECT_THAT(s.message(),
              HasSubstr("superstep 0 tile 2 op 7 transfer 0: destination 0 "
                        "tile 16 buffer #12: tile out of range"));
}

TEST(SimulatorErrorTest, InputBoxOutsideValue) {
  GemmProgram p;
  p.b.module.program->inputs[0]->fragments[1]->end = {kM, kK + 1};
  Status s = RunExpectingError(p.b.module, p.inputs);
  EXPECT_THAT(s.message(),
              HasSubstr("input binding 0 value %0 \"x\" fragment 1 tile 1 "
                        "buffer #3: box [0, 0] to [8, 65] is outside"));
}

TEST(SimulatorErrorTest, MissingHostData) {
  GemmProgram p;
  p.inputs.erase(p.bw);
  Status s = RunExpectingError(p.b.module, p.inputs);
  EXPECT_EQ(s.message(), "input value %1 \"w\": no host data");
}

// ---------------------------------------------------------------- exchange

// One program with only exchanges: tile 0 multicasts 400 B to tiles 1, 2, 3
// and tile 4 sends 40 B to tile 1.
TEST(SimulatorTest, MulticastCountsOnceForSenderAndAtEachReceiver) {
  Builder b;
  const uint32_t src = b.Buffer(0, 0, 400, fb::DType::F32);
  const uint32_t small = b.Buffer(4, 0, 40, fb::DType::F32);
  std::vector<uint32_t> dst;
  for (uint32_t t = 1; t <= 3; ++t) dst.push_back(b.Buffer(t, 0, 400, fb::DType::F32));
  const uint32_t dst_small = b.Buffer(1, 400, 40, fb::DType::F32);
  fb::SuperstepT& s = b.Step("multicast");
  Builder::Transfer(s, 0, src, 0, 400, fb::DType::F32,
                    {{1, dst[0], 0}, {2, dst[1], 0}, {3, dst[2], 0}}, 1);
  Builder::Transfer(s, 4, small, 0, 40, fb::DType::F32, {{1, dst_small, 0}}, 2);
  SimResult r;
  Status st = RunSim(b.module, {}, &r);
  ASSERT_TRUE(st.ok()) << st.message();
  // Endpoint bound: tile 1 receives 440 B -> 110 cycles. Schedule: tile 1
  // takes one source at a time, so the 100-word multicast and the 10-word
  // piece arrive one after the other: the first Send takes effect at 2,
  // payloads arrive from 2 + 52 for 110 cycles: 164, plus sync 277.
  EXPECT_EQ(r.supersteps[0].exchange_bound_cycles, 110);
  EXPECT_EQ(r.supersteps[0].exchange_scheduled_cycles, 164);
  EXPECT_EQ(r.supersteps[0].exchange_cycles, 164 + 277);
  EXPECT_EQ(r.supersteps[0].exchange_slowest_tile, 1);
  EXPECT_EQ(r.supersteps[0].compute_cycles, 0);
  EXPECT_EQ(r.bytes_sent, 440);
  EXPECT_EQ(r.bytes_received, 1240);
  ASSERT_EQ(r.ops.size(), 2u);
  EXPECT_EQ(r.ops[0].bytes_sent, 400);
  EXPECT_EQ(r.ops[0].bytes_received, 1200);
  EXPECT_EQ(r.ops[1].bytes_received, 40);
  // 441 split by delivered bytes 1200 : 40: 426.8 and 14.2 -> 427 + 14.
  EXPECT_EQ(r.ops[0].exchange_cycles, 427);
  EXPECT_EQ(r.ops[1].exchange_cycles, 14);
}

TEST(SimulatorTest, FragmentCostDominatesManySmallTransfers) {
  Builder b;
  const uint32_t src = b.Buffer(0, 0, 400, fb::DType::F32);
  const uint32_t dst = b.Buffer(1, 0, 400, fb::DType::F32);
  fb::SuperstepT& s = b.Step("small");
  for (uint32_t i = 0; i < 100; ++i) {
    Builder::Transfer(s, 0, src, 4 * i, 4, fb::DType::F32, {{1, dst, 4 * i}}, 1);
  }
  SimResult r;
  ASSERT_TRUE(RunSim(b.module, {}, &r).ok());
  // 400 B / 4 = 100 cycles, but 100 fragments x 2 = 200 at each end: the
  // bound is 200. The sender issues a Send every 2 cycles, so the last
  // word arrives no earlier than 200 + 52 + 1; the receiver's Selects and
  // Pointers (52 cycles apart) compete for its issue cycles and may cost
  // the schedule a few more.
  EXPECT_EQ(r.supersteps[0].exchange_bound_cycles, 200);
  EXPECT_GE(r.supersteps[0].exchange_scheduled_cycles, 253);
  EXPECT_LE(r.supersteps[0].exchange_scheduled_cycles, 256);
  EXPECT_EQ(r.total_cycles, r.supersteps[0].exchange_scheduled_cycles + 277);
}

TEST(SimulatorTest, ExchangeReadsSourcesAsOfTheEndOfCompute) {
  Builder b;
  const uint32_t v = b.Value("v", {2, 4}, fb::DType::F32, fb::ValueRole::Input);
  const uint32_t out = b.Value("o", {2, 4}, fb::DType::F32, fb::ValueRole::Output);
  const uint32_t b0 = b.Buffer(0, 0, 16, fb::DType::F32);
  const uint32_t b1 = b.Buffer(1, 0, 16, fb::DType::F32);
  b.Bind(false, v, {{0, b0, 0, {0, 0}, {1, 4}}, {1, b1, 0, {1, 0}, {2, 4}}});
  // Swap the two rows in one phase: each transfer must see the other's
  // source before it was overwritten.
  fb::SuperstepT& s = b.Step("swap");
  Builder::Transfer(s, 0, b0, 0, 16, fb::DType::F32, {{1, b1, 0}}, 1);
  Builder::Transfer(s, 1, b1, 0, 16, fb::DType::F32, {{0, b0, 0}}, 1);
  b.Bind(true, out, {{0, b0, 0, {0, 0}, {1, 4}}, {1, b1, 0, {1, 0}, {2, 4}}});
  SimResult r;
  Status st = RunSim(b.module, {{v, {1, 2, 3, 4, 5, 6, 7, 8}}}, &r);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(r.outputs[out], (std::vector<float>{5, 6, 7, 8, 1, 2, 3, 4}));
}

// ---------------------------------------------------------------- strided

// v[8,4] F32 on tile 0; column `col` of it (one 4 B element per row, 16 B
// apart) goes to o[8,1] on tiles 1 and 2 (a multicast), either as one
// strided transfer of 8 pieces or as 8 transfers of one piece.
struct ColumnProgram {
  Builder b;
  uint32_t v, o, src, dst1, dst2;
  HostTensors inputs;

  explicit ColumnProgram(bool strided, uint32_t col = 1) {
    v = b.Value("v", {8, 4}, fb::DType::F32, fb::ValueRole::Input);
    o = b.Value("o", {8, 1}, fb::DType::F32, fb::ValueRole::Output);
    b.Op(1, fb::OpKind::Redistribute, "column");
    src = b.Buffer(0, 0, 128, fb::DType::F32, "v");
    dst1 = b.Buffer(1, 0, 32, fb::DType::F32, "o");
    dst2 = b.Buffer(2, 64, 96, fb::DType::F32, "o");  // o at 32 in it
    b.Bind(false, v, {{0, src, 0, {0, 0}, {8, 4}}});
    fb::SuperstepT& s = b.Step("column");
    if (strided) {
      fb::TransferT& t =
          Builder::Transfer(s, 0, src, 4 * col, 4, fb::DType::F32,
                            {{1, dst1, 0}, {2, dst2, 32}}, 1);
      t.rows = 8;
      t.src_pitch = 16;
      t.dst_pitch = 4;
    } else {
      for (uint32_t i = 0; i < 8; ++i) {
        Builder::Transfer(s, 0, src, 16 * i + 4 * col, 4, fb::DType::F32,
                          {{1, dst1, 4 * i}, {2, dst2, 32 + 4 * i}}, 1);
      }
    }
    b.Bind(true, o,
           {{1, dst1, 0, {0, 0}, {8, 1}}, {2, dst2, 32, {0, 0}, {8, 1}}});
    std::vector<float> data(32);
    std::iota(data.begin(), data.end(), 1.0f);
    inputs[v] = data;
  }
  fb::TransferT& transfer(int i = 0) {
    return *b.module.program->supersteps[0]->exchange[i];
  }
};

TEST(SimulatorTest, StridedTransferMovesEveryPieceAndCostsItsFragments) {
  ColumnProgram p(/*strided=*/true);
  SimResult r;
  Status st = RunSim(p.b.module, p.inputs, &r);
  ASSERT_TRUE(st.ok()) << st.message();
  // Both receivers hold column 1: 2, 6, 10, ...
  EXPECT_EQ(r.outputs[p.o], (std::vector<float>{2, 6, 10, 14, 18, 22, 26, 30}));
  // 8 pieces of 4 B: tile 0 issues a Send per piece, 2 cycles each, so the
  // 8th takes effect at 16 and its word arrives in [68, 69): 69 + 277.
  // Counting the transfer as one fragment would give 2 + 52 + 8 + 277.
  EXPECT_EQ(r.supersteps[0].exchange_bound_cycles, 16);
  EXPECT_EQ(r.total_cycles, 69 + 277);
  EXPECT_EQ(r.transfers, 1);
  EXPECT_EQ(r.pieces, 8);
  EXPECT_EQ(r.bytes_sent, 32);
  EXPECT_EQ(r.bytes_received, 64);
  ASSERT_EQ(r.ops.size(), 1u);
  EXPECT_EQ(r.ops[0].pieces, 8);
  EXPECT_EQ(r.ops[0].bytes_received, 64);
  EXPECT_EQ(r.supersteps[0].pieces, 8);
}

TEST(SimulatorTest, StridedTransferCostsExactlyItsPiecesAsSeparateTransfers) {
  ColumnProgram strided(true), separate(false);
  SimResult a, b;
  ASSERT_TRUE(RunSim(strided.b.module, strided.inputs, &a).ok());
  ASSERT_TRUE(RunSim(separate.b.module, separate.inputs, &b).ok());
  EXPECT_EQ(a.outputs, b.outputs);
  EXPECT_EQ(a.total_cycles, b.total_cycles);
  EXPECT_EQ(a.exchange_cycles, b.exchange_cycles);
  EXPECT_EQ(a.supersteps[0].exchange_slowest_tile,
            b.supersteps[0].exchange_slowest_tile);
  EXPECT_EQ(a.bytes_sent, b.bytes_sent);
  EXPECT_EQ(a.bytes_received, b.bytes_received);
  EXPECT_EQ(a.pieces, b.transfers);
  EXPECT_EQ(b.pieces, b.transfers);
  ASSERT_EQ(a.ops.size(), b.ops.size());
  EXPECT_EQ(a.ops[0].exchange_cycles, b.ops[0].exchange_cycles);
  EXPECT_EQ(a.ops[0].bytes_sent, b.ops[0].bytes_sent);
  EXPECT_EQ(a.slowest_tiles.size(), b.slowest_tiles.size());
  for (size_t i = 0; i < a.slowest_tiles.size(); ++i) {
    EXPECT_EQ(a.slowest_tiles[i].tile, b.slowest_tiles[i].tile);
    EXPECT_EQ(a.slowest_tiles[i].exchange_cycles,
              b.slowest_tiles[i].exchange_cycles);
  }
}

TEST(SimulatorTest, StridedColumnsInterleaveAtTheirDestination) {
  // Columns 0 and 3 of v from two strided transfers into the two columns of
  // one [8,2] buffer (dst_pitch 8): the pieces alternate without overlap.
  ColumnProgram p(true, 0);
  p.b.BufferRef(p.dst1).bytes = 64;
  p.transfer().dst_pitch = 8;
  p.transfer().destinations.pop_back();
  fb::TransferT& t =
      Builder::Transfer(*p.b.module.program->supersteps[0], 0, p.src, 12, 4,
                        fb::DType::F32, {{1, p.dst1, 4}}, 1);
  t.rows = 8;
  t.src_pitch = 16;
  t.dst_pitch = 8;
  p.b.module.values[p.o]->shape = {8, 2};
  p.b.module.program->outputs[0]->fragments.pop_back();
  p.b.module.program->outputs[0]->fragments[0]->end = {8, 2};
  SimResult r;
  Status st = RunSim(p.b.module, p.inputs, &r);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(r.outputs[p.o], (std::vector<float>{1, 4, 5, 8, 9, 12, 13, 16, 17,
                                                20, 21, 24, 25, 28, 29, 32}));
  EXPECT_EQ(r.pieces, 16);
}

TEST(SimulatorTest, StridedTransfersReadSourcesAsOfTheEndOfCompute) {
  Builder b;
  const uint32_t v = b.Value("v", {4, 2}, fb::DType::F32, fb::ValueRole::Input);
  const uint32_t out =
      b.Value("o", {4, 2}, fb::DType::F32, fb::ValueRole::Output);
  const uint32_t b0 = b.Buffer(0, 0, 16, fb::DType::F32);
  const uint32_t b1 = b.Buffer(1, 0, 16, fb::DType::F32);
  b.Bind(false, v, {{0, b0, 0, {0, 0}, {2, 2}}, {1, b1, 0, {2, 0}, {4, 2}}});
  // Swap column 0 of the two tiles' [2,2] blocks in one phase.
  fb::SuperstepT& s = b.Step("swap");
  for (uint32_t t : {0u, 1u}) {
    fb::TransferT& x =
        Builder::Transfer(s, t, t == 0 ? b0 : b1, 0, 4, fb::DType::F32,
                          {{1 - t, t == 0 ? b1 : b0, 0}}, 1);
    x.rows = 2;
    x.src_pitch = 8;
    x.dst_pitch = 8;
  }
  b.Bind(true, out, {{0, b0, 0, {0, 0}, {2, 2}}, {1, b1, 0, {2, 0}, {4, 2}}});
  SimResult r;
  Status st = RunSim(b.module, {{v, {1, 2, 3, 4, 5, 6, 7, 8}}}, &r);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(r.outputs[out], (std::vector<float>{5, 2, 7, 4, 1, 6, 3, 8}));
}

TEST(SimulatorErrorTest, StridedPieceOutsideTheSourceBuffer) {
  ColumnProgram p(true);
  p.transfer().rows = 9;  // piece 8 would start at 4 + 8 * 16 = 132
  Status s = RunExpectingError(p.b.module, p.inputs);
  EXPECT_EQ(s.message(),
            "superstep 0 tile 0 op 1 transfer 0: source buffer #0: piece 8 of "
            "9 (bytes [132, 136)) is outside the buffer's 128 bytes");
}

TEST(SimulatorErrorTest, StridedPieceOutsideADestinationBuffer) {
  ColumnProgram p(true);
  p.transfer().src_pitch = 12;  // the source still fits
  p.transfer().dst_pitch = 8;   // tile 1's 32 B hold pieces 0-3
  Status s = RunExpectingError(p.b.module, p.inputs);
  EXPECT_EQ(s.message(),
            "superstep 0 tile 0 op 1 transfer 0: destination 0 tile 1 buffer "
            "#1: piece 4 of 8 (bytes [32, 36)) is outside the buffer's 32 "
            "bytes");
}

TEST(SimulatorErrorTest, StridedTransferOfNoRowsOrHalfElementPitch) {
  {
    ColumnProgram p(true);
    p.transfer().rows = 0;
    EXPECT_EQ(RunExpectingError(p.b.module, p.inputs).message(),
              "superstep 0 tile 0 op 1 transfer 0: source buffer #0: transfer "
              "of 0 rows");
  }
  {
    ColumnProgram p(true);
    p.transfer().src_pitch = 14;
    EXPECT_EQ(RunExpectingError(p.b.module, p.inputs).message(),
              "superstep 0 tile 0 op 1 transfer 0: source buffer #0: src_pitch "
              "14 or dst_pitch 4 is not a whole number of elements");
  }
  {
    // With one piece the pitches are not used, so nothing is checked.
    ColumnProgram p(true);
    p.transfer().rows = 1;
    p.transfer().src_pitch = 14;
    p.b.module.program->outputs.clear();
    p.b.module.values.pop_back();
    SimResult r;
    Status st = RunSim(p.b.module, p.inputs, &r);
    EXPECT_TRUE(st.ok()) << st.message();
    EXPECT_EQ(r.pieces, 1);
  }
}

TEST(SimulatorErrorTest, OverlappingPiecesOfOneStridedTransfer) {
  ColumnProgram p(true);
  // Two elements per piece but only one element between pieces.
  p.transfer().bytes = 8;
  p.b.BufferRef(p.dst1).bytes = 40;  // room for the last piece
  Status s = RunExpectingError(p.b.module, p.inputs);
  EXPECT_EQ(s.message(),
            "superstep 0 tile 1 op 1 transfer 0 destination 0 piece 1 buffer "
            "#1: writes tile bytes [16388, 16392) that its piece 0 also writes "
            "(dst_pitch 4 is less than the 8 bytes of a piece)");
}

TEST(SimulatorErrorTest, StridedTransfersWritingTheSamePiece) {
  ColumnProgram p(true);
  // A second strided transfer whose piece 2 lands on piece 5 of the first
  // at tile 2 (buffer #2 at 64, o at 32 in it: piece 5 at 116).
  fb::TransferT& t =
      Builder::Transfer(*p.b.module.program->supersteps[0], 0, p.src, 0, 4,
                        fb::DType::F32, {{2, p.dst2, 4}}, 3);
  t.rows = 3;
  t.src_pitch = 4;
  t.dst_pitch = 24;
  Status s = RunExpectingError(p.b.module, p.inputs);
  EXPECT_EQ(s.message(),
            "superstep 0 tile 2 op 3 transfer 1 destination 0 piece 2 buffer "
            "#2: writes tile bytes [16500, 16504) that transfer 0 piece 5 (op 1) "
            "also writes through buffer #2");
}

// ---------------------------------------------------------------- host I/O

TEST(SimulatorTest, RankThreeBoxesRoundTripAndDuplicatesMustAgree) {
  Builder b;
  const uint32_t v = b.Value("v", {2, 3, 4}, fb::DType::F32, fb::ValueRole::Input);
  const uint32_t lo = b.Buffer(0, 0, 2 * 1 * 4 * 4, fb::DType::F32);
  const uint32_t hi = b.Buffer(0, 64, 2 * 2 * 4 * 4, fb::DType::F32);
  const uint32_t dup = b.Buffer(1, 0, 2 * 2 * 4 * 2, fb::DType::F16);
  b.Bind(false, v,
         {{0, lo, 0, {0, 0, 0}, {2, 1, 4}},
          {0, hi, 0, {0, 1, 0}, {2, 3, 4}},
          {1, dup, 0, {0, 1, 0}, {2, 3, 4}}});
  b.Bind(true, v,
         {{0, lo, 0, {0, 0, 0}, {2, 1, 4}},
          {0, hi, 0, {0, 1, 0}, {2, 3, 4}},
          {1, dup, 0, {0, 1, 0}, {2, 3, 4}}});
  std::vector<float> data(24);
  std::iota(data.begin(), data.end(), 0.0f);
  SimResult r;
  Status st = RunSim(b.module, {{v, data}}, &r);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(r.outputs[v], data);

  // 0.1 is not an F16 value: the F16 copy disagrees with the F32 one.
  data[5] = 0.1f;
  st = RunSim(b.module, {{v, data}}, &r);
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(st.message(),
              HasSubstr("output value %0 \"v\" fragment 2 tile 1 buffer #2: "
                        "element [0, 1, 1] is 0.099975586 but an earlier "
                        "fragment read 0.1"));
}

TEST(SimulatorTest, UnwrittenMemoryReadsAsNaN) {
  Builder b;
  const uint32_t out = b.Value("o", {4}, fb::DType::F16, fb::ValueRole::Output);
  const uint32_t buf = b.Buffer(2, 0, 8, fb::DType::F16);
  b.Bind(true, out, {{2, buf, 0, {0}, {4}}});
  SimResult r;
  ASSERT_TRUE(RunSim(b.module, {}, &r).ok());
  for (float x : r.outputs[out]) EXPECT_TRUE(std::isnan(x));
}

// ---------------------------------------------------------------- slow path

TEST(SimulatorTest, BinaryInputsInOneElementChargeTheSlowPath) {
  Builder b;
  const uint32_t x = b.Buffer(0, 0, 128, fb::DType::F16);
  const uint32_t same = b.Buffer(0, 256, 128, fb::DType::F16);
  const uint32_t other = b.Buffer(0, 16384, 128, fb::DType::F16);
  const uint32_t out = b.Buffer(0, 512, 128, fb::DType::F16);
  fb::SuperstepT& s = b.Step("adds");
  Builder::Compute(s, 0, "add", {{x, 0, 128}, {same, 0, 128}, {out, 0, 128}},
                   {4, 16}, 1);
  Builder::Compute(s, 0, "add", {{x, 0, 128}, {other, 0, 128}, {out, 0, 128}},
                   {4, 16}, 2);
  SimResult r;
  SimOptions options;
  options.execute = false;
  Status st = RunSim(b.module, {}, &r, options);
  ASSERT_TRUE(st.ok()) << st.message();
  // n = 4 * 16 = 64: fast 200 + 4*ceil(64/4) = 264; slow doubles the term:
  // 200 + 2*64 = 328.
  EXPECT_EQ(r.total_cycles, 328 + 264);
  EXPECT_EQ(r.slow_path_calls, 1);
  ASSERT_EQ(r.slow_paths.size(), 1u);
  EXPECT_EQ(r.slow_paths[0].kernel, "add");
  EXPECT_EQ(r.slow_paths[0].calls, 1);
  EXPECT_EQ(r.slow_paths[0].extra_cycles, 64);
  ASSERT_EQ(r.ops.size(), 2u);
  EXPECT_EQ(r.ops[0].compute_cycles, 328);
  EXPECT_EQ(r.ops[0].slow_path_calls, 1);
  EXPECT_EQ(r.ops[1].compute_cycles, 264);
  EXPECT_EQ(r.ops[1].slow_path_calls, 0);
}

// ---------------------------------------------------------------- attribution

TEST(SimulatorTest, ApportionmentSumsExactlyToTheTotal) {
  Builder b;
  // Tile 0 computes op 3 twice and op 4 once; tile 1 is faster. Tile 0
  // sends 4 B (op 10), 8 B (op 11) and 8 B (op 12).
  const uint32_t x = b.Buffer(0, 0, 64, fb::DType::F16);
  const uint32_t y = b.Buffer(0, 16384, 64, fb::DType::F16);
  const uint32_t z = b.Buffer(0, 32768, 64, fb::DType::F16);
  const uint32_t w = b.Buffer(1, 0, 64, fb::DType::F16);
  const uint32_t w2 = b.Buffer(1, 16384, 64, fb::DType::F16);
  const uint32_t w3 = b.Buffer(1, 32768, 64, fb::DType::F16);
  const uint32_t src = b.Buffer(0, 1024, 24, fb::DType::F32);
  const uint32_t dst = b.Buffer(2, 0, 24, fb::DType::F32);
  fb::SuperstepT& s = b.Step("mixed");
  for (uint32_t op : {3u, 3u, 4u}) {
    Builder::Compute(s, 0, "add", {{x, 0, 64}, {y, 0, 64}, {z, 0, 64}},
                     {1, 32}, op);
  }
  Builder::Compute(s, 1, "add", {{w, 0, 64}, {w2, 0, 64}, {w3, 0, 64}},
                   {1, 32}, 5);
  Builder::Transfer(s, 0, src, 0, 4, fb::DType::F32, {{2, dst, 0}}, 10);
  Builder::Transfer(s, 0, src, 4, 8, fb::DType::F32, {{2, dst, 4}}, 11);
  Builder::Transfer(s, 0, src, 12, 8, fb::DType::F32, {{2, dst, 12}}, 12);
  SimResult r;
  SimOptions options;
  options.execute = false;
  Status st = RunSim(b.module, {}, &r, options);
  ASSERT_TRUE(st.ok()) << st.message();
  // add 1x32: 200 + 4*8 = 232; tile 0: 696. Exchange: tile 0 sends 2, 2
  // and 1 words, longest first, its Sends taking effect at 2, 4 and 6; the
  // last word arrives in [58, 59): 59 + 277 = 336, split 4:8:8 -> 67.2,
  // 134.4, 134.4 -> 67, 135, 134 (the leftover cycle to the first of the
  // tied largest remainders).
  EXPECT_EQ(r.total_cycles, 696 + 336);
  int64_t sum = 0;
  std::map<uint32_t, std::pair<int64_t, int64_t>> by_op;
  for (const OpReport& o : r.ops) {
    sum += o.compute_cycles + o.exchange_cycles;
    by_op[o.op] = {o.compute_cycles, o.exchange_cycles};
  }
  EXPECT_EQ(sum, r.total_cycles);
  EXPECT_EQ(by_op[3], std::make_pair(int64_t{464}, int64_t{0}));
  EXPECT_EQ(by_op[4], std::make_pair(int64_t{232}, int64_t{0}));
  EXPECT_EQ(by_op[5], std::make_pair(int64_t{0}, int64_t{0}));  // not slowest
  EXPECT_EQ(by_op[10], std::make_pair(int64_t{0}, int64_t{67}));
  EXPECT_EQ(by_op[11], std::make_pair(int64_t{0}, int64_t{135}));
  EXPECT_EQ(by_op[12], std::make_pair(int64_t{0}, int64_t{134}));
  ASSERT_EQ(r.supersteps[0].compute_spans.size(), 2u);
  EXPECT_EQ(r.supersteps[0].compute_spans[0].cycles, 464);
  EXPECT_EQ(r.supersteps[0].compute_spans[0].calls, 2);
}

// ---------------------------------------------------------------- compare

TEST(CompareTest, MetricsAndTolerances) {
  const Tolerance tol{0.01, 0.0, 0.999};
  std::vector<float> ref = {1, -2, 4, 0};
  Comparison same = CompareTensors(ref, ref, tol);
  EXPECT_TRUE(same.pass);
  EXPECT_EQ(same.max_abs_err, 0);
  EXPECT_DOUBLE_EQ(same.cosine, 1);
  EXPECT_EQ(same.scale, 4);

  std::vector<float> sim = {1, -2, 4, 0.03f};
  Comparison off = CompareTensors(sim, ref, tol);
  EXPECT_NEAR(off.max_abs_err, 0.03, 1e-7);
  // The zero is measured against the floor 1e-3 * 4.
  EXPECT_NEAR(off.max_rel_err, 0.03 / 0.004, 1e-4);
  EXPECT_EQ(off.mismatches, 0);  // 0.03 <= 0.01 * 4
  EXPECT_EQ(off.worst_index, 3);
  EXPECT_TRUE(off.pass);

  sim[3] = 0.05f;
  EXPECT_FALSE(CompareTensors(sim, ref, tol).pass);

  sim[3] = NAN;
  Comparison nan = CompareTensors(sim, ref, tol);
  EXPECT_FALSE(nan.pass);
  EXPECT_EQ(nan.nonfinite, 1);
  EXPECT_TRUE(std::isinf(nan.max_abs_err));

  // Issue 8: an output that is all infinities where the reference is
  // finite fails with the count, and does not get cosine 1.
  std::vector<float> inf(4, INFINITY);
  Comparison all_inf = CompareTensors(inf, ref, tol);
  EXPECT_FALSE(all_inf.pass);
  EXPECT_EQ(all_inf.nonfinite, 4);
  EXPECT_EQ(all_inf.mismatches, 4);
  EXPECT_EQ(all_inf.cosine, 0);

  // Issue 28: NaN on both sides (inputs that held NaN) is no pass either.
  std::vector<float> nans(4, NAN);
  Comparison both_nan = CompareTensors(nans, nans, tol);
  EXPECT_FALSE(both_nan.pass);
  EXPECT_EQ(both_nan.nonfinite, 4);
  EXPECT_EQ(both_nan.cosine, 0);
  Tolerance allowing = tol;
  allowing.allow_nonfinite = true;
  EXPECT_TRUE(CompareTensors(nans, nans, allowing).pass);
  EXPECT_FALSE(CompareTensors(inf, ref, allowing).pass);
}

TEST(CompareTest, DefaultsAreLooserWithFp8) {
  EXPECT_LT(DefaultTolerance(false).atol, DefaultTolerance(true).atol);
  EXPECT_GT(DefaultTolerance(false).min_cosine,
            DefaultTolerance(true).min_cosine);
}

// ---------------------------------------------------------------- repeats

// acc (tile 0) += w_i for i = 0..2, each w_i sent from tile 1: rolled as one
// body of two supersteps run three times with w0's buffer renamed to w1's and
// w2's, or written out as six supersteps. Both give the same outputs; the
// rolled one pays, before iterations 1 and 2, for moving tile 1's send
// address: one base register write, 13 cycles (docs/repeat.md).
struct AddChain {
  Builder b;
  uint32_t x, w[3], y;
  uint32_t acc, staged, wbuf[3];
  HostTensors inputs;

  explicit AddChain(bool rolled) {
    x = b.Value("x", {4}, fb::DType::F32, fb::ValueRole::Input);
    for (int i = 0; i < 3; ++i) {
      w[i] = b.Value("w" + std::to_string(i), {4}, fb::DType::F32,
                     fb::ValueRole::Weight);
    }
    y = b.Value("y", {4}, fb::DType::F32, fb::ValueRole::Output);
    acc = b.Buffer(0, 0, 16, fb::DType::F32, "acc");
    staged = b.Buffer(0, 16384, 16, fb::DType::F32, "staged");
    for (int i = 0; i < 3; ++i) {
      wbuf[i] = b.Buffer(1, 64 * i, 16, fb::DType::F32, "w");
    }
    for (int i = 0; i < (rolled ? 1 : 3); ++i) {
      fb::SuperstepT& send = b.Step("send");
      Builder::Transfer(send, 1, wbuf[i], 0, 16, fb::DType::F32,
                        {{0, staged, 0}}, 1);
      fb::SuperstepT& add = b.Step("add");
      Builder::Compute(add, 0, "add",
                       {{acc, 0, 16}, {staged, 0, 16}, {acc, 0, 16}}, {1, 4},
                       2);
    }
    if (rolled) {
      auto r = std::make_unique<fb::SuperstepRepeatT>();
      r->first = 0;
      r->count = 2;
      for (int i = 0; i < 3; ++i) {
        auto it = std::make_unique<fb::RepeatIterationT>();
        if (i > 0) it->renames.emplace_back(wbuf[0], wbuf[i]);
        r->iterations.push_back(std::move(it));
      }
      b.module.program->repeats.push_back(std::move(r));
    }
    b.Bind(false, x, {{0, acc, 0, {0}, {4}}});
    for (int i = 0; i < 3; ++i) b.Bind(false, w[i], {{1, wbuf[i], 0, {0}, {4}}});
    b.Bind(true, y, {{0, acc, 0, {0}, {4}}});
    inputs[x] = {1, 2, 3, 4};
    inputs[w[0]] = {10, 20, 30, 40};
    inputs[w[1]] = {100, 200, 300, 400};
    inputs[w[2]] = {1000, 2000, 3000, 4000};
  }
};

TEST(SimulatorRepeatTest, RunsLikeTheWrittenOutProgram) {
  AddChain rolled(true), written(false);
  SimResult r, w;
  Status st = RunSim(rolled.b.module, rolled.inputs, &r);
  ASSERT_TRUE(st.ok()) << st.message();
  st = RunSim(written.b.module, written.inputs, &w);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(r.outputs[rolled.y], (std::vector<float>{1111, 2222, 3333, 4444}));
  EXPECT_EQ(r.outputs[rolled.y], w.outputs[written.y]);
  EXPECT_EQ(r.total_cycles, w.total_cycles + 2 * 13);
  EXPECT_EQ(r.exchange_phases, 3);
  ASSERT_EQ(r.supersteps.size(), 6u);
  EXPECT_EQ(r.supersteps[4].index, 0);
  EXPECT_EQ(r.supersteps[4].iteration, 2);
  ASSERT_EQ(r.repeats.size(), 1u);
  EXPECT_EQ(r.supersteps[0].update_cycles, 0);
  EXPECT_EQ(r.supersteps[2].update_cycles, 13);
  EXPECT_EQ(r.supersteps[2].update_tile, 1);
  EXPECT_EQ(r.supersteps[3].update_cycles, 0);
  ASSERT_EQ(r.repeats[0].iteration_cycles.size(), 3u);
  EXPECT_EQ(r.repeats[0].iteration_cycles[1],
            r.repeats[0].iteration_cycles[0] + 13);
  EXPECT_EQ(r.repeats[0].iteration_cycles[0] * 3 + 2 * 13, r.total_cycles);
  ASSERT_EQ(r.ops.size(), 2u);
  ASSERT_EQ(w.ops.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(r.ops[i].compute_cycles, w.ops[i].compute_cycles);
    EXPECT_EQ(r.ops[i].exchange_cycles, w.ops[i].exchange_cycles);
    EXPECT_EQ(r.ops[i].bytes_received, w.ops[i].bytes_received);
  }
  // The update is the send's (op 1), which first references the buffer.
  EXPECT_EQ(r.ops[0].update_cycles, 2 * 13);
  EXPECT_EQ(w.ops[0].update_cycles, 0);
  EXPECT_EQ(r.ops[1].kernel_calls, 3);
}

TEST(SimulatorRepeatTest, CyclesOnlyRunCountsEveryIteration) {
  AddChain rolled(true), written(false);
  SimOptions options;
  options.execute = false;
  SimResult r, w;
  ASSERT_TRUE(RunSim(rolled.b.module, {}, &r, options).ok());
  ASSERT_TRUE(RunSim(written.b.module, {}, &w, options).ok());
  EXPECT_EQ(r.total_cycles, w.total_cycles + 2 * 13);
}

TEST(SimulatorRepeatTest, RefusesRenamesBetweenUnlikeBuffers) {
  AddChain rolled(true);
  rolled.b.BufferRef(rolled.wbuf[2]).bytes = 32;
  Status st = VerifyDeviceProgram(Completed(rolled.b.module));
  EXPECT_EQ(st.code(), StatusCode::kBadInput);
  EXPECT_THAT(st.message(),
              HasSubstr("repeat 0 iteration 2 rename 0 (buffer #2 -> buffer "
                        "#4): the buffers differ in tile, bytes or dtype"));
}

TEST(SimulatorRepeatTest, RefusesUnsortedRenamesAndBadRanges) {
  AddChain rolled(true);
  auto& renames = rolled.b.module.program->repeats[0]->iterations[1]->renames;
  renames.emplace_back(rolled.wbuf[0], rolled.wbuf[2]);
  EXPECT_THAT(VerifyDeviceProgram(Completed(rolled.b.module)).message(),
              HasSubstr("renames must be sorted by `from`, each buffer once"));
  AddChain range(true);
  range.b.module.program->repeats[0]->count = 3;
  EXPECT_THAT(VerifyDeviceProgram(Completed(range.b.module)).message(),
              HasSubstr("repeat 0: supersteps [0, 3) are empty, outside the "
                        "program's 2"));
}

// Each iteration is checked and costed at its own addresses: staged
// renamed, in iteration 2 only, to a buffer in acc's memory element takes
// the add's slow path once.
TEST(SimulatorRepeatTest, CostsEveryIterationAtItsOwnAddresses) {
  AddChain rolled(true);
  const uint32_t near = rolled.b.Buffer(0, 64, 16, fb::DType::F32, "near");
  rolled.b.module.program->repeats[0]->iterations[2]->renames = {
      {rolled.staged, near}, {rolled.wbuf[0], rolled.wbuf[2]}};
  std::sort(rolled.b.module.program->repeats[0]->iterations[2]->renames.begin(),
            rolled.b.module.program->repeats[0]->iterations[2]->renames.end(),
            [](const fb::BufferRename& a, const fb::BufferRename& b) {
              return a.from() < b.from();
            });
  AddChain plain(true);
  SimResult r, p;
  Status st = RunSim(rolled.b.module, rolled.inputs, &r);
  ASSERT_TRUE(st.ok()) << st.message();
  ASSERT_TRUE(RunSim(plain.b.module, plain.inputs, &p).ok());
  EXPECT_EQ(r.outputs[rolled.y], p.outputs[plain.y]);
  EXPECT_EQ(r.slow_path_calls, 1);
  EXPECT_GT(r.repeats[0].iteration_cycles[2], r.repeats[0].iteration_cycles[1]);
  // Iterations 1 and 2 each write a base register before both supersteps:
  // tile 1's send address, and tile 0's staged buffer (the program updates
  // it every iteration, though only iteration 2 moves it).
  EXPECT_EQ(r.repeats[0].iteration_cycles[1],
            r.repeats[0].iteration_cycles[0] + 2 * 13);
  // Counting cycles only, the step whose cycles differ by iteration is
  // planned again for each (Check has planned each once); the others keep
  // one plan. Both count as the run that executes.
  SimOptions cycles_only;
  cycles_only.execute = false;
  for (const AddChain* chain : {&rolled, &plain}) {
    SimResult executed, counted;
    ASSERT_TRUE(RunSim(chain->b.module, chain->inputs, &executed).ok());
    ASSERT_TRUE(RunSim(chain->b.module, {}, &counted, cycles_only).ok());
    EXPECT_EQ(counted.total_cycles, executed.total_cycles);
    EXPECT_EQ(counted.slow_path_calls, executed.slow_path_calls);
    EXPECT_EQ(counted.repeats[0].iteration_cycles,
              executed.repeats[0].iteration_cycles);
    ASSERT_EQ(counted.supersteps.size(), executed.supersteps.size());
    for (size_t i = 0; i < counted.supersteps.size(); ++i) {
      EXPECT_EQ(counted.supersteps[i].compute_cycles,
                executed.supersteps[i].compute_cycles);
    }
  }
}

}  // namespace
}  // namespace tilec::sim
