#include "results/cell_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <span>
#include <stdexcept>

#include <zlib.h>

#include "base/atomic_file.h"
#include "results/h5.h"

#ifndef ATTNSWEEP_VERSION
#error "ATTNSWEEP_VERSION must be defined by CMake"
#endif

namespace attnsweep {
namespace {

void check_result(const std::string& path, const CellResult& r) {
  auto bad = [&](const std::string& what) { throw std::runtime_error(path + ": " + what); };
  if (r.cell_id.empty()) bad("empty cell_id");
  if (!is_final(r.status)) bad("status \"" + std::string(to_string(r.status)) + "\" is neither complete nor diverged");
  for (const ResultDataset& d : r.datasets) {
    if (d.path.size() < 2 || d.path[0] != '/' || d.path.back() == '/')
      bad("dataset path \"" + d.path + "\" must be absolute, like /train/loss");
    uint64_t n = 1;
    for (uint64_t s : d.shape) n *= s;
    size_t have = std::visit([](const auto& v) { return v.size(); }, d.data);
    if (n != have)
      bad(d.path + ": shape holds " + std::to_string(n) + " values but the data has " + std::to_string(have));
  }
}

// "PATH: reason" -> "reason"; "PATH:/obj: reason" -> "/obj: reason".
std::string without_path(const std::string& msg, const std::string& path) {
  if (msg.rfind(path, 0) != 0) return msg;
  std::string rest = msg.substr(path.size());
  if (rest.rfind(": ", 0) == 0) return rest.substr(2);
  if (rest.rfind(":", 0) == 0) return rest.substr(1);
  return msg;
}

// The first kHeaderBytes of a result file are an HDF5 user block (HDF5 skips it) that
// holds a checksum of the rest: read_cell_summary checks it before libhdf5 parses the
// file, because libhdf5 1.10 can crash (SEGV) or spin for minutes on some damaged files
// (found by tests/fuzz: tests/fuzz/known/). Format: one text line, zero-padded:
//   "attnsweep result crc32=<8 hex digits> bytes=<length of the rest>\n"
// CRC-32 (zlib's, already linked by HDF5) detects damage, not tampering.
constexpr size_t kHeaderBytes = 512;
constexpr char kHeaderTag[] = "attnsweep result crc32=";

struct Crc32 {
  uint64_t h = crc32_z(0, Z_NULL, 0);
  void add(const unsigned char* p, size_t n) { h = crc32_z(static_cast<uLong>(h), p, n); }
};

// Checksum and length of `path` from byte `from` on; false when it cannot be read.
bool checksum_from(const std::string& path, long from, uint64_t* sum, uint64_t* bytes) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return false;
  Crc32 h;
  uint64_t n = 0;
  std::array<unsigned char, 65536> buf;
  bool ok = std::fseek(f, from, SEEK_SET) == 0;
  for (size_t got; ok && (got = std::fread(buf.data(), 1, buf.size(), f)) > 0;) h.add(buf.data(), got), n += got;
  ok = ok && std::ferror(f) == 0;
  std::fclose(f);
  *sum = h.h, *bytes = n;
  return ok;
}

std::string header_text(uint64_t sum, uint64_t bytes) {
  char line[96];
  std::snprintf(line, sizeof line, "%s%08" PRIx64 " bytes=%" PRIu64 "\n", kHeaderTag, sum, bytes);
  return line;
}

// Writes the header into the user block of the closed file `path`.
void write_header(const std::string& path) {
  uint64_t sum = 0, bytes = 0;
  if (!checksum_from(path, static_cast<long>(kHeaderBytes), &sum, &bytes))
    throw std::runtime_error(path + ": cannot read back (" + std::strerror(errno) + ")");
  std::string block = header_text(sum, bytes);
  block.resize(kHeaderBytes, '\0');
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  const bool ok = fd >= 0 && ::pwrite(fd, block.data(), block.size(), 0) == static_cast<ssize_t>(block.size());
  const int err = errno;
  if (fd >= 0) ::close(fd);
  if (!ok) throw std::runtime_error(path + ": cannot write its checksum (" + std::strerror(err) + ")");
}

// Why `path` must not be given to libhdf5 ("" when its checksum holds). A missing file
// or one that is not a regular file is left to h5::File::open_read to report.
std::string damage(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return "";
  std::array<char, kHeaderBytes> head{};
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return "cannot read file (" + std::string(std::strerror(errno)) + ")";
  const size_t got = std::fread(head.data(), 1, head.size(), f);
  std::fclose(f);
  static constexpr char kHdf5Signature[] = "\x89HDF\r\n\x1a\n";
  if (got < sizeof kHeaderTag - 1 || std::memcmp(head.data(), kHeaderTag, sizeof kHeaderTag - 1) != 0) {
    if (got >= 8 && std::memcmp(head.data(), kHdf5Signature, 8) == 0)
      return "not an attnsweep result file (an HDF5 file without the checksum header of write_cell_file)";
    return "not an HDF5 file";
  }
  uint64_t want_sum = 0, want_bytes = 0;
  const std::string line(head.data(), strnlen(head.data(), head.size()));
  if (std::sscanf(line.c_str() + sizeof kHeaderTag - 1, "%8" SCNx64 " bytes=%" SCNu64, &want_sum, &want_bytes) != 2 ||
      line != header_text(want_sum, want_bytes))
    return "damaged checksum header";
  uint64_t sum = 0, bytes = 0;
  if (got < kHeaderBytes || !checksum_from(path, static_cast<long>(kHeaderBytes), &sum, &bytes))
    bytes = 0, sum = ~want_sum;
  if (bytes < want_bytes)
    return "truncated file: " + std::to_string(kHeaderBytes + bytes) + " bytes, written with " +
           std::to_string(kHeaderBytes + want_bytes);
  if (bytes != want_bytes || sum != want_sum)
    return "checksum mismatch: the file changed after it was written (damaged, or appended to)";
  return "";
}

}  // namespace

