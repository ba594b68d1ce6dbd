// What -o does to each kind of path, and what an input path may be. Every
// special file is made by the test in its own directory, never in /dev.

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <utility>

#include "formats/ir.h"

namespace tilec::ir {
namespace {

class FileIoTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* base = std::getenv("TEST_TMPDIR");
    std::string templ = std::string(base ? base : "/tmp") + "/file-io-XXXXXX";
    ASSERT_NE(mkdtemp(templ.data()), nullptr);
    dir_ = templ;
  }
  std::string Path(const std::string& name) const { return dir_ + "/" + name; }
  static std::string Contents(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream buffer;
    buffer << in.rdbuf();
    return buffer.str();
  }
  static mode_t Mode(const std::string& path) {
    struct stat info;
    EXPECT_EQ(lstat(path.c_str(), &info), 0) << path;
    return info.st_mode;
  }
  void ExpectNoTempFiles() const {
    DIR* listing = opendir(dir_.c_str());
    ASSERT_NE(listing, nullptr);
    while (dirent* entry = readdir(listing)) {
      EXPECT_EQ(std::string(entry->d_name).find(".tilec-tmp."),
                std::string::npos)
          << "temp file left: " << entry->d_name;
    }
    closedir(listing);
  }
  std::string dir_;
};

TEST_F(FileIoTest, NewPathAndRegularFileAreReplacedWhole) {
  const std::string path = Path("out.txt");
  ASSERT_TRUE(WriteFileAtomically(path, "first").ok());
  EXPECT_EQ(Contents(path), "first");
  ASSERT_EQ(chmod(path.c_str(), 0640), 0);
  ASSERT_TRUE(WriteFileAtomically(path, "second").ok());
  EXPECT_EQ(Contents(path), "second");
  EXPECT_EQ(Mode(path) & 07777, 0640u) << "a replaced file keeps its mode";
  ExpectNoTempFiles();
}

TEST_F(FileIoTest, SymlinkTargetIsReplacedAndTheLinkStays) {
  const std::string target = Path("target.txt");
  const std::string link = Path("link.txt");
  ASSERT_TRUE(WriteFileAtomically(target, "old").ok());
  ASSERT_EQ(symlink("target.txt", link.c_str()), 0);
  ASSERT_TRUE(WriteFileAtomically(link, "new").ok());
  EXPECT_TRUE(S_ISLNK(Mode(link)));
  EXPECT_EQ(Contents(target), "new");

  // A dangling link creates its target.
  const std::string dangling = Path("dangling.txt");
  ASSERT_EQ(symlink("made.txt", dangling.c_str()), 0);
  ASSERT_TRUE(WriteFileAtomically(dangling, "made").ok());
  EXPECT_TRUE(S_ISLNK(Mode(dangling)));
  EXPECT_EQ(Contents(Path("made.txt")), "made");

  // A loop is refused by name.
  ASSERT_EQ(symlink("loop-b", Path("loop-a").c_str()), 0);
  ASSERT_EQ(symlink("loop-a", Path("loop-b").c_str()), 0);
  Status loop = WriteFileAtomically(Path("loop-a"), "x");
  EXPECT_EQ(loop.code(), StatusCode::kBadInput);
  EXPECT_NE(loop.message().find("symbolic links"), std::string::npos);
  ExpectNoTempFiles();
}

TEST_F(FileIoTest, FifoIsWrittenInPlace) {
  const std::string fifo = Path("pipe");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  std::string received;
  std::thread reader([&] { received = Contents(fifo); });
  Status status = WriteFileAtomically(fifo, "through the pipe");
  reader.join();
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_EQ(received, "through the pipe");
  EXPECT_TRUE(S_ISFIFO(Mode(fifo)));
  ExpectNoTempFiles();
}

TEST_F(FileIoTest, CharacterDeviceIsWrittenInPlace) {
  if (geteuid() != 0) {
    GTEST_SKIP() << "mknod needs root: the character-device case runs only "
                    "as root (CI runs as root)";
  }
  // A private node with /dev/null's numbers, in the test's own directory.
  const std::string device = Path("null");
  ASSERT_EQ(mknod(device.c_str(), S_IFCHR | 0666, makedev(1, 3)), 0);
  Status status = WriteFileAtomically(device, "discarded");
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_TRUE(S_ISCHR(Mode(device))) << "the device was replaced by a file";
  // Through a symlink too (/dev/stdout is one).
  ASSERT_EQ(symlink("null", Path("null-link").c_str()), 0);
  ASSERT_TRUE(WriteFileAtomically(Path("null-link"), "discarded").ok());
  EXPECT_TRUE(S_ISCHR(Mode(device)));
  ExpectNoTempFiles();
}

TEST_F(FileIoTest, DirectoryAndSocketOutputsAreRefused) {
  const std::string sub = Path("sub");
  ASSERT_EQ(mkdir(sub.c_str(), 0755), 0);
  Status directory = WriteFileAtomically(sub, "x");
  EXPECT_EQ(directory.code(), StatusCode::kBadInput);
  EXPECT_NE(directory.message().find(sub + ": is a directory"),
            std::string::npos)
      << directory.message();
  EXPECT_TRUE(S_ISDIR(Mode(sub)));

  // Socket paths are limited to 108 bytes: TEST_TMPDIR is too deep.
  char socket_dir[] = "/tmp/tilec-sock-XXXXXX";
  ASSERT_NE(mkdtemp(socket_dir), nullptr);
  const std::string socket_path = std::string(socket_dir) + "/sock";
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un address = {};
  address.sun_family = AF_UNIX;
  ASSERT_LT(socket_path.size(), sizeof address.sun_path);
  std::strcpy(address.sun_path, socket_path.c_str());
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  Status socket_status = WriteFileAtomically(socket_path, "x");
  close(fd);
  EXPECT_EQ(socket_status.code(), StatusCode::kBadInput);
  EXPECT_NE(socket_status.message().find("is a socket"), std::string::npos);
  EXPECT_TRUE(S_ISSOCK(Mode(socket_path)));
  unlink(socket_path.c_str());
  rmdir(socket_dir);

  EXPECT_EQ(WriteFileAtomically(Path("missing-dir/out"), "x").code(),
            StatusCode::kBadInput);
  ExpectNoTempFiles();
}

