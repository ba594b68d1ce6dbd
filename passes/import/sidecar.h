// Weights that importers read from outside (ONNX initializers, safetensors
// checkpoints) go into one sidecar file next to the IR: little-endian F32,
// one contiguous range per weight, named by each Value's Sidecar with its
// offset, size and FNV-1a 64 checksum (sim/tensor_data.h reads them).

#ifndef TILEC_PASSES_IMPORT_SIDECAR_H_
#define TILEC_PASSES_IMPORT_SIDECAR_H_

#include <memory>
#include <span>
#include <string>

#include "formats/status.h"
#include "formats/tilec_generated.h"

namespace tilec::passes {

// Accumulates the sidecar's bytes.
class SidecarBuilder {
 public:
  // `recorded_path`: what every Sidecar.path holds (relative to the IR's
  // directory).
  explicit SidecarBuilder(std::string recorded_path)
      : recorded_path_(std::move(recorded_path)) {}

  // Room for `bytes` more bytes: a model's weights can be gigabytes, and
  // growing by doubling would hold up to twice that.
  void Reserve(size_t bytes) { bytes_.reserve(bytes_.size() + bytes); }

  // Appends `data` and returns the Sidecar that names it.
  std::unique_ptr<fb::SidecarT> Append(std::span<const float> data);

  const std::string& bytes() const { return bytes_; }
  std::string TakeBytes() { return std::move(bytes_); }

 private:
  std::string recorded_path_;
  std::string bytes_;
};

// Where an importer writes its sidecar and what the IR records.
struct SidecarPaths {
  std::string write;     // path to write ("" when there is nothing to name)
  std::string recorded;  // Sidecar.path: relative to the IR's directory
};

// `ir_path` is the tool's -o; `flag` its --sidecar (may be empty). An empty
// flag means "<ir_path>.weights"; with -o - (stdout) and no flag there is no
// path (`write` empty): WriteSidecar then refuses a sidecar that has bytes.
// The IR records the sidecar's plain file name, which readers resolve in the
// IR's directory (or --sidecar_dir, default "." for stdin), so a given path
// must lie in -o's directory: BadInput otherwise.
Status ResolveSidecarPaths(const std::string& ir_path, const std::string& flag,
                           SidecarPaths* paths);

// Writes the importer's two outputs together (ir::WriteFilesTogether): the
// IR is verified first, then the IR and `bytes` (the sidecar, when it has
// any: no Weight names the file otherwise) are renamed into place only when
// both are complete, so a failure leaves an earlier pair untouched. BadInput
// asking for --sidecar when there are bytes but no path.
Status WriteModuleAndSidecar(const fb::ModuleT& module,
                             const std::string& producer,
                             const std::string& ir_path,
                             const SidecarPaths& paths,
                             const std::string& bytes);

}  // namespace tilec::passes

#endif  // TILEC_PASSES_IMPORT_SIDECAR_H_
