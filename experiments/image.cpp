// The image task: Fashion-MNIST (60k train / 10k test, 28 x 28 grey, 10 classes) as a
// sequence of N = (28/p)^2 patches of p x p pixels, so that the prompt length N is what
// a grid sweeps (paper A trains ViTs at several N by changing the patch size).
// Pixels are normalised with the training set's mean and standard deviation.
// The files come from the Debian package dataset-fashion-mnist.
#include <zlib.h>

#include <sys/stat.h>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/options.h"
#include "experiments/registry.h"
#include "experiments/task.h"
#include "experiments/training_keys.h"
#include "kernels/ops.h"

namespace attnsweep {

namespace {

constexpr int64_t kSide = 28;
constexpr const char* kDefaultDir = "/usr/share/datasets/fashion-mnist";

struct GzCloser {
  void operator()(gzFile f) const { gzclose(f); }
};

std::string data_dir() {
  // An override for machines that keep the files elsewhere (and for tests of the errors).
  if (std::string d = options::fashion_mnist_dir(); !d.empty()) return d;
  return kDefaultDir;
}

// Reads exactly n bytes or throws: a short read means a truncated or corrupt download.
void read_exact(gzFile f, const std::string& path, void* dst, size_t n) {
  size_t got = 0;
  auto* p = static_cast<unsigned char*>(dst);
  while (got < n) {
    const unsigned chunk = static_cast<unsigned>(std::min<size_t>(n - got, 1u << 30));
    const int r = gzread(f, p + got, chunk);
    if (r <= 0) {
      int errnum = 0;
      const char* msg = gzerror(f, &errnum);
      throw std::runtime_error(path + ": truncated or corrupt gzip file (read " + std::to_string(got) + " of " +
                               std::to_string(n) + " bytes" +
                               (errnum != Z_OK && msg != nullptr ? std::string(": ") + msg : std::string()) +
                               "); reinstall the Debian package dataset-fashion-mnist");
    }
    got += static_cast<size_t>(r);
  }
}

uint32_t big_endian(const unsigned char* b) {
  return (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | uint32_t{b[3]};
}

// One IDX file (http://yann.lecun.com/exdb/mnist/): images [n, 28, 28] or labels [n].
std::vector<uint8_t> read_idx(const std::string& path, bool images, int64_t expected_n) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    throw std::runtime_error(path +
                             ": Fashion-MNIST file not found; install the Debian package dataset-fashion-mnist "
                             "(apt-get install dataset-fashion-mnist) or set ATTNSWEEP_FASHION_MNIST_DIR");
  std::unique_ptr<gzFile_s, GzCloser> f(gzopen(path.c_str(), "rb"));
  if (!f) throw std::runtime_error(path + ": cannot open: " + std::strerror(errno));
  const int header_words = images ? 4 : 2;
  unsigned char hdr[16];
  read_exact(f.get(), path, hdr, static_cast<size_t>(header_words) * 4);
  const uint32_t magic = big_endian(hdr);
  const uint32_t want_magic = images ? 2051 : 2049;
  if (magic != want_magic)
    throw std::runtime_error(path + ": not an IDX " + (images ? "image" : "label") + " file (magic " +
                             std::to_string(magic) + ", expected " + std::to_string(want_magic) + ")");
  const int64_t n = big_endian(hdr + 4);
  if (n != expected_n)
    throw std::runtime_error(path + ": " + std::to_string(n) + " items, expected " + std::to_string(expected_n));
  if (images && (big_endian(hdr + 8) != kSide || big_endian(hdr + 12) != kSide))
    throw std::runtime_error(path + ": images are not 28 x 28");
  std::vector<uint8_t> data(static_cast<size_t>(n * (images ? kSide * kSide : 1)));
  read_exact(f.get(), path, data.data(), data.size());
  return data;
}

struct FashionMnist {
  std::vector<uint8_t> images[2], labels[2];  // [split]: 0 train, 1 test
  float mean = 0, inv_std = 1;
};

FashionMnist load_fashion_mnist() {
  const std::string dir = data_dir();
  FashionMnist d;
  const char* prefix[2] = {"train", "t10k"};
  const int64_t count[2] = {60000, 10000};
  for (int s = 0; s < 2; ++s) {
    d.images[s] = read_idx(dir + "/" + prefix[s] + "-images-idx3-ubyte.gz", true, count[s]);
    d.labels[s] = read_idx(dir + "/" + prefix[s] + "-labels-idx1-ubyte.gz", false, count[s]);
    for (uint8_t l : d.labels[s])
      if (l > 9) throw std::runtime_error(dir + "/" + prefix[s] + "-labels-idx1-ubyte.gz: label out of range 0..9");
  }
  // Mean and std of the training pixels (scaled to [0, 1]): integer sums, exact.
  uint64_t s1 = 0, s2 = 0;
  for (uint8_t p : d.images[0]) {
    s1 += p;
    s2 += uint64_t{p} * p;
  }
  const double n = static_cast<double>(d.images[0].size());
  const double mean = static_cast<double>(s1) / n / 255.0;
  const double var = static_cast<double>(s2) / n / (255.0 * 255.0) - mean * mean;
  d.mean = static_cast<float>(mean);
  d.inv_std = static_cast<float>(1.0 / std::sqrt(var));
  return d;
}

}  // namespace

int64_t image_patch_size(int64_t prompt_length) {
  switch (prompt_length) {
    case 16: return 7;
    case 49: return 4;
    case 196: return 2;
    case 784: return 1;
    default: return 0;
  }
}

// n patches of p x p pixels, 10 classes.
static DataShape image_data_shape(const json& config) {
  const int64_t n = config.at("prompt_length").get<int64_t>(), p = image_patch_size(n);
  DataShape s;
  s.tokens = n;
  s.in_dim = p * p;
  s.classes = 10;
  return s;
}

TaskOutput run_image(const json& config, const TaskContext& ctx) {
  const int64_t n = config.at("prompt_length").get<int64_t>();
  const int64_t p = image_patch_size(n);
  if (p == 0)
    throw std::runtime_error("prompt_length: the image task makes 16, 49, 196 or 784 patches (patch 7, 4, 2, 1), got " +
                             std::to_string(n));
  if (!ctx.train) throw std::runtime_error("task image: no trainer supplied (run it through attnsweep train)");
  auto ds = std::make_shared<FashionMnist>(load_fashion_mnist());

  TrainingData data;
  static_cast<DataShape&>(data) = image_data_shape(config);
  data.n_train = 60000;
  data.n_test = 10000;
  data.fill = [ds, p](int split, const int64_t* idx, int64_t count, float* x, int32_t* y_class, float*) {
    constexpr int64_t px = kSide * kSide;
    std::vector<float> img(static_cast<size_t>(count * px));
    const uint8_t* src = ds->images[split].data();
    for (int64_t i = 0; i < count; ++i) {
      const uint8_t* im = src + idx[i] * px;
      float* dst = img.data() + i * px;
      for (int64_t k = 0; k < px; ++k) dst[k] = (static_cast<float>(im[k]) / 255.0f - ds->mean) * ds->inv_std;
      y_class[i] = ds->labels[split][static_cast<size_t>(idx[i])];
    }
    patchify(x, img.data(), count, 1, kSide, kSide, p);  // [count, N, p*p]
  };
  return ctx.train(config, ctx, data);
}

const TaskDef& image_task() {
  static const TaskDef t = [] {
    TaskDef d;
    d.name = "image";
    d.description = "Fashion-MNIST classification as (28/p)^2 patches of p x p pixels (paper A)";
    d.max_prompt_length = 784;
    d.check_prompt_length = [](int64_t n) -> std::string {
      if (image_patch_size(n) != 0) return "";
      return std::to_string(n) + " is not a patch count task image can make: 16, 49, 196 or 784 (patch 7, 4, 2, 1)";
    };
    d.model = TaskModel::transformer;
    d.target = TaskTarget::classes;
    d.keys = {boolean_key("cls", false, "classify from a learned CLS token instead of the mean over tokens")};
    d.cost_s = [](const json& c) { return transformer_cost_s(c, 10000); };
    d.data_shape = image_data_shape;
    d.run = run_image;
    return d;
  }();
  return t;
}

}  // namespace attnsweep