TEST_F(FileIoTest, DirectoryInputIsRefusedByName) {
  std::string bytes;
  Status status = ReadFile(dir_, &bytes);
  EXPECT_EQ(status.code(), StatusCode::kBadInput);
  EXPECT_EQ(status.message(), dir_ + ": is a directory, not a file");
  fb::ModuleT module;
  EXPECT_EQ(ReadModule(dir_, &module).message(), status.message());
}

TEST_F(FileIoTest, InputsStopAtTheirLimit) {
  const std::string path = Path("big");
  ASSERT_TRUE(WriteFileAtomically(path, std::string(100, 'x')).ok());
  std::string bytes;
  EXPECT_TRUE(ReadFile(path, &bytes, 100).ok());
  Status status = ReadFile(path, &bytes, 99);
  EXPECT_EQ(status.code(), StatusCode::kBadInput);
  EXPECT_NE(status.message().find("more than the 99 bytes"), std::string::npos)
      << status.message();
  // A stream without a size (a FIFO, /dev/zero) stops at the limit too.
  const std::string fifo = Path("endless");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  struct sigaction ignore = {}, previous;
  ignore.sa_handler = SIG_IGN;
  sigaction(SIGPIPE, &ignore, &previous);
  std::thread writer([&] {
    int fd = open(fifo.c_str(), O_WRONLY);
    std::string block(4096, 'z');
    while (write(fd, block.data(), block.size()) > 0) {
    }
    close(fd);
  });
  status = ReadFile(fifo, &bytes, 1 << 20);
  // Unblock the writer: it gets EPIPE once the reader has closed.
  writer.join();
  sigaction(SIGPIPE, &previous, nullptr);
  EXPECT_EQ(status.code(), StatusCode::kBadInput);
  EXPECT_TRUE(bytes.empty());
}

// SIGTERM between the first byte and the rename leaves neither the temp
// file nor a partial output, and the process still dies of the signal.
TEST_F(FileIoTest, TerminationRemovesThePendingTempFile) {
  const std::string path = Path("interrupted.tilec");
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    PendingFile file;
    if (!PendingFile::Create(path, std::nullopt, &file).ok()) _exit(10);
    if (!file.Append("half of a module").ok()) _exit(11);
    raise(SIGTERM);
    _exit(12);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status)) << "exit " << WEXITSTATUS(status);
  EXPECT_EQ(WTERMSIG(status), SIGTERM);
  struct stat info;
  EXPECT_NE(stat(path.c_str(), &info), 0);
  EXPECT_NE(stat(TempPathFor(path).c_str(), &info), 0)
      << "temp file left behind";
}

// MappedFile maps what ReadFile reads whole and leaves the rest to it.
TEST_F(FileIoTest, RegularFilesAreMappedAndOtherInputsAreNot) {
  const std::string path = Path("module.tilec");
  const std::string bytes = std::string(100000, 'x') + "end";
  ASSERT_TRUE(WriteFileAtomically(path, bytes).ok());
  std::optional<MappedFile> mapped = MappedFile::Open(path);
  ASSERT_TRUE(mapped.has_value());
  EXPECT_EQ(mapped->bytes(), bytes);
  // Moved, it still maps the file; the moved-from one maps nothing.
  MappedFile moved(std::move(*mapped));
  EXPECT_EQ(moved.bytes(), bytes);
  EXPECT_TRUE(mapped->bytes().empty());

  ASSERT_TRUE(WriteFileAtomically(Path("empty.tilec"), "").ok());
  EXPECT_FALSE(MappedFile::Open(Path("empty.tilec")).has_value());
  EXPECT_FALSE(MappedFile::Open(dir_).has_value());
  EXPECT_FALSE(MappedFile::Open(Path("missing.tilec")).has_value());
  EXPECT_FALSE(MappedFile::Open("-").has_value());
}

// A file shortened in place under a mapping: reading past its new end
// ends the process with exit 2 and one line naming the file, not a crash,
// and removes the output it had begun.
TEST_F(FileIoTest, AMappedFileShortenedInPlaceEndsTheToolAsBadInput) {
  const std::string path = Path("shrinking.tilec");
  const std::string output = Path("out.tilec");
  ASSERT_TRUE(WriteFileAtomically(path, std::string(1 << 16, 'x')).ok());
  EXPECT_EXIT(
      {
        std::optional<MappedFile> mapped = MappedFile::Open(path);
        if (!mapped) _exit(10);
        PendingFile out;
        if (!PendingFile::Create(output, std::nullopt, &out).ok()) _exit(11);
        if (truncate(path.c_str(), 0) != 0) _exit(12);
        volatile char last = mapped->bytes().back();
        (void)last;
        _exit(13);
      },
      ::testing::ExitedWithCode(2),
      "shrinking.tilec: changed while being read \\(shortened by another "
      "program\\)");
  struct stat info;
  EXPECT_NE(stat(TempPathFor(output).c_str(), &info), 0)
      << "temp file left behind";
}

}  // namespace
}  // namespace tilec::ir
