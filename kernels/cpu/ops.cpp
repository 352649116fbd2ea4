// CPU ops of kernels/ops.h. Row-parallel loops use OpenMP with static schedules; every
// reduction across rows (dweight, dbias, dwte, ...) runs serially in row order so that
// results do not depend on the thread count.
#include "kernels/ops.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace attnsweep {

// ---- matmul ---------------------------------------------------------------------------

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int64_t N, int64_t C,
                    int64_t OC) {
  // out = inp @ weight^T
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(N), static_cast<int>(OC),
              static_cast<int>(C), 1.0f, inp, static_cast<int>(C), weight, static_cast<int>(C), 0.0f, out,
              static_cast<int>(OC));
  if (bias != nullptr) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N; ++i)
      for (int64_t o = 0; o < OC; ++o) out[i * OC + o] += bias[o];
  }
}

void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int64_t N, int64_t C, int64_t OC) {
  const int iN = static_cast<int>(N), iC = static_cast<int>(C), iOC = static_cast<int>(OC);
  // dinp += dout @ weight
  if (dinp != nullptr)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, iN, iC, iOC, 1.0f, dout, iOC, weight, iC, 1.0f, dinp, iC);
  // dweight += dout^T @ inp
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, iOC, iC, iN, 1.0f, dout, iOC, inp, iC, 1.0f, dweight, iC);
  if (dbias != nullptr) {
#pragma omp parallel for schedule(static)
    for (int64_t o = 0; o < OC; ++o) {
      double s = 0.0;
      for (int64_t i = 0; i < N; ++i) s += dout[i * OC + o];
      dbias[o] += static_cast<float>(s);
    }
  }
}

// ---- layernorm ------------------------------------------------------------------------

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int64_t N, int64_t C) {
  const double eps = 1e-5;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const float* x = inp + i * C;
    double m = 0.0;
    for (int64_t c = 0; c < C; ++c) m += x[c];
    m /= static_cast<double>(C);
    double var = 0.0;  // biased variance, as PyTorch's LayerNorm
    for (int64_t c = 0; c < C; ++c) var += (x[c] - m) * (x[c] - m);
    var /= static_cast<double>(C);
    const double r = 1.0 / std::sqrt(var + eps);
    float* o = out + i * C;
    for (int64_t c = 0; c < C; ++c) o[c] = static_cast<float>((x[c] - m) * r) * weight[c] + bias[c];
    mean[i] = static_cast<float>(m);
    rstd[i] = static_cast<float>(r);
  }
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int64_t N, int64_t C) {
  // dinp: with xhat = (x - mean) rstd and dxhat = dout * weight,
  //   dx = rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat))
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const float* x = inp + i * C;
    const float* dy = dout + i * C;
    double s1 = 0.0, s2 = 0.0;
    for (int64_t c = 0; c < C; ++c) {
      const double xhat = (x[c] - mean[i]) * static_cast<double>(rstd[i]);
      const double dxhat = static_cast<double>(dy[c]) * weight[c];
      s1 += dxhat;
      s2 += dxhat * xhat;
    }
    s1 /= static_cast<double>(C);
    s2 /= static_cast<double>(C);
    for (int64_t c = 0; c < C; ++c) {
      const double xhat = (x[c] - mean[i]) * static_cast<double>(rstd[i]);
      const double dxhat = static_cast<double>(dy[c]) * weight[c];
      dinp[i * C + c] += static_cast<float>(rstd[i] * (dxhat - s1 - xhat * s2));
    }
  }
  // dweight += sum_i dout * xhat, dbias += sum_i dout: parallel over columns, rows in order
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < C; ++c) {
    double sw = 0.0, sb = 0.0;
    for (int64_t i = 0; i < N; ++i) {
      const double xhat = (inp[i * C + c] - mean[i]) * static_cast<double>(rstd[i]);
      sw += dout[i * C + c] * xhat;
      sb += dout[i * C + c];
    }
    dweight[c] += static_cast<float>(sw);
    dbias[c] += static_cast<float>(sb);
  }
}

// ---- GELU (tanh approximation) --------------------------------------------------------

namespace {
constexpr float kGeluK = 0.7978845608028654f;  // sqrt(2/pi)
}

void gelu_forward(float* out, const float* inp, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float x = inp[i];
    out[i] = 0.5f * x * (1.0f + std::tanh(kGeluK * (x + 0.044715f * x * x * x)));
  }
}

void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float x = inp[i];
    const float u = kGeluK * (x + 0.044715f * x * x * x);
    const float th = std::tanh(u);
    const float sech2 = 1.0f - th * th;
    // d/dx [0.5 x (1 + tanh u)] = 0.5 (1 + tanh u) + 0.5 x sech^2(u) du/dx
    const float grad = 0.5f * (1.0f + th) + 0.5f * x * sech2 * kGeluK * (1.0f + 3.0f * 0.044715f * x * x);
    dinp[i] += grad * dout[i];
  }
}

