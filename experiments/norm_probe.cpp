// The norm probe of paper A's theorems (science.md): no training. For prompt length N,
// draw X in R^{N x D} with N(0,1) entries and W_Q, W_K in R^{D x d} with N(0, 1/D)
// entries, form S = (X W_Q)(X W_K)^T / sqrt(d), and record ||phi(S)||_F and
// ||d phi(S)/dS||_F for each of `samples` draws.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "experiments/registry.h"
#include "experiments/result_schema.h"
#include "experiments/rng.h"
#include "experiments/task.h"
#include "kernels/activation.h"

extern "C" int openblas_get_num_threads(void);
extern "C" void openblas_set_num_threads(int);

namespace attnsweep {

namespace {

void fill_normal(Rng& rng, std::vector<float>& v, double std) {
  for (float& x : v) x = static_cast<float>(rng.normal() * std);
}

}  // namespace

TaskOutput run_norm_probe(const json& config, const TaskContext& ctx) {
  const int64_t n = config.at("prompt_length").get<int64_t>();
  const int64_t dim = config.at("dim").get<int64_t>();
  const int64_t hd = config.at("head_dim").get<int64_t>();
  const int64_t samples = config.at("samples").get<int64_t>();
  const uint64_t seed = config.at("seed").get<uint64_t>();
  const PhiParams phi = resolve_phi(activation_spec_of(config), n);

  std::vector<double> attn(samples), jac(samples);
  const float inv_sqrt_d = 1.0f / std::sqrt(static_cast<float>(hd));
  // The samples in parallel, each on one thread with single-threaded OpenBLAS: a multi-
  // threaded sgemm sums in an order that depends on its thread count (seen on AVX2), and a
  // cell's numbers must not.
  const int saved_blas = openblas_get_num_threads();
  openblas_set_num_threads(1);
  bool stopped = false;
#pragma omp parallel
  {
    std::vector<float> x(n * dim), wq(dim * hd), wk(dim * hd), q(n * hd), k(n * hd);
    const int64_t block = std::min<int64_t>(n, 256);  // score rows held at once
    std::vector<float> s(block * n);
#pragma omp for schedule(dynamic, 1)
    for (int64_t t = 0; t < samples; ++t) {
      if (ctx.stop_requested()) {
#pragma omp atomic write
        stopped = true;
      }
      bool skip;
#pragma omp atomic read
      skip = stopped;
      if (skip) continue;
      // The draws depend on (seed, N, D, d, sample), not on the activation: every
      // activation of a seed sees the same scores, so comparisons are paired.
      Rng rng(seed_of({seed, static_cast<uint64_t>(n), static_cast<uint64_t>(dim), static_cast<uint64_t>(hd),
                       static_cast<uint64_t>(t)}));
      fill_normal(rng, x, 1.0);
      fill_normal(rng, wq, 1.0 / std::sqrt(static_cast<double>(dim)));
      fill_normal(rng, wk, 1.0 / std::sqrt(static_cast<double>(dim)));
      // q = X W_Q, k = X W_K   (N x D) (D x d)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, hd, dim, 1.0f, x.data(), dim, wq.data(), hd, 0.0f,
                  q.data(), hd);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, hd, dim, 1.0f, x.data(), dim, wk.data(), hd, 0.0f,
                  k.data(), hd);
      double attn_sq = 0, jac_sq = 0;
      for (int64_t r0 = 0; r0 < n; r0 += block) {
        const int64_t rows = std::min(block, n - r0);
        // S[r0:r0+rows, :] = q_blk k^T / sqrt(d)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, n, hd, inv_sqrt_d, q.data() + r0 * hd, hd, k.data(),
                    hd, 0.0f, s.data(), n);
        for (int64_t r = 0; r < rows; ++r) {
          const RowNormSq rn = row_norms(phi, s.data() + r * n, n);
          attn_sq += rn.attn;
          jac_sq += rn.jac;
        }
      }
      attn[t] = std::sqrt(attn_sq);
      jac[t] = std::sqrt(jac_sq);
    }
  }
  openblas_set_num_threads(saved_blas);
  if (stopped) {
    TaskOutput out;
    out.status = CellStatus::interrupted;
    return out;
  }

  TaskOutput out;
  auto stats = [&](const std::string& name, const std::vector<double>& v) {
    double mean = 0, mx = -INFINITY;
    for (double a : v) {
      mean += a;
      mx = std::max(mx, a);
    }
    mean /= static_cast<double>(v.size());
    double var = 0;
    for (double a : v) var += (a - mean) * (a - mean);
    const double sd = v.size() > 1 ? std::sqrt(var / static_cast<double>(v.size() - 1)) : 0.0;
    out.final_metrics[name] = mean;
    out.final_metrics[name + "_std"] = sd;
    out.final_metrics[name + "_max"] = mx;
  };
  stats("attn_fro", attn);
  stats("jac_fro", jac);
  const uint64_t ns = static_cast<uint64_t>(samples);
  out.series.push_back(result_series("/probe/attn_fro", {ns}, attn));
  out.series.push_back(result_series("/probe/jac_fro", {ns}, jac));
  if (!std::isfinite(out.final_metrics["attn_fro"]) || !std::isfinite(out.final_metrics["jac_fro"])) {
    out.status = CellStatus::diverged;  // overflow of phi (e.g. a high unscaled power): a finding, not a crash
    out.diverged_at_step = 0;
  }
  return out;
}

