// The checkpoint codec (worker/training/checkpoint.h): the file's layout, format version and
// checksum, the writer and the reader; included by the translation units that instantiate
// them for a trainer, and by no header (its unnamed namespace is per translation unit:
// worker/training/checkpoint.cpp, the CPU's; worker/training/cuda_trainer.cpp, CUDA's).
#pragma once

#include "worker/training/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "base/atomic_file.h"
#include "worker/training/trainer.h"

namespace attnsweep {
namespace {

// Checkpoint file: magic, format version (uint32), payload, FNV-1a 64 of everything
// before it, end marker. A file counts only when the marker and the checksum are there
// (a crash mid-write, or a truncated copy, is ignored and training starts over). A
// complete checkpoint of another format (an older or newer attnsweep; format 1 had no
// version field and the magic ATSWCKP1) is refused: the attempt fails naming the file,
// rather than silently starting over. Bump kCheckpointFormat whenever the payload changes.
constexpr char kMagic[8] = {'A', 'T', 'S', 'W', 'C', 'K', 'P', 'T'};
constexpr char kMagicFormat1[8] = {'A', 'T', 'S', 'W', 'C', 'K', 'P', '1'};
constexpr uint32_t kCheckpointFormat = 2;

// A checkpoint this build cannot read: not "ignored", the cell fails with this message.
struct CheckpointFormatError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
constexpr char kEnd[8] = {'A', 'T', 'S', 'W', 'E', 'N', 'D', '!'};

uint64_t fnv1a(const char* p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; ++i) {
    h ^= static_cast<unsigned char>(p[i]);
    h *= 0x100000001b3ull;
  }
  return h;
}

struct Writer {
  std::string buf;
  template <class T>
  void put(const T& v) {
    buf.append(reinterpret_cast<const char*>(&v), sizeof(T));
  }
  template <class T>
  void put_vec(const std::vector<T>& v) {
    put<int64_t>(static_cast<int64_t>(v.size()));
    if (!v.empty()) buf.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
  }
  void put_str(const std::string& s) {
    put<int64_t>(static_cast<int64_t>(s.size()));
    buf += s;
  }
};

struct Reader {
  const std::string& buf;
  size_t pos = 0;
  void need(size_t n) {
    if (buf.size() - pos < n) throw std::runtime_error("payload shorter than its lengths say");
  }
  template <class T>
  T get() {
    need(sizeof(T));
    T v;
    std::memcpy(&v, buf.data() + pos, sizeof(T));
    pos += sizeof(T);
    return v;
  }
  template <class T>
  std::vector<T> get_vec() {
    const int64_t n = get<int64_t>();
    if (n < 0) throw std::runtime_error("negative length");
    need(static_cast<size_t>(n) * sizeof(T));
    std::vector<T> v(static_cast<size_t>(n));
    if (!v.empty()) std::memcpy(v.data(), buf.data() + pos, v.size() * sizeof(T));  // data() may be null when empty
    pos += v.size() * sizeof(T);
    return v;
  }
  std::string get_str() {
    const int64_t n = get<int64_t>();
    if (n < 0) throw std::runtime_error("negative length");
    need(static_cast<size_t>(n));
    std::string s = buf.substr(pos, static_cast<size_t>(n));
    pos += static_cast<size_t>(n);
    return s;
  }
};

}  // namespace

template <class TrainerT>
void save_checkpoint(const std::string& path, const std::string& config_text, const TrainConfig& tc, TrainerT& tr,
                     const TrainState& st) {
  Writer w;
  w.buf.append(kMagic, sizeof kMagic);
  w.put<uint32_t>(kCheckpointFormat);
  w.put_str(config_text);
  w.put<int64_t>(st.step);
  w.put<int64_t>(st.samples_seen);
  w.put<uint64_t>(tc.seed);     // the sampler's generator: (seed, samples_seen) is all of its state
  w.put_vec(tr.params_host());  // host float32 whatever the backend: one format for all
  w.put_vec(tr.m_host());
  w.put_vec(tr.v_host());
  const Trajectory& t = st.traj;
  w.put_vec(t.step);
  w.put_vec(t.loss);
  w.put_vec(t.accuracy);
  w.put_vec(t.lr);
  w.put_vec(t.grad_norm);
  w.put_vec(t.attn_fro);
  w.put_vec(t.jac_fro);
  w.put_vec(t.eval_step);
  w.put_vec(t.eval_loss);
  w.put_vec(t.eval_accuracy);
  w.put_vec(t.eval_task);
  w.put<uint64_t>(fnv1a(w.buf.data(), w.buf.size()));
  w.buf.append(kEnd, sizeof kEnd);

  const std::string tmp = temp_path_for(path);
  TempFileGuard guard(tmp);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error(tmp + ": cannot create checkpoint: " + std::strerror(errno));
  size_t done = 0;
  while (done < w.buf.size()) {
    const ssize_t r = ::write(fd, w.buf.data() + done, w.buf.size() - done);
    if (r < 0 && errno == EINTR) continue;  // a second signal while we write
    if (r <= 0) {
      const int e = errno;
      ::close(fd);
      throw std::runtime_error(tmp + ": cannot write checkpoint: " + std::strerror(e));
    }
    done += static_cast<size_t>(r);
  }
  if (::close(fd) != 0) throw std::runtime_error(tmp + ": cannot close checkpoint: " + std::strerror(errno));
  commit_file(tmp, path);  // fsync, rename, fsync of the directory
  guard.release();
}

