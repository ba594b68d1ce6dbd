#ifndef TILEC_FORMATS_IR_H_
#define TILEC_FORMATS_IR_H_

// The IR library: read (path or "-"), verify, migrate and write (atomically)
// tilec modules, and load target descriptions. Every failure is a Status
// whose message is one line naming the file and the problem.

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "formats/status.h"
#include "formats/tilec_generated.h"

namespace tilec::ir {

// The version this build writes. Bump it for every semantic change and add a
// migration step to MigrateModule in verify.cc (formats/README.md).
inline constexpr uint32_t kSchemaVersion = 3;
inline constexpr uint32_t kOldestReadableVersion = 1;
inline constexpr char kFileIdentifier[] = "TLC1";

// The most any input may hold: FlatBuffers buffers stop at 2 GiB.
inline constexpr size_t kMaxInputBytes = size_t{2} << 30;

// "-" means stdin / stdout (formats/file_io.cc). A directory or socket is
// refused by name, and so is an input longer than `max_bytes` (read no
// further, so /dev/zero cannot exhaust memory).
Status ReadFile(const std::string& path, std::string* bytes,
                size_t max_bytes = kMaxInputBytes);
// A regular file mapped read-only, for the inputs of hundreds of MB (a
// device program) that a tool parses once: no copy into the heap and no
// fresh pages for it (formats/README.md, "Files"). tilec's tools replace a
// file by renaming a new one over it, so a mapping keeps the version it
// opened. A file shortened in place by another program while mapped ends
// the tool with exit 2 and one line naming it (its bytes are gone); one
// changed in place is as undefined as for any reader of a file being
// rewritten. One mapping at a time has that guard (each tool maps its
// inputs one after another).
class MappedFile {
 public:
  // `path` mapped, or nullopt where it is "-", not a regular file, empty,
  // larger than kMaxInputBytes or not mappable: read it with ReadFile,
  // which also gives the message for what it refuses.
  static std::optional<MappedFile> Open(const std::string& path);
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&&) = delete;
  MappedFile(const MappedFile&) = delete;
  ~MappedFile();
  std::string_view bytes() const { return {data_, size_}; }

 private:
  MappedFile() = default;
  const char* data_ = nullptr;
  size_t size_ = 0;
};
// For readers that seek within a file instead of reading it whole
// (sidecars, safetensors, ONNX external data): a regular file, or the same
// one-line refusal ReadFile gives a directory, socket, device or FIFO.
Status RequireRegularFile(const std::string& path);
// A file that an untrusted input names (ONNX external data, an IR's
// sidecar) must stay inside the directory it is resolved in: `relative` is
// not absolute, and `dir`/`relative` resolves, after every symlink, to a
// regular file inside `dir` (itself resolved). `*resolved` is that file's
// canonical path. `what` opens the message ("initializer 'w': external
// data"); the message names the path as given, never what lies outside.
Status ResolveInside(const std::string& dir, const std::string& relative,
                     const std::string& what, std::string* resolved);
// A plain file name: not empty, no '/', not "." or "..", no NUL.
bool IsPlainFileName(const std::string& name);
// A regular file or a new path: written to TempPathFor(path), then renamed
// over it, so a failed or interrupted (SIGINT, SIGTERM) run never leaves a
// truncated file. A symlink: its final target is replaced, the link stays.
// A character device or FIFO (/dev/null, a pipe): written in place, never
// replaced. Anything else (a directory, a socket, a block device) is refused.
// "-" writes stdout.
Status WriteFileAtomically(const std::string& path, std::string_view bytes);
// Outputs that belong together (an IR and its sidecar): every regular file
// or new path is written to its temporary first, and they are renamed only
// once all are complete, so a failure replaces none of them. Devices, FIFOs
// and "-" are written after the renames. `bytes` must outlive the call.
struct FileToWrite {
  std::string path;
  std::string_view bytes;
};
Status WriteFilesTogether(const std::vector<FileToWrite>& files);
// PATH.tilec-tmp.PID: only SIGKILL can leave one behind.
std::string TempPathFor(const std::string& path);

