// libFuzzer target: a per-cell result file of arbitrary bytes (a truncated or corrupt
// HDF5 file under runs/), with and without a valid checksum header. read_cell_summary may throw std::runtime_error;
// cell_file_valid and read_valid_cell_summary never throw. Anything else (another exception, a crash, a sanitizer
// report) is a bug. Note: libhdf5 itself is not instrumented, so ASan sees only what it does through our code and the
// allocator.
#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <stdexcept>
#include <string>

#include "results/cell_file.h"

namespace {

std::string temp_path() {
  const char* dir = std::getenv("TMPDIR");
  return std::string(dir && *dir ? dir : "/tmp") + "/attnsweep_fuzz_" + std::to_string(getpid()) + ".h5";
}

void write_all(const std::string& path, const uint8_t* data, size_t size) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) std::abort();
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n <= 0) std::abort();
    data += n, size -= static_cast<size_t>(n);
  }
  ::close(fd);
}

// One file through the three readers.
void check(const std::string& path) {
  try {
    std::string why;
    (void)attnsweep::cell_file_valid(path, "0123456789abcdef", &why);
    (void)attnsweep::read_valid_cell_summary(path, "", &why);
  } catch (...) {
    std::fprintf(stderr, "cell_file_valid / read_valid_cell_summary threw (they must not)\n");
    std::abort();
  }
  try {
    attnsweep::CellSummary s = attnsweep::read_cell_summary(path);
    (void)s.config.dump();
  } catch (const std::runtime_error&) {
    // the expected answer to a bad file
  } catch (const std::exception& e) {
    std::fprintf(stderr, "read_cell_summary threw a non-runtime_error: %s\n", e.what());
    std::abort();
  }
}

}  // namespace

// Each input is tried twice: as the whole file (what the checksum check sees: anything
// not written by write_cell_file is rejected there), and behind a header with its correct
// checksum, so that libhdf5 and our reading of its contents see the bytes too.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = temp_path();
  write_all(path, data, size);
  check(path);
  const std::string body(reinterpret_cast<const char*>(data), size);
  const std::string file = attnsweep::cell_file_header(body) + body;
  write_all(path, reinterpret_cast<const uint8_t*>(file.data()), file.size());
  check(path);
  return 0;
}