const TaskDef& norm_probe_task() {
  static const TaskDef t = [] {
    TaskDef d;
    d.name = "norm_probe";
    d.description = "||phi(S)||_F and ||d phi / dS||_F of random scores at initialisation (paper A's norm laws)";
    // The probe materialises one N x N score matrix per sample: N = 16384 is 1 GiB in float32.
    d.max_prompt_length = 16384;
    d.keys = {integer_key("samples", 1, 100000, 32, "independent draws averaged per cell"),
              integer_key("head_dim", 1, 1024, 16, "query/key width d of one head"),
              integer_key("dim", 1, 4096, 64, "model width D")};
    // Scores, phi, phi' and both norms: about (2d + 20) flops per score entry, at 5.4
    // Gflop/s on one core, and 30 ms a cell for its process and result file: the cells of
    // the demo alone on the Xeon VM of 2026-12-05 (CPU seconds, 32 samples, d = 16): 0.03
    // s at N = 16, 0.16-0.51 s at N = 1024 by activation (the grid: 19 s of CPU; 3.75
    // Gflop/s and 50 ms, calibrated on wall times under load, made 38).
    d.cost_s = [](const json& c) {
      const double n = c.at("prompt_length").get<double>();
      return c.at("samples").get<double>() * n * n * (2 * c.at("head_dim").get<double>() + 20) / 5.4e9 + 0.03;
    };
    d.outputs = {
        make_final_metric("attn_fro", "mean over the samples of ||phi(S)||_F", true, "", "‖φ(S)‖_F"),
        make_final_metric("attn_fro_std", "sample standard deviation of ||phi(S)||_F (0 for one sample)"),
        make_final_metric("attn_fro_max", "largest ||phi(S)||_F of the samples"),
        make_final_metric("jac_fro", "mean over the samples of ||d phi(S) / dS||_F", true, "", "‖∂φ(S)/∂S‖_F"),
        make_final_metric("jac_fro_std", "sample standard deviation of ||d phi(S) / dS||_F (0 for one sample)"),
        make_final_metric("jac_fro_max", "largest ||d phi(S) / dS||_F of the samples"),
        make_dataset("/probe/attn_fro", ResultType::float64, {"samples"},
                     "||phi(S)||_F of each sample, S = (X W_Q)(X W_K)^T / sqrt(d)", false),
        make_dataset("/probe/jac_fro", ResultType::float64, {"samples"}, "||d phi(S) / dS||_F of each sample", false)};
    d.run = run_norm_probe;
    return d;
  }();
  return t;
}

}  // namespace attnsweep