template <class TrainerT>
bool load_checkpoint(const std::string& path, const std::string& config_text, TrainerT& tr, TrainState& st,
                     std::string* why) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    *why = "absent";
    return false;
  }
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string buf = ss.str();
  try {
    constexpr size_t kTrailer = sizeof(uint64_t) + sizeof kEnd;
    const bool complete = buf.size() >= sizeof kMagic + kTrailer &&
                          std::memcmp(buf.data() + buf.size() - sizeof kEnd, kEnd, sizeof kEnd) == 0;
    auto refuse = [&](const std::string& format) {
      throw CheckpointFormatError(path + ": a checkpoint of format " + format + ", this attnsweep reads format " +
                                  std::to_string(kCheckpointFormat) +
                                  " only; remove the file to restart the cell from step 0, or resume with the "
                                  "attnsweep that wrote it");
    };
    if (complete && std::memcmp(buf.data(), kMagicFormat1, sizeof kMagicFormat1) == 0) refuse("1");
    if (buf.size() < sizeof kMagic + kTrailer || std::memcmp(buf.data(), kMagic, sizeof kMagic) != 0)
      throw std::runtime_error("not an attnsweep checkpoint");
    if (!complete) throw std::runtime_error("no end marker (incomplete write)");
    const size_t body = buf.size() - kTrailer;
    uint64_t sum;
    std::memcpy(&sum, buf.data() + body, sizeof sum);
    if (sum != fnv1a(buf.data(), body)) throw std::runtime_error("checksum mismatch");
    const std::string payload = buf.substr(0, body);
    Reader r{payload, sizeof kMagic};
    if (const uint32_t format = r.get<uint32_t>(); format != kCheckpointFormat) refuse(std::to_string(format));
    if (r.get_str() != config_text) throw std::runtime_error("written for a different config");
    TrainState s;
    s.step = r.get<int64_t>();
    s.samples_seen = r.get<int64_t>();
    if (r.get<uint64_t>() != tr.config().seed) throw std::runtime_error("sampler seed differs");
    auto params = r.get_vec<float>();
    auto m = r.get_vec<float>();
    auto v = r.get_vec<float>();
    if (static_cast<int64_t>(params.size()) != tr.model().num_params() ||
        static_cast<int64_t>(m.size()) != tr.optimizer_state_size() ||
        static_cast<int64_t>(v.size()) != tr.optimizer_state_size())
      throw std::runtime_error("parameter count differs from the model's");
    Trajectory& t = s.traj;
    t.step = r.get_vec<int64_t>();
    t.loss = r.get_vec<float>();
    t.accuracy = r.get_vec<float>();
    t.lr = r.get_vec<float>();
    t.grad_norm = r.get_vec<float>();
    t.attn_fro = r.get_vec<float>();
    t.jac_fro = r.get_vec<float>();
    t.eval_step = r.get_vec<int64_t>();
    t.eval_loss = r.get_vec<float>();
    t.eval_accuracy = r.get_vec<float>();
    t.eval_task = r.get_vec<double>();
    if (r.pos != payload.size()) throw std::runtime_error("trailing bytes");
    tr.load_state(params, m, v);  // every replica resumes from the same state
    st = std::move(s);
  } catch (const CheckpointFormatError&) {
    throw;
  } catch (const std::exception& e) {
    *why = e.what();
    return false;
  }
  return true;
}

}  // namespace attnsweep
