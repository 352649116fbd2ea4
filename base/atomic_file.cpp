#include "base/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>

namespace attnsweep {
namespace {

[[noreturn]] void throw_errno(const std::string& path, const std::string& what) {
  throw std::runtime_error(path + ": " + what + ": " + std::strerror(errno));
}

void fsync_path(const std::string& path, int flags) {
  int fd = ::open(path.c_str(), flags | O_CLOEXEC);
  if (fd < 0) throw_errno(path, "cannot open for fsync");
  if (::fsync(fd) != 0) {
    int saved = errno;
    ::close(fd);
    errno = saved;
    throw_errno(path, "fsync failed");
  }
  ::close(fd);
}

}  // namespace

std::string temp_path_for(const std::string& path) {
  return path + ".tmp." + std::to_string(::getpid());
}

void commit_file(const std::string& tmp, const std::string& path) {
  fsync_path(tmp, O_RDONLY);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) throw_errno(path, "cannot rename " + tmp + " to it");
  std::string dir = std::filesystem::path(path).parent_path().string();
  fsync_path(dir.empty() ? "." : dir, O_RDONLY | O_DIRECTORY);
}

void atomic_write_text(const std::string& path, std::string_view text, bool durable) {
  const std::string tmp = temp_path_for(path);
  TempFileGuard guard(tmp);
  auto fail = [&](const char* what) {
    throw std::runtime_error(path + ": " + what + " (" + std::strerror(errno) + ")");
  };
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("cannot write");
  size_t off = 0;
  while (off < text.size()) {
    const ssize_t n = ::write(fd, text.data() + off, text.size() - off);
    if (n < 0) {
      const int saved = errno;
      ::close(fd);
      errno = saved;
      fail("cannot write");
    }
    off += static_cast<size_t>(n);
  }
  if (::close(fd) != 0) fail("cannot write");
  if (durable)
    commit_file(tmp, path);
  else if (std::rename(tmp.c_str(), path.c_str()) != 0)
    fail("cannot rename into place");
  guard.release();
}

TempFileGuard::~TempFileGuard() {
  if (!path_.empty()) ::unlink(path_.c_str());
}

}  // namespace attnsweep
