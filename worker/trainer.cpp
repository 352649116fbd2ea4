#include "worker/trainer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>
#include <stdexcept>

#include "experiments/result_schema.h"
#include "experiments/rng.h"
#include "kernels/device.h"
#include "worker/atomic_file.h"
#include "worker/cuda_trainer.h"

extern "C" int openblas_get_num_threads(void);
extern "C" void openblas_set_num_threads(int);

namespace attnsweep {

// ---- configuration -----------------------------------------------------------------

// The training keys of a training task's effective config: every one is there, with
// the default of experiments/training_keys.cpp where the grid did not set it.
TrainConfig train_config_of(const json& c) {
  TrainConfig tc;
  tc.steps = c.at("steps").get<int64_t>();
  tc.batch = c.at("batch").get<int64_t>();
  tc.warmup_steps = c.at("warmup_steps").get<int64_t>();
  tc.log_every = std::max<int64_t>(1, c.at("log_every").get<int64_t>());
  tc.eval_every = c.at("eval_every").get<int64_t>();
  tc.eval_batches = c.at("eval_batches").get<int64_t>();
  tc.checkpoint_every = c.at("checkpoint_every").get<int64_t>();
  tc.lr = c.at("lr").get<double>();
  tc.weight_decay = c.at("weight_decay").get<double>();
  tc.clip = c.at("clip").get<double>();
  tc.optimizer = c.at("optimizer").get<std::string>();
  tc.lr_schedule = c.at("lr_schedule").get<std::string>();
  tc.seed = c.at("seed").get<uint64_t>();
  tc.init_seed = c.at("init_seed").get<uint64_t>();
  tc.init_std = c.at("init_std").get<double>();
  tc.devices = c.at("devices").get<int64_t>();
  if (tc.devices < 1) throw std::runtime_error("devices: expected an integer >= 1, got " + std::to_string(tc.devices));
  if (tc.batch % tc.devices != 0)
    throw std::runtime_error("batch " + std::to_string(tc.batch) + " is not divisible by devices " +
                             std::to_string(tc.devices));
  if (tc.optimizer != "adamw" && tc.optimizer != "sgd")
    throw std::runtime_error("optimizer: expected adamw or sgd, got \"" + tc.optimizer + "\"");
  if (tc.lr_schedule != "cosine" && tc.lr_schedule != "constant")
    throw std::runtime_error("lr_schedule: expected cosine or constant, got \"" + tc.lr_schedule + "\"");
  return tc;
}

ModelConfig model_config_of(const json& c, const TrainingData& data) {
  ModelConfig mc;
  if (data.classes > 0)
    mc.head = Head::classify;
  else if (data.targets_per_sample == 1)
    mc.head = Head::readout;
  else if (data.targets_per_sample == data.tokens)
    mc.head = Head::token_regress;
  else
    throw std::runtime_error("training data: targets_per_sample " + std::to_string(data.targets_per_sample) +
                             " is neither 1 nor the token count " + std::to_string(data.tokens));
  mc.pad_id = data.pad_id;
  mc.tokens = data.tokens;
  mc.in_dim = data.in_dim;
  mc.classes = data.classes;
  mc.vocab = data.vocab;
  mc.dim = c.at("dim").get<int64_t>();
  mc.layers = c.at("layers").get<int64_t>();
  mc.heads = c.at("heads").get<int64_t>();
  // The read-out (paper B) has no MLP and pools nothing; pde predicts every token.
  if (mc.head != Head::readout) mc.mlp_ratio = c.at("mlp_ratio").get<int64_t>();
  mc.cls = c.contains("cls") && c.at("cls").get<bool>();
  mc.act = activation_spec_of(c);
  return mc;
}

double lr_at(const TrainConfig& tc, int64_t t) {
  if (t < tc.warmup_steps) return tc.lr * static_cast<double>(t + 1) / static_cast<double>(tc.warmup_steps);
  const int64_t decay = tc.steps - tc.warmup_steps;
  if (decay <= 0 || tc.lr_schedule == "constant") return tc.lr;
  const double frac = static_cast<double>(t - tc.warmup_steps) / static_cast<double>(decay);
  return tc.lr * 0.5 * (1.0 + std::cos(M_PI * frac));
}

ModelWeights weights_of(const std::vector<TensorInfo>& tensors, const float* host_params) {
  ModelWeights w;
  for (const TensorInfo& t : tensors) w.tensors[t.name] = {host_params + t.offset, t.shape};
  return w;
}

ModelWeights weights_of(const Model& model) {
  return weights_of(model.tensors(), model.params());
}

// ---- the optimizer step ------------------------------------------------------------

template <class Backend>
BasicTrainer<Backend>::BasicTrainer(const ModelConfig& mc, const TrainConfig& tc, int first_device) : mc_(mc), tc_(tc) {
  if (tc.devices < 1) throw std::runtime_error("devices: expected >= 1");
  for (int64_t r = 0; r < tc.devices; ++r)
    replicas_.push_back(std::make_unique<ModelType>(mc, first_device + static_cast<int>(r)));
  replicas_[0]->init(tc.init_seed, tc.init_std);
  broadcast_params();  // identical parameters on every replica
  const int64_t updaters = Backend::kEveryReplicaUpdates ? devices() : 1;
  opt_.resize(static_cast<size_t>(updaters));
  if (tc.optimizer == "adamw")
    for (int64_t r = 0; r < updaters; ++r) {
      Backend& be = replica(r).backend();
      be.allocate(opt_[static_cast<size_t>(r)].m, model().num_params());
      be.allocate(opt_[static_cast<size_t>(r)].v, model().num_params());
    }
  std::vector<Backend*> backends;
  for (auto& m : replicas_) backends.push_back(&m->backend());
  collective_ = std::make_unique<typename Backend::Collective>(backends);
}

template <class Backend>
void BasicTrainer<Backend>::broadcast_params() {
  if (devices() == 1) return;
  std::vector<float> host = params_host();
  for (int64_t r = 1; r < devices(); ++r) replica(r).set_params(host.data());
}

template <class Backend>
std::vector<float> BasicTrainer<Backend>::params_host() {
  std::vector<float> host(static_cast<size_t>(model().num_params()));
  model().get_params(host.data());
  return host;
}

template <class Backend>
std::vector<float> BasicTrainer<Backend>::m_host() {
  std::vector<float> host(static_cast<size_t>(optimizer_state_size()));
  if (!host.empty()) model().backend().download(host.data(), opt_[0].m.data(), optimizer_state_size());
  return host;
}

template <class Backend>
std::vector<float> BasicTrainer<Backend>::v_host() {
  std::vector<float> host(static_cast<size_t>(optimizer_state_size()));
  if (!host.empty()) model().backend().download(host.data(), opt_[0].v.data(), optimizer_state_size());
  return host;
}

template <class Backend>
void BasicTrainer<Backend>::load_state(const std::vector<float>& params, const std::vector<float>& m,
                                       const std::vector<float>& v) {
  if (static_cast<int64_t>(params.size()) != model().num_params() ||
      static_cast<int64_t>(m.size()) != optimizer_state_size() ||
      static_cast<int64_t>(v.size()) != optimizer_state_size())
    throw std::runtime_error("parameter count differs from the model's");
  for (int64_t r = 0; r < devices(); ++r) replica(r).set_params(params.data());
  for (size_t r = 0; r < opt_.size() && !m.empty(); ++r) {
    Backend& be = replica(static_cast<int64_t>(r)).backend();
    be.upload(opt_[r].m.data(), m.data(), optimizer_state_size());
    be.upload(opt_[r].v.data(), v.data(), optimizer_state_size());
  }
}

template <class Backend>
void BasicTrainer<Backend>::update(int64_t r, double coef, float lr, int64_t t) {
  ModelType& m = replica(r);
  Backend& be = m.backend();
  be.bind();
  const int64_t n = m.num_params(), nd = m.decayed_count();
  float* g = m.grads();
  float* p = m.params();
  // torch.nn.utils.clip_grad_norm_: scale by max_norm / (norm + 1e-6) when below 1.
  if (coef < 1.0) be.scale_inplace(g, n, static_cast<float>(coef));
  const float wd = static_cast<float>(tc_.weight_decay);
  if (tc_.optimizer == "adamw") {
    OptimizerState& o = opt_[static_cast<size_t>(r)];
    const float b1 = static_cast<float>(tc_.beta1), b2 = static_cast<float>(tc_.beta2),
                eps = static_cast<float>(tc_.eps);
    // Weight matrices [0, nd) are decayed; biases, LayerNorm, positions and CLS are not.
    be.adamw_update(p, g, o.m.data(), o.v.data(), nd, lr, b1, b2, eps, wd, t + 1);
    be.adamw_update(p + nd, g + nd, o.m.data() + nd, o.v.data() + nd, n - nd, lr, b1, b2, eps, 0.0f, t + 1);
  } else {
    be.sgd_update(p, g, nullptr, nd, lr, 0.0f, wd);
    be.sgd_update(p + nd, g + nd, nullptr, n - nd, lr, 0.0f, 0.0f);
  }
}

template <class Backend>
TrainStepResult BasicTrainer<Backend>::step(const float* x, const int32_t* y_class, const float* y_value, int64_t B,
                                            int64_t t, bool collect_norms) {
  StepResult r;
  ModelType& m0 = model();
  const int64_t k = devices();
  if (k == 1) {
    r.fwd = m0.forward(x, y_class, y_value, B, collect_norms);
    m0.backward();
  } else {
    if (B % k != 0)
      throw std::runtime_error("batch " + std::to_string(B) + " is not divisible by devices " + std::to_string(k));
    // Replica rr takes rows [rr B/k, (rr+1) B/k) of the global batch.
    const int64_t Bs = B / k, row = mc_.tokens * mc_.in_dim;
    std::vector<ForwardStats> f(static_cast<size_t>(k));
    Backend::for_each_replica(k, [&](int64_t rr) {
      ModelType& m = replica(rr);
      const int64_t first = rr * Bs;
      f[static_cast<size_t>(rr)] =
          m.forward(x + first * row, y_class ? y_class + first : nullptr,
                    y_value ? y_value + first * mc_.targets_per_sample() : nullptr, Bs, collect_norms);
      m.backward();
    });
    double loss = 0;
    for (int64_t rr = 0; rr < k; ++rr) {
      const ForwardStats& fr = f[static_cast<size_t>(rr)];
      loss += fr.loss * static_cast<double>(Bs);  // weight by shard size
      r.fwd.correct += fr.correct;
      if (rr == 0) {
        r.fwd.attn_fro = fr.attn_fro;
        r.fwd.jac_fro = fr.jac_fro;
      } else {
        for (size_t i = 0; i < fr.attn_fro.size(); ++i) r.fwd.attn_fro[i] += fr.attn_fro[i];
        for (size_t i = 0; i < fr.jac_fro.size(); ++i) r.fwd.jac_fro[i] += fr.jac_fro[i];
      }
    }
    r.fwd.loss = loss / static_cast<double>(B);
    for (double& a : r.fwd.attn_fro) a /= static_cast<double>(k);
    for (double& a : r.fwd.jac_fro) a /= static_cast<double>(k);
    std::vector<float*> grads;
    for (int64_t rr = 0; rr < k; ++rr) grads.push_back(replica(rr).grads());
    collective_->allreduce_mean(grads, m0.num_params());
  }
  m0.backend().bind();
  r.grad_norm = m0.backend().global_norm(m0.grads(), m0.num_params());
  r.lr = lr_at(tc_, t);
  r.finite = std::isfinite(r.fwd.loss) && std::isfinite(r.grad_norm);
  if (!r.finite) return r;
  const double coef = tc_.clip > 0 ? tc_.clip / (r.grad_norm + 1e-6) : 1.0;
  const float lr = static_cast<float>(r.lr);
  for (int64_t u = 0; u < static_cast<int64_t>(opt_.size()); ++u) update(u, coef, lr, t);
  if (!Backend::kEveryReplicaUpdates) broadcast_params();
  return r;
}

template class BasicTrainer<CpuBackend>;
#ifdef ATTNSWEEP_HAVE_CUDA
template class BasicTrainer<CudaBackend>;
#endif

// ---- data, trajectory, checkpoints -------------------------------------------------

namespace {

// Batch t holds samples t*B .. t*B + B - 1 of an endless stream of epochs; each epoch is
// a permutation drawn from (seed, epoch) alone, so any step's batch can be rebuilt.
class Sampler {
 public:
  Sampler(int64_t n, uint64_t seed) : n_(n), seed_(seed) {}
  void indices(int64_t first_sample, int64_t count, int64_t* out) {
    for (int64_t j = 0; j < count; ++j) {
      const int64_t g = first_sample + j, epoch = g / n_;
      if (epoch != epoch_) shuffle(epoch);
      out[j] = perm_[static_cast<size_t>(g % n_)];
    }
  }

