// worker/model: the CPU's three paths through a transformer layer (the fused layer, the
// packed attention, the split heads: worker/model/backend.h layer_buffers) use different
// buffers, and the model allocates only those of its path. The switches that pick the
// path are process-wide and may change between steps: the model then grows its buffers
// and gives what a model on that path from the start gives, bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "experiments/rng.h"
#include "kernels/cpu/gemm.h"
#include "kernels/ops.h"
#include "worker/model/model.h"

namespace attnsweep {
namespace {

enum class Path { fused, packed, split };
const char* name(Path p) {
  return p == Path::fused ? "fused" : p == Path::packed ? "packed" : "split";
}

// Selects a path (kernels/ops.h set_layer_fusion_cpu, kernels/cpu/gemm.h: OpenBLAS GEMMs
// take the split-heads path); the defaults come back at the end of the scope.
class PathGuard {
 public:
  explicit PathGuard(Path p) : saved_gemm_(cpu::gemm_path()) { use(p); }
  ~PathGuard() {
    const char* v = std::getenv("ATTNSWEEP_CPU_LAYER_FUSION");
    set_layer_fusion_cpu(v == nullptr || std::strcmp(v, "0") != 0);
    cpu::set_gemm_path(saved_gemm_);
  }
  PathGuard(const PathGuard&) = delete;
  PathGuard& operator=(const PathGuard&) = delete;
  void use(Path p) {
    set_layer_fusion_cpu(p == Path::fused);
    cpu::set_gemm_path(p == Path::split ? cpu::GemmPath::OpenBlas : cpu::GemmPath::Auto);
  }

 private:
  cpu::GemmPath saved_gemm_;
};

// An image-task model with heads of width 16 (every path usable on an AVX-512 CPU).
ModelConfig small_image_model() {
  ModelConfig mc;
  mc.tokens = 12;
  mc.in_dim = 8;
  mc.dim = 32;
  mc.layers = 2;
  mc.heads = 2;
  mc.mlp_ratio = 2;
  mc.classes = 4;
  return mc;
}

struct Step {
  double loss = 0;
  std::vector<float> grads;
};

Step forward_backward(Model& m, const std::vector<float>& x, const std::vector<int32_t>& y, int64_t B) {
  Step s;
  s.loss = m.forward(x.data(), y.data(), nullptr, B, true).loss;
  m.backward();
  s.grads.resize(static_cast<size_t>(m.num_params()));
  m.get_grads(s.grads.data());
  return s;
}

TEST(ModelPaths, ChangingThePathBetweenStepsGivesWhatThatPathGives) {
  const ModelConfig mc = small_image_model();
  AttentionSpec spec;
  spec.act = mc.act;
  const AttentionShape shape{4, mc.heads, mc.seq(), mc.seq(), mc.head_dim(), mc.head_dim()};
  if (!layer_forward_fused_cpu_usable(spec, shape, mc.mlp_ratio * mc.dim)) GTEST_SKIP() << "no fused layer here";
  const int64_t B = 4;
  Rng rng(5);
  std::vector<float> x(static_cast<size_t>(B * mc.tokens * mc.in_dim));
  for (float& v : x) v = static_cast<float>(rng.normal());
  const std::vector<int32_t> y = {0, 3, 1, 2};
  for (Path later : {Path::packed, Path::split}) {
    SCOPED_TRACE(name(later));
    PathGuard guard(Path::fused);
    Model m(mc);
    m.init(7, 0.0);
    const Step fused = forward_backward(m, x, y, B);  // buffers for the fused layer only
    guard.use(later);
    const Step switched = forward_backward(m, x, y, B);
    Model fresh(mc);
    fresh.init(7, 0.0);
    const Step direct = forward_backward(fresh, x, y, B);
    EXPECT_EQ(switched.loss, direct.loss);
    EXPECT_EQ(0, std::memcmp(switched.grads.data(), direct.grads.data(), switched.grads.size() * sizeof(float)));
    // The paths agree to rounding (the fused backward sums its blocks' shares in float64).
    EXPECT_NEAR(fused.loss, direct.loss, 1e-5 * std::abs(direct.loss));
  }
}

}  // namespace
}  // namespace attnsweep
