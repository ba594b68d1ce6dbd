// Reading inputs and writing outputs for every tool: what kind of file a
// path names decides how it is read or written (formats/README.md, "Files").

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "formats/ir.h"

namespace tilec::ir {
namespace {

// The temporary files being written, so that SIGINT and SIGTERM can remove
// them (SIGKILL cannot be caught: such a file is named PATH.tilec-tmp.PID).
// A few slots: an IR and its sidecar are pending together.
constexpr int kPendingSlots = 4;
char pending_temp[kPendingSlots][PATH_MAX + 64];
std::atomic<bool> temp_pending[kPendingSlots];

void RemovePendingTemps() {
  for (int i = 0; i < kPendingSlots; ++i) {
    if (temp_pending[i].load()) unlink(pending_temp[i]);
  }
}

extern "C" void RemovePendingTempAndDie(int signal_number) {
  RemovePendingTemps();
  std::signal(signal_number, SIG_DFL);
  std::raise(signal_number);
}

// The bytes a MappedFile maps and the message a read of them past the
// file's end gives (SIGBUS), for the handler below. One mapping at a time.
std::atomic<uintptr_t> mapped_begin{0}, mapped_end{0};
char mapped_message[PATH_MAX + 256];

// A SIGBUS inside the mapping: the file shrank under it, which the bytes
// already read cannot survive. The tool ends like any bad input, with one
// line and exit 2, removing the outputs it had begun. Any other SIGBUS is
// not this file's.
extern "C" void ReportShrunkMappingAndDie(int signal_number, siginfo_t* info,
                                          void*) {
  const auto addr = reinterpret_cast<uintptr_t>(info->si_addr);
  if (addr >= mapped_begin.load() && addr < mapped_end.load()) {
    RemovePendingTemps();
    const ssize_t ignored =
        write(STDERR_FILENO, mapped_message, std::strlen(mapped_message));
    (void)ignored;
    _exit(static_cast<int>(StatusCode::kBadInput));
  }
  std::signal(signal_number, SIG_DFL);
  std::raise(signal_number);
}

void InstallTempCleanup() {
  static bool installed = false;
  if (installed) return;
  installed = true;
  for (int signal_number : {SIGINT, SIGTERM, SIGHUP, SIGPIPE}) {
    struct sigaction action = {};
    action.sa_handler = RemovePendingTempAndDie;
    sigemptyset(&action.sa_mask);
    sigaction(signal_number, &action, nullptr);
  }
}

std::string ErrnoText() { return std::strerror(errno); }

const char* FileKind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISFIFO(mode)) return "a FIFO";
  return "not a regular file";
}

Status WriteAll(int fd, std::string_view bytes, const std::string& path) {
  size_t written = 0;
  while (written < bytes.size()) {
    ssize_t n = write(fd, bytes.data() + written, bytes.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::BadInput(path + ": write failed: " + ErrnoText());
    }
    written += static_cast<size_t>(n);
  }
  return Status::Ok();
}

Status WriteStdout(std::string_view bytes) {
  std::cout.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  std::cout.flush();
  if (!std::cout) return Status::BadInput("<stdout>: write error");
  return Status::Ok();
}

// A symlink chain ends at the path it finally names (which may not exist
// yet): that is the file an output replaces, so the link itself survives.
Status ResolveSymlinks(const std::string& path, std::string* resolved) {
  std::string current = path;
  for (int depth = 0; depth < 40; ++depth) {
    struct stat info;
    if (lstat(current.c_str(), &info) != 0 || !S_ISLNK(info.st_mode)) {
      *resolved = current;
      return Status::Ok();
    }
    char target[PATH_MAX];
    ssize_t n = readlink(current.c_str(), target, sizeof target - 1);
    if (n < 0) {
      return Status::BadInput(path + ": cannot read symlink: " + ErrnoText());
    }
    target[n] = '\0';
    std::string next = target;
    if (next[0] != '/') {
      size_t slash = current.rfind('/');
      if (slash != std::string::npos) next = current.substr(0, slash + 1) + next;
    }
    current = next;
  }
  return Status::BadInput(path + ": too many levels of symbolic links");
}

// Devices and FIFOs are written in place: replacing them with a regular
// file would, for /dev/null as root, break every later process.
Status WriteInPlace(const std::string& path, std::string_view bytes) {
  int fd = open(path.c_str(), O_WRONLY | O_NOCTTY);
  if (fd < 0) return Status::BadInput(path + ": cannot open: " + ErrnoText());
  Status status = WriteAll(fd, bytes, path);
  if (close(fd) != 0 && status.ok()) {
    status = Status::BadInput(path + ": write failed: " + ErrnoText());
  }
  return status;
}

}  // namespace

std::string TempPathFor(const std::string& path) {
  return path + ".tilec-tmp." + std::to_string(getpid());
}