 private:
  void shuffle(int64_t epoch) {
    perm_.resize(static_cast<size_t>(n_));
    for (int64_t i = 0; i < n_; ++i) perm_[static_cast<size_t>(i)] = i;
    Rng rng(seed_of({seed_, 0xDA7Aull, static_cast<uint64_t>(epoch)}));
    for (int64_t i = n_ - 1; i > 0; --i) {  // Fisher-Yates
      const int64_t j = static_cast<int64_t>(rng.uniform() * static_cast<double>(i + 1));
      std::swap(perm_[static_cast<size_t>(i)], perm_[static_cast<size_t>(std::min(j, i))]);
    }
    epoch_ = epoch;
  }
  int64_t n_;
  uint64_t seed_;
  int64_t epoch_ = -1;
  std::vector<int64_t> perm_;
};

struct Trajectory {
  std::vector<int64_t> step;
  std::vector<float> loss, accuracy, lr, grad_norm;
  std::vector<float> attn_fro, jac_fro;  // [T, L, H]
  std::vector<int64_t> eval_step;
  std::vector<float> eval_loss, eval_accuracy;
  std::vector<double> eval_task;  // [E, M]: the task's eval_metrics (TrainingData::measure)
};

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

struct TrainState {
  int64_t step = 0;          // the next step to run (= updates done)
  int64_t samples_seen = 0;  // the sampler's cursor
  Trajectory traj;
};

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

// Loads a checkpoint of this very cell; false (with *why) when absent or not usable.
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

struct EvalResult {
  double loss = 0, accuracy = 0;
  double rel_l2 = 0;  // token_regress: mean over samples of ||pred - y|| / ||y||
};

// Sum over the B samples of ||pred_b - y_b|| / ||y_b|| (rows of `per` values), float64.
double sum_rel_l2(const float* pred, const float* y, int64_t B, int64_t per) {
  double s = 0;
  for (int64_t b = 0; b < B; ++b) {
    double num = 0, den = 0;
    for (int64_t j = b * per; j < (b + 1) * per; ++j) {
      const double d = static_cast<double>(pred[j]) - y[j];
      num += d * d;
      den += static_cast<double>(y[j]) * y[j];
    }
    s += std::sqrt(num / den);
  }
  return s;
}

// Mean loss and accuracy (token_regress: and relative L2) over the test split (or its
// first eval_batches batches).
template <class ModelT>
EvalResult evaluate(ModelT& model, const TrainingData& data, const TrainConfig& tc, std::vector<float>& x,
                    std::vector<int32_t>& yc, std::vector<float>& yv) {
  int64_t n = data.n_test;
  if (tc.eval_batches > 0) n = std::min(n, tc.eval_batches * tc.batch);
  double loss = 0, rel_l2 = 0;
  int64_t correct = 0;
  const int64_t per = model.config().targets_per_sample();
  const bool per_token = model.config().head == Head::token_regress;
  std::vector<float> pred;  // a device model's predictions on the host
  std::vector<int64_t> idx(static_cast<size_t>(tc.batch));
  for (int64_t s = 0; s < n; s += tc.batch) {
    const int64_t B = std::min(tc.batch, n - s);
    for (int64_t j = 0; j < B; ++j) idx[static_cast<size_t>(j)] = s + j;
    data.fill(1, idx.data(), B, x.data(), yc.data(), yv.data());
    const ForwardStats st = model.forward(x.data(), yc.data(), yv.data(), B, false);
    loss += st.loss * static_cast<double>(B);
    correct += st.correct;
    if (per_token) rel_l2 += sum_rel_l2(model.host_predictions(pred), yv.data(), B, per);
  }
  EvalResult r;
  r.loss = n > 0 ? loss / static_cast<double>(n) : std::nan("");
  r.accuracy = data.classes > 0 && n > 0 ? static_cast<double>(correct) / static_cast<double>(n) : std::nan("");
  r.rel_l2 = per_token && n > 0 ? rel_l2 / static_cast<double>(n) : std::nan("");
  return r;
}

}  // namespace

// ---- the training loop -------------------------------------------------------------

namespace {

// The training loop of train_cell on a built trainer of any backend.
template <class TrainerT>
TaskOutput train_loop(TrainerT& tr, const TrainConfig& tc, const ModelConfig& mc, const json& config,
                      const TaskContext& ctx, const TrainingData& data) {
  const std::string config_text = config.dump();
  const int64_t L = mc.layers, H = mc.heads, B = tc.batch;
  const bool classify = data.classes > 0;

  TrainState st;
  if (!ctx.checkpoint_path.empty()) {
    std::string why;
    if (load_checkpoint(ctx.checkpoint_path, config_text, tr, st, &why)) {
      std::fprintf(stderr, "attnsweep train: resuming from %s at step %lld\n", ctx.checkpoint_path.c_str(),
                   static_cast<long long>(st.step));
    } else if (why != "absent") {
      std::fprintf(stderr, "attnsweep train: ignoring checkpoint %s (%s); starting from step 0\n",
                   ctx.checkpoint_path.c_str(), why.c_str());
    }
  }

  std::vector<float> x(static_cast<size_t>(B * data.tokens * data.in_dim));
  std::vector<int32_t> yc(static_cast<size_t>(B));
  std::vector<float> yv(static_cast<size_t>(B * mc.targets_per_sample()));
  std::vector<int64_t> idx(static_cast<size_t>(B));
  Sampler sampler(data.n_train, tc.seed);
  Trajectory& tj = st.traj;
  TaskOutput out;
  const float nanf = std::numeric_limits<float>::quiet_NaN();

  double last_rel_l2 = std::nan("");
  auto record_eval = [&](int64_t step) {
    const EvalResult e = evaluate(tr.model(), data, tc, x, yc, yv);
    last_rel_l2 = e.rel_l2;
    tj.eval_step.push_back(step);
    tj.eval_loss.push_back(static_cast<float>(e.loss));
    tj.eval_accuracy.push_back(static_cast<float>(e.accuracy));
    if (data.measure) {
      // The task reads host parameters: a device trainer's are copied back first.
      const std::vector<float> host = tr.params_host();
      const std::vector<double> v = data.measure(weights_of(tr.model().tensors(), host.data()));
      if (v.size() != data.eval_metrics.size())
        throw std::runtime_error("task measured " + std::to_string(v.size()) + " metrics, declared " +
                                 std::to_string(data.eval_metrics.size()));
      tj.eval_task.insert(tj.eval_task.end(), v.begin(), v.end());
    }
  };

  const int64_t resumed_at = st.step;
  for (; st.step < tc.steps; ++st.step) {
    const int64_t t = st.step;
    // Step boundary: everything up to t is in `st` and the model.
    const bool stop = ctx.stop_requested();
    if (!ctx.checkpoint_path.empty() &&
        (stop || (tc.checkpoint_every > 0 && t % tc.checkpoint_every == 0 && t != resumed_at)))
      save_checkpoint(ctx.checkpoint_path, config_text, tc, tr, st);
    if (stop) {
      out.status = CellStatus::interrupted;
      return out;
    }
    sampler.indices(st.samples_seen, B, idx.data());
    data.fill(0, idx.data(), B, x.data(), yc.data(), yv.data());
    st.samples_seen += B;
    const bool log = t % tc.log_every == 0 || t == tc.steps - 1;
    const TrainStepResult r = tr.step(x.data(), yc.data(), yv.data(), B, t, log);
    if (log || !r.finite) {
      tj.step.push_back(t);
      tj.loss.push_back(static_cast<float>(r.fwd.loss));
      tj.accuracy.push_back(classify ? static_cast<float>(static_cast<double>(r.fwd.correct) / static_cast<double>(B))
                                     : nanf);
      tj.lr.push_back(static_cast<float>(r.lr));
      tj.grad_norm.push_back(static_cast<float>(r.grad_norm));
      for (int64_t i = 0; i < L * H; ++i) {
        tj.attn_fro.push_back(log ? static_cast<float>(r.fwd.attn_fro[static_cast<size_t>(i)]) : nanf);
        tj.jac_fro.push_back(log ? static_cast<float>(r.fwd.jac_fro[static_cast<size_t>(i)]) : nanf);
      }
    }
    if (!r.finite) {
      out.status = CellStatus::diverged;
      out.diverged_at_step = t;
      break;
    }
    if (tc.eval_every > 0 && (t + 1) % tc.eval_every == 0) record_eval(t + 1);
  }

  if (out.status == CellStatus::complete) {
    if (tj.eval_step.empty() || tj.eval_step.back() != tc.steps) record_eval(tc.steps);
    out.final_metrics["test_loss"] = tj.eval_loss.back();
    if (classify)
      out.final_metrics["test_accuracy"] = tj.eval_accuracy.back();
    else
      out.final_metrics["test_mse"] = tj.eval_loss.back();
    if (mc.head == Head::token_regress) out.final_metrics["test_rel_l2"] = last_rel_l2;
  } else {
    // The parameters are those before the non-finite step; the cell's verdict is the
    // divergence, not a test score of weights it never finished training.
    out.final_metrics["test_loss"] = std::nan("");
    if (classify) out.final_metrics["test_accuracy"] = std::nan("");
    if (mc.head == Head::token_regress) out.final_metrics["test_rel_l2"] = std::nan("");
  }
  // The task's own metrics: the last evaluation's values (NaN when the cell diverged).
  const size_t M = data.measure ? data.eval_metrics.size() : 0;
  for (size_t j = 0; j < M; ++j)
    out.final_metrics[data.eval_metrics[j].name] =
        out.status == CellStatus::complete ? tj.eval_task[tj.eval_task.size() - M + j] : std::nan("");
  out.final_metrics["train_loss"] = tj.loss.empty() ? std::nan("") : tj.loss.back();

  const uint64_t T = tj.step.size(), E = tj.eval_step.size();
  const uint64_t uL = static_cast<uint64_t>(L), uH = static_cast<uint64_t>(H);
  // Paths, types and descriptions: the result schema (experiments/result_schema.cpp).
  out.series.push_back(result_series("/train/step", {T}, tj.step));
  out.series.push_back(result_series("/train/loss", {T}, tj.loss));
  out.series.push_back(result_series("/train/accuracy", {T}, tj.accuracy));
  out.series.push_back(result_series("/train/lr", {T}, tj.lr));
  out.series.push_back(result_series("/train/grad_norm", {T}, tj.grad_norm));
  out.series.push_back(result_series("/norms/attn_fro", {T, uL, uH}, tj.attn_fro));
  out.series.push_back(result_series("/norms/jac_fro", {T, uL, uH}, tj.jac_fro));
  out.series.push_back(result_series("/eval/step", {E}, tj.eval_step));
  out.series.push_back(result_series("/eval/loss", {E}, tj.eval_loss));
  out.series.push_back(result_series("/eval/accuracy", {E}, tj.eval_accuracy));
  for (size_t j = 0; j < M; ++j) {
    std::vector<double> col(static_cast<size_t>(E));
    for (size_t e = 0; e < E; ++e) col[e] = tj.eval_task[e * M + j];
    out.series.push_back({data.eval_metrics[j].path, {E}, std::move(col), data.eval_metrics[j].description});
  }
  return out;
}

}  // namespace

TaskOutput train_cell(const json& config, const TaskContext& ctx, const TrainingData& data) {
  const int gpu = cuda_device_index(ctx.device);  // throws for an unknown device name
  const TrainConfig tc = train_config_of(config);
  const ModelConfig mc = model_config_of(config, data);
  if (gpu < 0) {
    // Every GEMM of the model splits its rows over the OpenMP team itself (kernels/cpu):
    // OpenBLAS single-threaded for the whole run instead of toggled around each call.
    struct BlasOneThread {
      int saved = openblas_get_num_threads();
      BlasOneThread() { openblas_set_num_threads(1); }
      ~BlasOneThread() { openblas_set_num_threads(saved); }
    } blas_one_thread;
    Trainer tr(mc, tc);
    return train_loop(tr, tc, mc, config, ctx, data);
  }
#ifdef ATTNSWEEP_HAVE_CUDA
  const int visible = cuda_device_count();
  if (gpu + tc.devices > visible)
    throw std::runtime_error(
        "device " + ctx.device + " with devices = " + std::to_string(tc.devices) + " needs GPU" +
        (tc.devices == 1 ? " " + std::to_string(gpu)
                         : "s " + std::to_string(gpu) + ".." + std::to_string(gpu + tc.devices - 1)) +
        ", but " + std::to_string(visible) + " CUDA device" + (visible == 1 ? " is" : "s are") +
        " visible (CUDA_VISIBLE_DEVICES=" +
        (std::getenv("CUDA_VISIBLE_DEVICES") ? std::getenv("CUDA_VISIBLE_DEVICES") : "unset") + ")");
  CudaTrainer tr(mc, tc, gpu);
  return train_loop(tr, tc, mc, config, ctx, data);
#else
  throw std::runtime_error("device " + ctx.device +
                           ": this build has no CUDA backend (rebuild with nvcc available, -DATTNSWEEP_CUDA=ON), "
                           "or run the cell with --device cpu");
#endif
}

}  // namespace attnsweep
