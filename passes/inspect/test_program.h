// Hand-made device programs on the `tiny` target for the inspect tests, so
// that every expected number can be worked out by hand: 16 tiles, the
// runtime's code in standard element 0, tensor memory [16384, 81920) per
// tile: standard elements [16384, 32768) and [32768, 49152), interleaved
// memory from 49152. Buffer offsets are given from kTensorBase.

#ifndef TILEC_PASSES_INSPECT_TEST_PROGRAM_H_
#define TILEC_PASSES_INSPECT_TEST_PROGRAM_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "formats/tilec_generated.h"

namespace tilec::inspect {

inline constexpr uint32_t kTensorBase = 16384;

class TestProgram {
 public:
  TestProgram();  // the tiny target and an empty device program

  uint32_t AddValue(const std::string& name, std::vector<int64_t> shape,
                    fb::DType dtype, fb::ValueRole role);
  void AddOp(uint32_t id, fb::OpKind kind, const std::string& name);
  uint32_t AddBuffer(uint32_t tile, uint32_t offset, uint32_t bytes,
                     fb::DType dtype = fb::DType::F16);
  // Returns the new superstep's index.
  int AddStep(const std::string& label);
  // A call whose arguments are whole buffers.
  void AddCompute(int step, uint32_t tile, const std::string& kernel,
                  const std::vector<uint32_t>& buffers,
                  std::vector<int64_t> params, uint32_t op);
  // `rows` pieces of `bytes` from the start of `src_buffer`, to each
  // (tile, buffer) destination at offset 0 (pitch = bytes).
  void AddTransfer(int step, uint32_t src_tile, uint32_t src_buffer,
                   uint32_t bytes, uint32_t rows,
                   const std::vector<std::pair<uint32_t, uint32_t>>& dests,
                   uint32_t op);
  // The whole value in one buffer.
  void BindInput(uint32_t value, uint32_t tile, uint32_t buffer);
  void BindOutput(uint32_t value, uint32_t tile, uint32_t buffer);

  // The module with its exchanges scheduled and its code sized, as
  // emit-device writes them.
  fb::ModuleT Completed() const;

  fb::ModuleT module;

 private:
  fb::BufferT* Buffer(uint32_t id);
  std::unique_ptr<fb::HostBindingT> Binding(uint32_t value, uint32_t tile,
                                            uint32_t buffer);
};

}  // namespace tilec::inspect

#endif  // TILEC_PASSES_INSPECT_TEST_PROGRAM_H_
