// The norm probe of paper A's theorems (science.md): no training. For prompt length N,
// draw X in R^{N x D} with N(0,1) entries and W_Q, W_K in R^{D x d} with N(0, 1/D)
// entries, form S = (X W_Q)(X W_K)^T / sqrt(d), and record ||phi(S)||_F and
// ||d phi(S)/dS||_F for each of `samples` draws.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "experiments/result_schema.h"
#include "experiments/rng.h"
#include "experiments/task.h"
#include "kernels/activation.h"

namespace attnsweep {

namespace {

void fill_normal(Rng& rng, std::vector<float>& v, double std) {
  for (float& x : v) x = static_cast<float>(rng.normal() * std);
}

}  // namespace

TaskOutput run_norm_probe(const json& config, const TaskContext& ctx) {
  const int64_t n = config.at("prompt_length").get<int64_t>();
  const int64_t dim = config.value("dim", int64_t{64});
  const int64_t hd = config.value("head_dim", int64_t{16});
  const int64_t samples = config.value("samples", int64_t{32});
  const uint64_t seed = config.value("seed", uint64_t{0});
  const PhiParams phi = resolve_phi(activation_spec_of(config), n);

  std::vector<float> x(n * dim), wq(dim * hd), wk(dim * hd), q(n * hd), k(n * hd);
  const int64_t block = std::min<int64_t>(n, 256);  // score rows held at once
  std::vector<float> s(block * n);
  std::vector<double> attn(samples), jac(samples);
  const float inv_sqrt_d = 1.0f / std::sqrt(static_cast<float>(hd));

  for (int64_t t = 0; t < samples; ++t) {
    if (ctx.stop_requested()) {
      TaskOutput out;
      out.status = CellStatus::interrupted;
      return out;
    }
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

}  // namespace attnsweep
