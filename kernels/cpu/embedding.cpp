// CPU embeddings of kernels/ops.h: token plus position embedding (embedding_forward,
// embedding_backward) and the patch embedding's patchify. CUDA side:
// kernels/cuda/embedding.cu.
#pragma GCC optimize("no-trapping-math")  // kernels/cpu/ops_common.h: before the headers
#include "kernels/ops.h"

namespace attnsweep {

// ---- embeddings -------------------------------------------------------------------------

void embedding_forward(float* out, const int32_t* ids, const float* wte, const float* wpe, int64_t B, int64_t T,
                       int64_t C) {
#pragma omp parallel for schedule(static)
  for (int64_t bt = 0; bt < B * T; ++bt) {
    const float* e = wte + static_cast<int64_t>(ids[bt]) * C;
    const float* p = wpe != nullptr ? wpe + (bt % T) * C : nullptr;
    for (int64_t c = 0; c < C; ++c) out[bt * C + c] = e[c] + (p != nullptr ? p[c] : 0.0f);
  }
}

void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* ids, int64_t B, int64_t T,
                        int64_t C) {
  // Scatter-adds in token order (serial): deterministic whatever the ids.
  for (int64_t bt = 0; bt < B * T; ++bt) {
    if (dwte != nullptr) {
      float* e = dwte + static_cast<int64_t>(ids[bt]) * C;
      for (int64_t c = 0; c < C; ++c) e[c] += dout[bt * C + c];
    }
    if (dwpe != nullptr) {
      float* p = dwpe + (bt % T) * C;
      for (int64_t c = 0; c < C; ++c) p[c] += dout[bt * C + c];
    }
  }
}

void patchify(float* patches, const float* img, int64_t B, int64_t Cin, int64_t Hh, int64_t W, int64_t p) {
  const int64_t ph = Hh / p, pw = W / p, P = ph * pw, D = Cin * p * p;
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t py = 0; py < ph; ++py)
      for (int64_t px = 0; px < pw; ++px) {
        float* dst = patches + (b * P + py * pw + px) * D;
        for (int64_t c = 0; c < Cin; ++c)
          for (int64_t y = 0; y < p; ++y)
            for (int64_t x = 0; x < p; ++x)
              dst[(c * p + y) * p + x] = img[((b * Cin + c) * Hh + py * p + y) * W + px * p + x];
      }
}

}  // namespace attnsweep
