// kernels/real_query_norms.h on the CPU, and the choice of rows both backends use.
#include "kernels/real_query_norms.h"

#include <algorithm>
#include <cstring>

namespace attnsweep {

RealQueryRows real_query_rows(const float* key_mask, int64_t B, int64_t T) {
  RealQueryRows r;
  r.first.assign(static_cast<size_t>(B + 1), 0);
  for (int64_t b = 0; b < B; ++b) {
    r.first[static_cast<size_t>(b)] = static_cast<int64_t>(r.rows.size());
    for (int64_t t = 0; t < T; ++t)
      if (key_mask[b * T + t] != 0.0f) r.rows.push_back(static_cast<int32_t>(t));
  }
  r.first[static_cast<size_t>(B)] = static_cast<int64_t>(r.rows.size());
  return r;
}

void norms_of_real_queries_cpu(const AttentionSpec& spec, const AttentionShape& shape, const float* key_mask,
                               const float* q, const float* k, const float* v, double* attn_fro, double* jac_fro) {
  const int64_t B = shape.B, H = shape.H, T = shape.Nq, hd = shape.d;
  const RealQueryRows r = real_query_rows(key_mask, B, T);
  std::vector<float> qb, ob;
  for (int64_t b = 0; b < B; ++b) {
    const int32_t* rows = r.rows.data() + r.first[static_cast<size_t>(b)];
    const int64_t n = r.first[static_cast<size_t>(b + 1)] - r.first[static_cast<size_t>(b)];
    double* attn = attn_fro + b * H;
    double* jac = jac_fro + b * H;
    if (n == 0) {
      std::fill(attn, attn + H, 0.0);
      std::fill(jac, jac + H, 0.0);
      continue;
    }
    qb.resize(static_cast<size_t>(H * n * hd));
    ob.resize(qb.size());
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < n; ++i)
        std::memcpy(qb.data() + (h * n + i) * hd, q + ((b * H + h) * T + rows[i]) * hd,
                    static_cast<size_t>(hd) * sizeof(float));
    const AttentionShape one{1, H, n, T, hd, hd};
    attention_forward_cpu(spec, one, qb.data(), k + b * H * T * hd, v + b * H * T * hd, key_mask + b * T, ob.data(),
                          nullptr, attn, jac);
  }
}

}  // namespace attnsweep