// The regular-file half of WriteFileAtomically, in steps: Create opens
// TempPathFor(path), Commit renames it over `path`. Until then SIGINT,
// SIGTERM, SIGHUP or SIGPIPE, an error or destruction removes it.
class PendingFile {
 public:
  PendingFile() = default;
  PendingFile(const PendingFile&) = delete;
  PendingFile& operator=(const PendingFile&) = delete;
  ~PendingFile() { Abandon(); }

  // `keep_mode`: the mode of the file being replaced; without it a new
  // file gets 0666 less the umask.
  static Status Create(const std::string& path,
                       std::optional<mode_t> keep_mode, PendingFile* file);
  Status Append(std::string_view bytes);
  Status Commit();
  void Abandon();

 private:
  int fd_ = -1;
  int slot_ = 0;  // of the signal handler's list of pending temporaries
  std::string path_;
  std::string temp_;
  std::optional<mode_t> keep_mode_;
};

// `text` with every byte outside printable ASCII written as \xNN, so that a
// message quoting corrupted input or a hostile file name stays one line.
std::string EscapeForMessage(std::string_view text);

// Identifier, FlatBuffers verifier, schema version (older versions are
// migrated, newer ones refused), then the structural checks of VerifyModule.
// `name` is used in messages (a path, or "<stdin>").
Status ParseModule(std::string_view bytes, const std::string& name,
                   fb::ModuleT* module);
Status ReadModule(const std::string& path, fb::ModuleT* module);

// The most elements one value may have (2^31): far beyond any activation or
// weight of the models tilec compiles (so400m's largest is 5M), and small
// enough that a host tool can hold it.
inline constexpr int64_t kMaxValueElements = int64_t{1} << 31;

// Structural checks: unique ids, operands defined before use, results
// defined once, shapes consistent with op kinds, ownerships well formed,
// every attribute in its domain (LayerNorm eps > 0, known enums, finite
// scales), the module's target valid (ValidateTarget), every value at most
// kMaxValueElements elements. kInfeasible (exit 3) for a well-formed value
// larger than the target's whole tensor memory.
Status VerifyModule(const fb::ModuleT& module);

// A deep copy of `module`.
std::unique_ptr<fb::ModuleT> CloneModule(const fb::ModuleT& module);

// Stamps the schema version and producer, verifies, serializes.
Status SerializeModule(fb::ModuleT module, const std::string& producer,
                       std::string* bytes);
// SerializeModule to `path` (WriteFileAtomically), the same bytes. `module`
// is freed as it is serialized (its device program superstep by
// superstep) and the bytes are written from the builder, so a caller that
// moves its module in never holds the program twice (a device program is
// hundreds of MB).
Status WriteModule(fb::ModuleT module, const std::string& producer,
                   const std::string& path);

// JSON through the schema (the same field names as tilec.fbs).
Status ModuleToJson(const std::string& bytes, std::string* json);
Status ModuleFromJson(const std::string& json, const std::string& name,
                      std::string* bytes);

// A preset name ("ipu21", "tiny") or a path to a JSON file in the Target
// table's form.
Status LoadTarget(const std::string& name_or_path, fb::TargetT* target);
Status ParseTargetJson(const std::string& json, const std::string& name,
                       fb::TargetT* target);

// The schema text built into the binary.
const char* SchemaText();

// Upgrades a module read from an older schema version in place.
Status MigrateModule(uint32_t from_version, fb::ModuleT* module);

std::string DisplayName(const std::string& path);
// The directory files named relative to `path` live in (sidecars, ONNX
// external data): the directory of the file `path` names after its
// symlinks, so that a link to a model finds the model's own neighbours;
// "." for stdin ("-") or a bare file name that is no link.
std::string DirectoryOf(const std::string& path);

}  // namespace tilec::ir

#endif  // TILEC_FORMATS_IR_H_
