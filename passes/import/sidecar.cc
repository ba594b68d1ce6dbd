#include "passes/import/sidecar.h"

#include <cstring>
#include <filesystem>

#include "formats/basics.h"
#include "formats/ir.h"

namespace tilec::passes {

std::unique_ptr<fb::SidecarT> SidecarBuilder::Append(
    std::span<const float> data) {
  const size_t offset = bytes_.size();
  const size_t size = data.size() * sizeof(float);
  bytes_.resize(offset + size);
  // Little-endian F32 is the host's float layout on every target tilec
  // builds for (x86-64, aarch64).
  if (size > 0) std::memcpy(bytes_.data() + offset, data.data(), size);
  auto sidecar = std::make_unique<fb::SidecarT>();
  sidecar->path = recorded_path_;
  sidecar->offset = offset;
  sidecar->bytes = size;
  sidecar->fnv1a64 =
      ir::Fnv1a64(std::string_view(bytes_.data() + offset, size));
  return sidecar;
}

Status ResolveSidecarPaths(const std::string& ir_path, const std::string& flag,
                           SidecarPaths* paths) {
  namespace fs = std::filesystem;
  if (ir_path == "-") {
    paths->write = flag;
    paths->recorded = flag;
    return Status::Ok();
  }
  if (flag.empty()) {
    paths->write = ir_path + ".weights";
    paths->recorded = fs::path(paths->write).filename().string();
    return Status::Ok();
  }
  paths->write = flag;
  std::error_code error;
  const fs::path ir_dir = fs::absolute(fs::path(ir_path), error).parent_path();
  const fs::path target = fs::absolute(fs::path(flag), error);
  const fs::path relative = target.lexically_relative(ir_dir);
  paths->recorded = relative.empty() ? target.string() : relative.string();
  return Status::Ok();
}

Status WriteSidecar(const SidecarPaths& paths, const std::string& bytes) {
  if (bytes.empty()) return Status::Ok();  // no Weight names a sidecar
  if (paths.write.empty()) {
    return Status::BadInput(
        "-o -: the weights need a file of their own, "
        "name it with --sidecar=PATH");
  }
  return ir::WriteFileAtomically(paths.write, bytes);
}

}  // namespace tilec::passes