// ---- residual -------------------------------------------------------------------------

void residual_forward(float* out, const float* inp1, const float* inp2, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = inp1[i] + inp2[i];
}

void residual_backward(float* dinp1, float* dinp2, const float* dout, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    dinp1[i] += dout[i];
    dinp2[i] += dout[i];
  }
}

// ---- mean-pool over tokens ------------------------------------------------------------

void meanpool_forward(float* out, const float* inp, int64_t B, int64_t T, int64_t C) {
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t c = 0; c < C; ++c) {
      double s = 0.0;
      for (int64_t t = 0; t < T; ++t) s += inp[(b * T + t) * C + c];
      out[b * C + c] = static_cast<float>(s / static_cast<double>(T));
    }
}

void meanpool_backward(float* dinp, const float* dout, int64_t B, int64_t T, int64_t C) {
  const float inv = 1.0f / static_cast<float>(T);
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < C; ++c) dinp[(b * T + t) * C + c] += dout[b * C + c] * inv;
}

// ---- softmax cross-entropy ------------------------------------------------------------

double softmax_crossentropy_forward(float* probs, int64_t* n_correct, const float* logits, const int32_t* targets,
                                    int64_t N, int64_t V) {
  double loss = 0.0;
  int64_t correct = 0;
  // Rows in parallel; the loss sum and the count in row order (reduction over a fixed
  // static partition would depend on the thread count).
  std::vector<double> row_loss(static_cast<size_t>(N));
  std::vector<char> row_ok(static_cast<size_t>(N));
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const float* x = logits + i * V;
    int64_t arg = 0;
    for (int64_t j = 1; j < V; ++j)
      if (x[j] > x[arg]) arg = j;
    const double mx = x[arg];
    double z = 0.0;
    for (int64_t j = 0; j < V; ++j) z += std::exp(x[j] - mx);
    for (int64_t j = 0; j < V; ++j) probs[i * V + j] = static_cast<float>(std::exp(x[j] - mx) / z);
    row_loss[static_cast<size_t>(i)] = -(x[targets[i]] - mx - std::log(z));  // -log softmax, stable
    row_ok[static_cast<size_t>(i)] = arg == targets[i];
  }
  for (int64_t i = 0; i < N; ++i) {
    loss += row_loss[static_cast<size_t>(i)];
    correct += row_ok[static_cast<size_t>(i)];
  }
  if (n_correct != nullptr) *n_correct = correct;
  return N > 0 ? loss / static_cast<double>(N) : 0.0;
}

void softmax_crossentropy_backward(float* dlogits, const float* probs, const int32_t* targets, float dloss, int64_t N,
                                   int64_t V) {
  const float s = dloss / static_cast<float>(N);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < V; ++j)
      dlogits[i * V + j] += s * (probs[i * V + j] - (j == targets[i] ? 1.0f : 0.0f));
}

// ---- MSE --------------------------------------------------------------------------------

double mse_forward(const float* pred, const float* target, int64_t n) {
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double e = static_cast<double>(pred[i]) - target[i];
    s += e * e;
  }
  return n > 0 ? s / static_cast<double>(n) : 0.0;
}

void mse_backward(float* dpred, const float* pred, const float* target, float dloss, int64_t n) {
  const float s = 2.0f * dloss / static_cast<float>(n);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) dpred[i] += s * (pred[i] - target[i]);
}

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

// ---- optimizers -------------------------------------------------------------------------

void adamw_update(float* params, const float* grads, float* m, float* v, int64_t n, float lr, float beta1,
                  float beta2, float eps, float weight_decay, int64_t t) {
  const double c1 = 1.0 - std::pow(static_cast<double>(beta1), static_cast<double>(t));
  const double c2 = 1.0 - std::pow(static_cast<double>(beta2), static_cast<double>(t));
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float g = grads[i];
    m[i] = beta1 * m[i] + (1.0f - beta1) * g;
    v[i] = beta2 * v[i] + (1.0f - beta2) * g * g;
    const double mhat = m[i] / c1, vhat = v[i] / c2;
    params[i] -= static_cast<float>(lr * (mhat / (std::sqrt(vhat) + eps) + weight_decay * static_cast<double>(params[i])));
  }
}

void sgd_update(float* params, const float* grads, float* momentum_buf, int64_t n, float lr, float momentum,
                float weight_decay) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    float g = grads[i] + weight_decay * params[i];
    if (momentum != 0.0f) {
      momentum_buf[i] = momentum * momentum_buf[i] + g;
      g = momentum_buf[i];
    }
    params[i] -= lr * g;
  }
}

}  // namespace attnsweep