Status PendingFile::Create(const std::string& path,
                           std::optional<mode_t> keep_mode, PendingFile* file) {
  file->Abandon();
  const std::string temp = TempPathFor(path);
  if (temp.size() >= sizeof pending_temp[0]) {
    return Status::BadInput(path + ": path too long");
  }
  InstallTempCleanup();
  int slot = 0;
  while (slot < kPendingSlots && temp_pending[slot].load()) ++slot;
  if (slot == kPendingSlots) {
    return Status::Internal("more than " + std::to_string(kPendingSlots) +
                            " files pending at once");
  }
  std::memcpy(pending_temp[slot], temp.c_str(), temp.size() + 1);
  temp_pending[slot].store(true);
  int fd = open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_EXCL, 0666);
  if (fd < 0) {
    temp_pending[slot].store(false);
    return Status::BadInput(path + ": cannot create " + temp + ": " +
                            ErrnoText());
  }
  file->fd_ = fd;
  file->slot_ = slot;
  file->path_ = path;
  file->temp_ = temp;
  file->keep_mode_ = keep_mode;
  return Status::Ok();
}

Status PendingFile::Append(std::string_view bytes) {
  if (fd_ < 0) return Status::Internal("append to a file that is not open");
  Status status = WriteAll(fd_, bytes, path_);
  if (!status.ok()) Abandon();
  return status;
}

Status PendingFile::Commit() {
  if (fd_ < 0) return Status::Internal("commit of a file that is not open");
  const int fd = fd_;
  fd_ = -1;
  if ((keep_mode_ && fchmod(fd, *keep_mode_) != 0) || fsync(fd) != 0 ||
      close(fd) != 0 || rename(temp_.c_str(), path_.c_str()) != 0) {
    std::string message = path_ + ": cannot write: " + ErrnoText();
    unlink(temp_.c_str());
    temp_pending[slot_].store(false);
    return Status::BadInput(message);
  }
  temp_pending[slot_].store(false);
  return Status::Ok();
}

void PendingFile::Abandon() {
  if (fd_ < 0) return;
  close(fd_);
  fd_ = -1;
  unlink(temp_.c_str());
  temp_pending[slot_].store(false);
}

Status ReadFile(const std::string& path, std::string* bytes, size_t max_bytes) {
  const bool is_stdin = path == "-";
  const std::string name = DisplayName(path);
  int fd = is_stdin ? STDIN_FILENO : open(path.c_str(), O_RDONLY | O_NOCTTY);
  if (fd < 0) return Status::BadInput(path + ": cannot open: " + ErrnoText());
  struct stat info;
  if (fstat(fd, &info) != 0) {
    std::string error = ErrnoText();
    if (!is_stdin) close(fd);
    return Status::BadInput(name + ": cannot read: " + error);
  }
  if (S_ISDIR(info.st_mode) || S_ISSOCK(info.st_mode)) {
    if (!is_stdin) close(fd);
    return Status::BadInput(name + ": is " + FileKind(info.st_mode) +
                            ", not a file");
  }
  if (S_ISREG(info.st_mode) && static_cast<uint64_t>(info.st_size) > max_bytes) {
    if (!is_stdin) close(fd);
    return Status::BadInput(name + ": " + std::to_string(info.st_size) +
                            " bytes is more than the " +
                            std::to_string(max_bytes) + " bytes this input may have");
  }
  bytes->clear();
  char chunk[1 << 16];
  Status status;
  for (;;) {
    ssize_t n = read(fd, chunk, sizeof chunk);
    if (n < 0) {
      if (errno == EINTR) continue;
      status = Status::BadInput(name + ": read error: " + ErrnoText());
      break;
    }
    if (n == 0) break;
    if (bytes->size() + static_cast<size_t>(n) > max_bytes) {
      status = Status::BadInput(name + ": more than the " +
                                std::to_string(max_bytes) +
                                " bytes this input may have");
      break;
    }
    bytes->append(chunk, static_cast<size_t>(n));
  }
  if (!is_stdin) close(fd);
  if (!status.ok()) bytes->clear();
  return status;
}