std::string cell_file_header(const std::string& body) {
  Crc32 h;
  h.add(reinterpret_cast<const unsigned char*>(body.data()), body.size());
  std::string block = header_text(h.h, body.size());
  block.resize(kHeaderBytes, '\0');
  return block;
}

void write_cell_file(const std::string& path, const CellResult& r) {
  check_result(path, r);
  const std::string tmp = temp_path_for(path);
  TempFileGuard guard(tmp);
  {
    h5::File f = h5::File::create(tmp, kHeaderBytes);
    f.set_attribute_string("cell_id", r.cell_id);
    f.set_attribute_string("config", r.config.dump());  // std::map-ordered keys: canonical
    f.set_attribute_string("status", std::string(to_string(r.status)));
    f.set_attribute_int64("diverged_at_step", r.diverged_at_step);
    f.set_attribute_string("attnsweep_version", ATTNSWEEP_VERSION);
    f.set_attribute_string("device", r.device);
    f.set_attribute_double("wall_seconds", r.wall_seconds);
    f.set_attribute_string("started", r.started);
    f.set_attribute_string("finished", r.finished);
    f.set_attribute_int64("attempts", r.attempts);
    f.set_attribute_string("last_attempt_started", r.last_attempt_started);
    f.set_attribute_double("last_attempt_wall_seconds", r.last_attempt_wall_seconds);
    for (const auto& [name, value] : r.provenance) f.set_attribute_string(name, value);
    {
      h5::Group final_group = f.require_group("/final");
      for (const auto& [name, value] : r.final_metrics) final_group.set_attribute_double(name, value);
    }
    for (const ResultDataset& d : r.datasets) {
      std::visit(
          [&](const auto& v) {
            using T = typename std::decay_t<decltype(v)>::value_type;
            f.write_dataset<T>(d.path, d.shape, std::span<const T>(v), d.description);
          },
          d.data);
    }
    f.close();
  }
  write_header(tmp);
  commit_file(tmp, path);
  guard.release();
}

CellSummary read_cell_summary(const std::string& path) {
  if (const std::string why = damage(path); !why.empty()) throw std::runtime_error(path + ": " + why);
  return read_cell_summary(h5::File::open_read(path));
}

std::string cell_file_damage(const std::string& path) {
  return damage(path);
}

CellSummary read_cell_summary(const h5::File& f) {
  const std::string& path = f.file_name();
  CellSummary s;
  s.cell_id = f.attribute_string("cell_id");
  const std::string config = f.attribute_string("config");
  try {
    s.config = json::parse(config);
  } catch (const json::exception& e) {
    throw std::runtime_error(path + ": config attribute is not JSON (" + e.what() + ")");
  }
  if (!s.config.is_object()) throw std::runtime_error(path + ": config attribute is not a JSON object");
  // Any status name reads back (valid_summary then asks for a final one); a text that
  // names none is refused with the same words.
  const std::string status = f.attribute_string("status");
  const std::optional<CellStatus> st = cell_status_from_string(status);
  if (!st) throw std::runtime_error(path + ": status is " + status + ", expected complete or diverged");
  s.status = *st;
  s.diverged_at_step = f.attribute_int64("diverged_at_step");
  s.device = f.attribute_string("device");
  s.wall_seconds = f.attribute_double("wall_seconds");
  if (!f.is_group("/final")) throw std::runtime_error(path + ": no /final group");
  h5::Group final_group = f.open_group("/final");
  for (const std::string& name : final_group.attribute_names())
    s.final_metrics[name] = final_group.attribute_double(name);
  return s;
}

namespace {
std::optional<CellSummary> valid_summary(const std::string& path, const std::string& expected_id, std::string* why,
                                         const std::function<CellSummary()>& read) {
  std::string reason;
  try {
    CellSummary s = read();
    if (!expected_id.empty() && s.cell_id != expected_id)
      reason = "cell_id is " + s.cell_id + ", expected " + expected_id;
    else if (!is_final(s.status))
      reason = "status is " + std::string(to_string(s.status)) + ", expected complete or diverged";
    else
      return s;
  } catch (const std::exception& e) {
    reason = without_path(e.what(), path);
  } catch (...) {
    reason = "unknown error";
  }
  if (why) *why = reason;
  return std::nullopt;
}
}  // namespace

std::optional<CellSummary> read_valid_cell_summary(const std::string& path, const std::string& expected_id,
                                                   std::string* why) {
  return valid_summary(path, expected_id, why, [&] { return read_cell_summary(path); });
}

std::optional<CellSummary> read_valid_cell_summary(const h5::File& f, const std::string& expected_id,
                                                   std::string* why) {
  return valid_summary(f.file_name(), expected_id, why, [&] { return read_cell_summary(f); });
}

bool cell_file_valid(const std::string& path, const std::string& expected_id, std::string* why) {
  if (expected_id.empty()) {
    if (why) *why = "no expected cell_id given";
    return false;
  }
  return read_valid_cell_summary(path, expected_id, why).has_value();
}

}  // namespace attnsweep
