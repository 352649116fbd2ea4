// Paper B's in-context linear regression (science.md): prompts of L tokens (x_i, y_i),
// x ~ N(0, Sigma) with Sigma_ij = rho^|i-j|, y = w^T x + eps, w ~ N(0, I/d) per prompt,
// eps ~ N(0, noise_var), then the query (x, 0); the target is the query's y. The model is
// the single attention layer read-out (worker/model/model.h, Head::readout) with C = d + 1.
//
// limit_sq_error: the mean over the test prompts of ||T_L(z) - T_inf(z)||^2, where T_L
// is the read-out's attention output at the query z for the prompt and T_inf the
// large-prompt limit for the prompt's Gaussian token law N(0, Gamma_w),
// Gamma_w = [[Sigma, Sigma w], [w^T Sigma, w^T Sigma w + noise_var]] (Lemma 2.1 and
// science.md "Where they meet"), with a = K^T Q z / sqrt(C):
//   softmax, poly degree 1 / inv_n:   V Gamma a
//   relu / inv_n:                     V Gamma a / 2
//   poly odd p / inv_n:               p (p-2)!! (a^T Gamma a)^((p-1)/2) V Gamma a
//   poly even p / inv_n:              0
// Every other activation and scale (sigmoid, any scale but inv_n) has no finite limit
// given by the papers: the task then does not write the metric.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "experiments/task.h"

#ifdef ATTNSWEEP_HAVE_CUDA
#include "experiments/icl_prompts_cuda.h"
#endif

namespace attnsweep {

struct IclSetup {
  int64_t d = 5;               // dimension of x; tokens have C = d + 1 coordinates
  int64_t prompt_length = 10;  // L tokens before the query
  double rho = 0.5, noise_var = 0.1;
  uint64_t seed = 0;          // data seed: prompts are a function of (seed, split, index)
  std::vector<double> sigma;  // Sigma, d x d row-major
  std::vector<double> chol;   // its lower Cholesky factor
  std::vector<float> chol_f;  // the same in float32: what the prompts are drawn with
};

// Sigma and its Cholesky factor for (d, rho); throws when Sigma is not positive definite.
IclSetup make_icl_setup(int64_t d, int64_t prompt_length, double rho, double noise_var, uint64_t seed);
// From a cell config (keys d, prompt_length, rho, noise_var, seed).
IclSetup icl_setup_of(const json& config);

// Prompts are float32 and a pure function of (seed, split, index), the same bits on every
// machine, compiler path and thread count: the normals of prompt `index` are Philox4x32-10
// stream `index` under the key icl_prompt_key(seed, split) (experiments/normals.h); then
// x = chol g and y = w^T x + sqrt(noise_var) eps in float32, without FMA.
uint64_t icl_prompt_key(const IclSetup& s, int split);
// The float32 standard deviations they are drawn with: w ~ N(0, I / d), eps ~ N(0, noise_var).
float icl_w_sd(const IclSetup& s);
float icl_noise_sd(const IclSetup& s);
#ifdef ATTNSWEEP_HAVE_CUDA
// What experiments/icl_prompts_cuda.h's launch needs to make the split's prompts.
IclPromptsCuda icl_prompts_cuda_args(const IclSetup& s, int split);
#endif
// Prompt `index` of split 0 (train) or 1 (test) as the model reads it: tokens [L + 1, d + 1]
// ((x_i, y_i) for i < L, then the query (x, 0)), *target = the query's y, and w [d] (may be
// null). scratch: reused between calls.
void icl_prompt_tokens(const IclSetup& s, int split, int64_t index, float* tokens, float* target, float* w,
                       std::vector<float>& scratch);

struct IclPrompt {
  std::vector<double> w;       // [d]
  std::vector<double> tokens;  // [L + 1, d + 1]: (x_i, y_i) for i < L, then the query (x, 0)
  double target = 0;           // y of the query: w^T x + eps
};
// The same prompt in float64 (every value the float32 one): for the float64 metrics.
void icl_prompt(const IclSetup& s, int split, int64_t index, IclPrompt& out);

// Gamma_w, the (d+1) x (d+1) covariance of a token (x, w^T x + eps) given w, row-major.
std::vector<double> icl_token_covariance(const IclSetup& s, const double* w);

// The read-out's attention weights in float64, C x C row-major each: q = Q z, k = K x,
// v = V x (rows [0, C), [C, 2C), [2C, 3C) of the model's qkv_w).
struct ReadoutWeights {
  int64_t C = 0;
  std::vector<double> Q, K, V;
};
ReadoutWeights readout_weights(const ModelWeights& weights);

// T_L(z) [C]: sum_i phi(s)_i V x_i over the L prompt tokens (tokens [L + 1, C], the query
// last), s_i = <K x_i, Q z> / sqrt(C), phi resolved for L keys: what the model computes.
void readout_attention_output(const ActivationSpec& act, const ReadoutWeights& W, const double* tokens, int64_t L,
                              double* out);

// Whether T_inf is defined for this activation (see the top of this file).
bool icl_limit_defined(const ActivationSpec& act);
// T_inf(z) [C] for tokens ~ N(0, gamma) (gamma C x C).
void readout_limit_output(const ActivationSpec& act, const ReadoutWeights& W, const double* gamma, const double* z,
                          double* out);

// Test prompts 0 .. n-1 as icl_prompt_tokens makes them: tokens [n, L + 1, d + 1],
// target [n], w [n, d]. Made once and shared by every caller of this process with the same
// setup and n (the cells of a group that draw them, every evaluation), freed with the last.
struct IclTestSet {
  int64_t n = 0;
  std::vector<float> tokens, target, w;
};
std::shared_ptr<const IclTestSet> icl_test_set(const IclSetup& s, int64_t n);

// Mean over test prompts 0 .. n_prompts-1 of ||T_L(z) - T_inf(z)||^2.
double icl_limit_sq_error(const IclSetup& s, const IclTestSet& test, const ActivationSpec& act,
                          const ReadoutWeights& W);
double icl_limit_sq_error(const IclSetup& s, const ActivationSpec& act, const ReadoutWeights& W, int64_t n_prompts);

}  // namespace attnsweep