namespace {

// `path` mapped read-only with its size, or null where it is no regular,
// non-empty file within kMaxInputBytes or cannot be mapped.
const char* MapRegularFile(const std::string& path, size_t* size) {
  if (path == "-") return nullptr;
  const int fd = open(path.c_str(), O_RDONLY | O_NOCTTY);
  if (fd < 0) return nullptr;
  struct stat info;
  void* map = MAP_FAILED;
  if (fstat(fd, &info) == 0 && S_ISREG(info.st_mode) && info.st_size > 0 &&
      static_cast<uint64_t>(info.st_size) <= kMaxInputBytes) {
    *size = static_cast<size_t>(info.st_size);
    map = mmap(nullptr, *size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
  }
  close(fd);
  return map == MAP_FAILED ? nullptr : static_cast<const char*>(map);
}

// Points ReportShrunkMappingAndDie at [data, data + size), the mapping of
// `path`, installing it the first time.
void GuardMapping(const std::string& path, const char* data, size_t size) {
  static const bool installed = [] {
    struct sigaction action = {};
    action.sa_sigaction = ReportShrunkMappingAndDie;
    action.sa_flags = SA_SIGINFO;
    sigemptyset(&action.sa_mask);
    return sigaction(SIGBUS, &action, nullptr) == 0;
  }();
  (void)installed;
  const std::string message =
      std::string(program_invocation_short_name) + ": " +
      EscapeForMessage(DisplayName(path)) +
      ": changed while being read (shortened by another program)\n";
  mapped_end.store(0);
  std::snprintf(mapped_message, sizeof mapped_message, "%s", message.c_str());
  mapped_begin.store(reinterpret_cast<uintptr_t>(data));
  mapped_end.store(reinterpret_cast<uintptr_t>(data) + size);
}

}  // namespace

std::optional<MappedFile> MappedFile::Open(const std::string& path) {
  MappedFile file;
  file.data_ = MapRegularFile(path, &file.size_);
  if (file.data_ == nullptr) return std::nullopt;
  GuardMapping(path, file.data_, file.size_);
  return file;
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

MappedFile::~MappedFile() {
  if (data_ == nullptr) return;
  if (mapped_begin.load() == reinterpret_cast<uintptr_t>(data_)) {
    mapped_begin.store(0);
    mapped_end.store(0);
  }
  munmap(const_cast<char*>(data_), size_);
}

Status RequireRegularFile(const std::string& path) {
  struct stat info;
  if (stat(path.c_str(), &info) != 0) {
    return Status::BadInput(path + ": cannot open: " + ErrnoText());
  }
  if (!S_ISREG(info.st_mode)) {
    return Status::BadInput(path + ": is " + FileKind(info.st_mode) +
                            ", not a regular file");
  }
  return Status::Ok();
}

bool IsPlainFileName(const std::string& name) {
  return !name.empty() && name != "." && name != ".." &&
         name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

Status ResolveInside(const std::string& dir, const std::string& relative,
                     const std::string& what, std::string* resolved) {
  const std::string named = "'" + relative + "'";
  if (relative.empty() || relative.find('\0') != std::string::npos) {
    return Status::BadInput(what + ": an empty or malformed path");
  }
  if (relative[0] == '/') {
    return Status::BadInput(what + " " + named +
                            " is an absolute path; only files inside " + dir +
                            " are read");
  }
  char* real_dir = realpath(dir.c_str(), nullptr);
  if (real_dir == nullptr) {
    return Status::BadInput(what + ": cannot resolve the directory " + dir +
                            ": " + ErrnoText());
  }
  std::string inside = real_dir;
  free(real_dir);
  if (inside.back() != '/') inside += '/';
  char* real_file = realpath((dir + "/" + relative).c_str(), nullptr);
  if (real_file == nullptr) {
    return Status::BadInput(what + " " + named + ": cannot open: " +
                            ErrnoText());
  }
  *resolved = real_file;
  free(real_file);
  if (resolved->compare(0, inside.size(), inside) != 0) {
    return Status::BadInput(what + " " + named + " lies outside " + dir +
                            " (after '..' and symlinks); only files inside "
                            "it are read");
  }
  struct stat info;
  if (stat(resolved->c_str(), &info) != 0 || !S_ISREG(info.st_mode)) {
    return Status::BadInput(what + " " + named + " is not a regular file");
  }
  return Status::Ok();
}

Status WriteFileAtomically(const std::string& path, std::string_view bytes) {
  return WriteFilesTogether({{path, bytes}});
}

Status WriteFilesTogether(const std::vector<FileToWrite>& files) {
  std::vector<std::unique_ptr<PendingFile>> pending;
  // Written after the renames: stdout, devices and FIFOs (in place).
  std::vector<std::pair<std::string, std::string_view>> in_place;
  bool to_stdout = false;
  std::string_view stdout_bytes;
  for (const FileToWrite& file : files) {
    const std::string& path = file.path;
    if (path == "-") {
      to_stdout = true;
      stdout_bytes = file.bytes;
      continue;
    }
    if (path.empty()) return Status::BadInput("-o: empty output path");
    std::string target;
    TILEC_RETURN_IF_ERROR(ResolveSymlinks(path, &target));
    struct stat info;
    std::optional<mode_t> keep_mode;
    if (stat(target.c_str(), &info) != 0) {
      if (errno != ENOENT) {
        return Status::BadInput(path + ": cannot write: " + ErrnoText());
      }
    } else if (S_ISREG(info.st_mode)) {
      keep_mode = info.st_mode & 07777;
    } else if (S_ISCHR(info.st_mode) || S_ISFIFO(info.st_mode)) {
      in_place.emplace_back(target, file.bytes);
      continue;
    } else {
      return Status::BadInput(path + ": is " + FileKind(info.st_mode) +
                              "; an output must be a regular file, a new "
                              "path, a character device or a FIFO");
    }
    pending.push_back(std::make_unique<PendingFile>());
    TILEC_RETURN_IF_ERROR(
        PendingFile::Create(target, keep_mode, pending.back().get()));
    TILEC_RETURN_IF_ERROR(pending.back()->Append(file.bytes));
  }
  for (auto& file : pending) TILEC_RETURN_IF_ERROR(file->Commit());
  for (const auto& [target, bytes] : in_place) {
    TILEC_RETURN_IF_ERROR(WriteInPlace(target, bytes));
  }
  if (to_stdout) return WriteStdout(stdout_bytes);
  return Status::Ok();
}

}  // namespace tilec::ir
