// How aggregate (results/aggregate.cpp) reads cell files with two processes: the stamps
// that tell a changed file, memory shared with forked children, the child processes
// themselves, pass 1's checksum verifier, and pass 2's row states and trajectory buffers
// (in shared memory: a forked reader fills some of their rows).
#pragma once

#include <sys/mman.h>
#include <sys/types.h>
#include <sys/wait.h>

#include <cerrno>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "results/h5.h"
#include "results/table.h"

namespace attnsweep::aggregation {

// File size and modification time in ns (the index's key), and inode.
bool file_stamp(const std::string& path, int64_t& size, int64_t& mtime_ns, uint64_t* ino = nullptr);

// A fixed-size array in memory shared with the children forked after it is made
// (MAP_SHARED | MAP_ANONYMOUS): what a forked reader writes into it, its parent sees.
// Zero-filled; move-only.
template <class T>
class SharedArray {
 public:
  SharedArray() = default;
  explicit SharedArray(size_t n) : n_(n) {
    if (n == 0) return;
    void* p = ::mmap(nullptr, n * sizeof(T), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
      throw std::runtime_error("cannot map " + std::to_string(n * sizeof(T)) + " bytes of shared memory (" +
                               std::strerror(errno) + ")");
    p_ = static_cast<T*>(p);
  }
  ~SharedArray() {
    if (p_ != nullptr) ::munmap(p_, n_ * sizeof(T));
  }
  SharedArray(SharedArray&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  SharedArray& operator=(SharedArray&& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(n_, o.n_);
    return *this;
  }
  SharedArray(const SharedArray&) = delete;
  SharedArray& operator=(const SharedArray&) = delete;

  T* data() const { return p_; }
  T& operator[](size_t i) const { return p_[i]; }

 private:
  T* p_ = nullptr;
  size_t n_ = 0;
};

// CPUs this process may run on (its affinity mask follows taskset and cgroup cpusets).
int cpu_count();

// A forked child (pass 1's checksum verifier, a pass-2 reader) or none, waited for
// exactly once: by wait(), or, when it is no longer needed (an exception, pass 1 done),
// killed and reaped by the destructor. Move-only.
class Reader {
 public:
  Reader() = default;
  explicit Reader(pid_t pid) : pid_(pid) {}
  ~Reader() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    wait();
  }
  Reader(Reader&& o) noexcept : pid_(std::exchange(o.pid_, -1)) {}
  Reader& operator=(Reader&& o) noexcept {
    std::swap(pid_, o.pid_);
    return *this;
  }
  Reader(const Reader&) = delete;
  Reader& operator=(const Reader&) = delete;

  bool running() const { return pid_ > 0; }
  // True when the child exited with status 0 (it did all it took on).
  bool wait() {
    int status = 0;
    pid_t got;
    while ((got = ::waitpid(pid_, &status, 0)) < 0 && errno == EINTR) {
    }
    pid_ = -1;
    return got > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }

 private:
  pid_t pid_ = -1;
};

// A file whose checksum pass 1's forked child found holding, and the file's stamp then.
struct Verified {
  unsigned char ok;  // stored last (release): the fields below are set
  uint64_t ino;
  int64_t size, mtime_ns;
};

// Pass 1's forked child: verifies the checksums of files[todo[0]], files[todo[1]], ...
// ahead of pass 1, skipping those that pass 1 has reached (the files before passed[0]),
// and marks those that hold in `verified`. Reads files only (no libhdf5); never returns.
[[noreturn]] void verify_ahead(const std::vector<std::string>& files, const std::vector<size_t>& todo,
                               const SharedArray<Verified>& verified, const SharedArray<uint64_t>& passed,
                               int test_reader);

// What became of each changed row of a block that a forked reader helps read.
constexpr unsigned char kRowPending = 0;  // not claimed yet, or claimed by a child that died reading it
constexpr unsigned char kRowRead = 1;     // read by the child
constexpr unsigned char kRowFailed = 2;   // the child could not read it
constexpr unsigned char kRowParent = 3;   // claimed (and read) by the parent

// One /trajectories dataset while it is written: a block of rows in memory at a time.
struct OutTrajectory {
  std::string name;
  std::vector<uint64_t> row_shape;  // [T] or [T, L, H]
  uint64_t row_elems = 0;
  bool f32 = false;  // float32 ([cells, T, L, H]) or float64 ([cells, T])
  std::optional<h5::Dataset> dst;
  std::optional<h5::Dataset> old;  // the same dataset of the previous aggregate.h5, same rank
  std::vector<uint64_t> old_row_shape;
  // The buffer [buffer_rows, row_shape...] of two blocks (one is filled while the other
  // is written), NaN where nothing is read: in shared memory, since a forked reader fills
  // some of its rows (pass 2). Rows below are the buffer's.
  uint64_t buffer_rows = 0;
  SharedArray<double> d;
  SharedArray<float> f;

  void allocate(uint64_t rows) {
    buffer_rows = rows;
    if (f32)
      f = SharedArray<float>(rows * row_elems);
    else
      d = SharedArray<double>(rows * row_elems);
  }
  void fill_rows(uint64_t from, uint64_t to) {
    if (f32)
      std::fill(f.data() + from * row_elems, f.data() + to * row_elems, std::numeric_limits<float>::quiet_NaN());
    else
      std::fill(d.data() + from * row_elems, d.data() + to * row_elems, kNaN);
  }
  // Reads `count` of `src` at `offset` into the buffer, from row `row` on (the rest
  // stays NaN): a cell file's dataset (rank of a row) into that row, or a run of rows
  // of the previous aggregate (rank of a row + 1) into as many rows.
  template <class T>
  void read_into(const SharedArray<T>& buf, const h5::Dataset& src, const std::vector<uint64_t>& offset,
                 const std::vector<uint64_t>& count, uint64_t row) {
    if (count.size() == row_shape.size()) {
      src.read_block_into<T>(offset, count, std::span<T>(buf.data() + row * row_elems, row_elems), row_shape,
                             std::vector<uint64_t>(count.size(), 0));
      return;
    }
    std::vector<uint64_t> mem_shape{buffer_rows}, mem_offset(count.size(), 0);
    mem_shape.insert(mem_shape.end(), row_shape.begin(), row_shape.end());
    mem_offset[0] = row;
    src.read_block_into<T>(offset, count, std::span<T>(buf.data(), buffer_rows * row_elems), mem_shape, mem_offset);
  }
  void read_into(const h5::Dataset& src, const std::vector<uint64_t>& offset, const std::vector<uint64_t>& count,
                 uint64_t row) {
    if (f32)
      read_into(f, src, offset, count, row);
    else
      read_into(d, src, offset, count, row);
  }
  // Writes `rows` rows of the buffer from row `from` on as rows first_row... of the dataset.
  void write(uint64_t first_row, uint64_t rows, uint64_t from) {
    std::vector<uint64_t> offset(row_shape.size() + 1, 0), count{rows};
    offset[0] = first_row;
    count.insert(count.end(), row_shape.begin(), row_shape.end());
    if (f32)
      dst->write_block<float>(offset, count, std::span<const float>(f.data() + from * row_elems, rows * row_elems));
    else
      dst->write_block<double>(offset, count, std::span<const double>(d.data() + from * row_elems, rows * row_elems));
  }
};

}  // namespace attnsweep::aggregation
