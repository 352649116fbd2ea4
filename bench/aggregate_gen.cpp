// Writes a fake *trained* sweep in the per-cell schema of docs/results-schema.md, fast: for
// bench/aggregate.sh (10,000 cells x 1,000 logged steps x 4 layers x 4 heads) and for
// tests/integration/report.sh (a small one to draw the training figures from).
//
//   aggregate_gen DIR [--cells N] [--steps T] [--layers L] [--heads H] [--procs P]
//
// Cells cycle through 4 activations (softmax, s^3/sqrt(N), s^3, ReLU/N) x 3 prompt
// lengths (16, 64, 256), then seeds. Unscaled s^3 at N = 256 diverges on every third
// seed (its loss is NaN from the divergence on). Writes DIR/runs/<id>.h5 (id = 16 hex
// digits of a hash of the config), DIR/manifest.json and DIR/status.json (with one
// failed cell that has no file).
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "results/cell_file.h"

using namespace attnsweep;
namespace fs = std::filesystem;

namespace {

std::string hex_id(const std::string& text) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a 64
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ull;
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

const int64_t kNs[] = {16, 64, 256};

json cell_config(int64_t k, int64_t steps, int64_t layers, int64_t heads) {
  const int64_t act = k % 4, n = kNs[(k / 4) % 3], seed = k / 12;
  json c = {{"task", "image"}, {"prompt_length", n}, {"seed", seed}, {"layers", layers},
            {"heads", heads},  {"steps", steps},     {"lr", 1e-3}};
  switch (act) {
    case 0: c["activation"] = "softmax"; break;
    case 1:
      c["activation"] = "poly";
      c["degree"] = 3;
      c["scale"] = "inv_sqrt_n";
      break;
    case 2:
      c["activation"] = "poly";
      c["degree"] = 3;
      c["scale"] = "none";
      break;
    default:
      c["activation"] = "relu";
      c["scale"] = "inv_n";
      break;
  }
  return c;
}

void write_cell(const fs::path& dir, int64_t k, int64_t T, int64_t L, int64_t H) {
  const json cfg = cell_config(k, T * 10, L, H);
  const int64_t act = k % 4, n = cfg["prompt_length"].get<int64_t>(), seed = cfg["seed"].get<int64_t>();
  std::mt19937_64 rng(static_cast<uint64_t>(k) * 7919 + 1);
  std::normal_distribution<float> noise(0.f, 1.f);
  const double logn = std::log2(double(n));
  // Final accuracy by activation and N (softmax and s^3/sqrt(N) best, unscaled s^3 worst).
  const double acc_final = (act == 0   ? 0.88
                            : act == 1 ? 0.87
                            : act == 2 ? 0.74
                                       : 0.83) -
                           0.012 * (logn - 4) * (act == 2 ? 3 : 1);
  const bool diverges = act == 2 && n == 256 && seed % 3 == 0;
  const int64_t div_step = diverges ? T / 2 : -1;

  CellResult r;
  r.config = cfg;
  r.cell_id = hex_id(cfg.dump());
  r.status = diverges ? CellStatus::diverged : CellStatus::complete;
  r.diverged_at_step = diverges ? div_step * 10 : -1;
  r.device = "cuda:0";
  r.wall_seconds = 30.0 + double(n) * 0.5;
  r.started = "2024-05-01T10:00:00Z";
  r.finished = "2024-05-01T10:05:00Z";
  std::vector<int64_t> step(T);
  std::vector<float> loss(T), acc(T), lr(T), gn(T);
  std::vector<float> attn(static_cast<size_t>(T * L * H)), jac(attn.size());
  for (int64_t t = 0; t < T; ++t) {
    const double x = double(t) / double(std::max<int64_t>(T - 1, 1));
    step[t] = t * 10;
    const double l = 2.3 * std::exp(-4.0 * x) + (1 - acc_final) * 1.2;
    loss[t] = static_cast<float>(l * (1 + 0.04 * noise(rng)));
    acc[t] = static_cast<float>(0.1 + (acc_final - 0.1) * (1 - std::exp(-5 * x)) + 0.01 * noise(rng));
    lr[t] = static_cast<float>(1e-3 * 0.5 * (1 + std::cos(M_PI * x)));
    gn[t] = static_cast<float>(1.0 + 0.2 * noise(rng));
    if (diverges && t >= div_step) loss[t] = acc[t] = gn[t] = NAN;
    for (int64_t li = 0; li < L; ++li)
      for (int64_t h = 0; h < H; ++h) {
        const size_t i = static_cast<size_t>((t * L + li) * H + h);
        // Norm at initialisation by the norm laws, then a layer-dependent drift in training.
        const double a0 = act == 0 ? 1.4 : act == 1 ? 1.8 * std::sqrt(double(n)) / 4 : act == 2 ? 0.5 * double(n) : 0.7;
        const double grow = act == 2 ? 1 + 3.0 * x * (li + 1) : 1 + 0.25 * x * std::log1p(double(li + 1));
        attn[i] = static_cast<float>(a0 * grow * (1 + 0.02 * noise(rng)));
        jac[i] = static_cast<float>((act == 0 ? 0.5 : 1.1) * a0 * grow * (1 + 0.03 * noise(rng)));
        if (diverges && t >= div_step) attn[i] = jac[i] = NAN;
      }
  }
  const uint64_t t = static_cast<uint64_t>(T), l = static_cast<uint64_t>(L), h = static_cast<uint64_t>(H);
  r.datasets.push_back({"/train/step", {t}, step, "optimizer step"});
  r.datasets.push_back({"/train/loss", {t}, loss, "training loss"});
  r.datasets.push_back({"/train/accuracy", {t}, acc, "training accuracy"});
  r.datasets.push_back({"/train/lr", {t}, lr, "learning rate"});
  r.datasets.push_back({"/train/grad_norm", {t}, gn, "gradient norm"});
  r.datasets.push_back({"/norms/attn_fro", {t, l, h}, attn, "||phi(S)||_F, mean over the batch"});
  r.datasets.push_back({"/norms/jac_fro", {t, l, h}, jac, "||d phi(S)/dS||_F, mean over the batch"});
  const int64_t E = std::max<int64_t>(1, T / 100);
  std::vector<int64_t> estep(E);
  std::vector<float> eloss(E), eacc(E);
  for (int64_t e = 0; e < E; ++e) {
    const int64_t s = (e + 1) * T / E - 1;
    estep[e] = step[s];
    eloss[e] = loss[s] * 1.05f;
    eacc[e] = acc[s] - 0.01f;
  }
  const uint64_t eu = static_cast<uint64_t>(E);
  r.datasets.push_back({"/eval/step", {eu}, estep, "step of the evaluation"});
  r.datasets.push_back({"/eval/loss", {eu}, eloss, "test loss"});
  r.datasets.push_back({"/eval/accuracy", {eu}, eacc, "test accuracy"});
  if (diverges) {
    r.final_metrics = {{"test_accuracy", NAN}, {"test_loss", NAN}};
  } else {
    r.final_metrics = {{"test_accuracy", acc_final + 0.008 * noise(rng)},
                       {"test_loss", (1 - acc_final) * 1.3 * (1 + 0.03 * noise(rng))}};
  }
  write_cell_file((dir / "runs" / (r.cell_id + ".h5")).string(), r);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: aggregate_gen DIR [--cells N] [--steps T] [--layers L] [--heads H] [--procs P]\n");
    return 2;
  }
  const fs::path dir = argv[1];
  int64_t cells = 10000, steps = 1000, layers = 4, heads = 4, procs = 2;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const int64_t v = std::atoll(argv[i + 1]);
    if (k == "--cells")
      cells = v;
    else if (k == "--steps")
      steps = v;
    else if (k == "--layers")
      layers = v;
    else if (k == "--heads")
      heads = v;
    else if (k == "--procs")
      procs = v;
    else {
      std::fprintf(stderr, "aggregate_gen: unknown option %s\n", k.c_str());
      return 2;
    }
  }
  fs::create_directories(dir / "runs");
  std::vector<pid_t> kids;
  for (int64_t p = 0; p < procs; ++p) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      try {
        for (int64_t k = p; k < cells; k += procs) write_cell(dir, k, steps, layers, heads);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "aggregate_gen: %s\n", e.what());
        ::_exit(1);
      }
      ::_exit(0);
    }
    kids.push_back(pid);
  }
  int rc = 0;
  for (pid_t k : kids) {
    int st = 0;
    ::waitpid(k, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) rc = 1;
  }
  // One more cell that "failed": listed in status.json, no file.
  const std::string failed_id = hex_id(cell_config(cells, steps * 10, layers, heads).dump());
  json manifest = {{"grid_name", "fake_trained_image"},
                   {"grid_hash", hex_id("grid" + std::to_string(cells))},
                   {"cells", cells + 1},
                   {"attnsweep_version", ATTNSWEEP_VERSION},
                   {"written", "2024-05-01T10:00:00Z"}};
  json status = {
      {"state", "finished"},
      {"failed_cells", json::array({{{"cell_id", failed_id}, {"reason", "exit 1 after 2 retries (fake)"}}})}};
  std::ofstream(dir / "manifest.json") << manifest.dump(2) << "\n";
  std::ofstream(dir / "status.json") << status.dump(2) << "\n";
  return rc;
}
