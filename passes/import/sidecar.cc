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
  if (flag.empty()) {
    if (ir_path == "-") return Status::Ok();  // nowhere to put weights
    paths->write = ir_path + ".weights";
    paths->recorded = fs::path(paths->write).filename().string();
    return Status::Ok();
  }
  paths->write = flag;
  paths->recorded = fs::path(flag).filename().string();
  if (!ir::IsPlainFileName(paths->recorded)) {
    return Status::BadInput("--sidecar=" + flag + ": names no file");
  }
  if (ir_path == "-") return Status::Ok();  // readers take --sidecar_dir
  // An IR names its sidecar by file name only (readers never follow a path
  // out of the IR's directory), so the two must share a directory.
  std::error_code error;
  const fs::path ir_dir =
      fs::weakly_canonical(fs::absolute(ir_path).parent_path(), error);
  const fs::path sidecar_dir =
      fs::weakly_canonical(fs::absolute(flag).parent_path(), error);
  if (ir_dir != sidecar_dir) {
    return Status::BadInput("--sidecar=" + flag +
                            ": must be in the directory of -o " + ir_path +
                            " (the IR names its sidecar by file name only)");
  }
  return Status::Ok();
}

Status WriteModuleAndSidecar(const fb::ModuleT& module,
                             const std::string& producer,
                             const std::string& ir_path,
                             const SidecarPaths& paths,
                             const std::string& bytes) {
  if (!bytes.empty() && paths.write.empty()) {
    return Status::BadInput(
        "-o -: the weights need a file of their own, "
        "name it with --sidecar=PATH");
  }
  std::string ir_bytes;
  TILEC_RETURN_IF_ERROR(ir::SerializeModule(module, producer, &ir_bytes));
  std::vector<ir::FileToWrite> files;
  // The sidecar first: a device or FIFO output is written in that order.
  if (!bytes.empty()) files.push_back({paths.write, bytes});
  files.push_back({ir_path, ir_bytes});
  return ir::WriteFilesTogether(files);
}

}  // namespace tilec::passes
