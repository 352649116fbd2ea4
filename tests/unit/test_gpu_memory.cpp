// The GPU memory estimate (worker/model/gpu_memory.h): one small config counted by hand, and
// for each training task the model it counts against the one the task's run() hands the
// trainer, and against what a model of that config allocates.
#include <gtest/gtest.h>

#include "coordinator/grid.h"
#include "experiments/registry.h"
#include "experiments/task.h"
#include "kernels/scratch.h"
#include "worker/model/gpu_memory.h"
#include "worker/model/model.h"
#include "worker/model/model_layout.h"
#include "worker/training/train_config.h"

using namespace attnsweep;

namespace {

// What a task's run() hands the trainer, caught instead of trained.
struct Caught {
  json config;
  TrainingData data;
  bool called = false;
};
Caught catch_training(const json& cfg) {
  Caught c;
  TaskContext ctx;
  ctx.train = [&](const json& model_config, const TaskContext&, const TrainingData& data) {
    c.config = model_config;
    c.data = data;
    c.called = true;
    return TaskOutput{};
  };
  task_of(cfg)->run(cfg, ctx);
  return c;
}

// The model the estimate counts is the one the task's run() hands the trainer, and the
// estimate and a model built from it read one plan (worker/model/model_layout.h).
void expect_shape_is_the_tasks(const json& cfg) {
  const TaskDef* t = task_of(cfg);
  ASSERT_NE(t->data_shape, nullptr) << t->name;
  const ModelConfig est = model_config_of(t->model_config ? t->model_config(cfg) : cfg, t->data_shape(cfg));
  const Caught c = catch_training(cfg);
  ASSERT_TRUE(c.called) << t->name;
  const ModelConfig run = model_config_of(c.config, c.data);
  EXPECT_EQ(est.head, run.head) << t->name;
  EXPECT_EQ(est.tokens, run.tokens) << t->name;
  EXPECT_EQ(est.in_dim, run.in_dim) << t->name;
  EXPECT_EQ(est.classes, run.classes) << t->name;
  EXPECT_EQ(est.vocab, run.vocab) << t->name;
  EXPECT_EQ(est.pad_id, run.pad_id) << t->name;
  EXPECT_EQ(est.dim, run.dim) << t->name;
  EXPECT_EQ(est.layers, run.layers) << t->name;
  EXPECT_EQ(est.heads, run.heads) << t->name;
  EXPECT_EQ(est.mlp_ratio, run.mlp_ratio) << t->name;
  EXPECT_EQ(est.cls, run.cls) << t->name;
  // What a model of that config allocates is what its plan says, and the estimate sums
  // the same plan with every per-layer buffer (the CUDA path's).
  const int64_t B = 3;
  Model m(est);
  m.reserve(B);
  const BatchLayout used = batch_layout(est, B, m.buffers_in_use());
  EXPECT_EQ(m.buffer_floats(), 2 * m.num_params() + used.floats()) << t->name;
  EXPECT_EQ(m.norm_doubles(), used.norms) << t->name;
  const GpuMemory g = estimate_gpu_memory([&] {
    json b = cfg;
    b["batch"] = B;
    return b;
  }());
  const BatchLayout all = batch_layout(est, B, LayerBuffers{});
  EXPECT_EQ(g.parameters, 4 * m.num_params()) << t->name;
  EXPECT_EQ(g.activations, 4 * all.floats() + 8 * all.norms) << t->name;
}

}  // namespace

TEST(GpuMemory, HandCountOfOneSmallImageCell) {
  // image, N 16 (7 x 7 patches: in_dim 49), C 8, H 2 (head width 4), L 1, mlp_ratio 2
  // (F 16), 10 classes, batch B 4, AdamW.
  const json cfg = effective_config({{"task", "image"},
                                     {"prompt_length", 16},
                                     {"dim", 8},
                                     {"heads", 2},
                                     {"layers", 1},
                                     {"mlp_ratio", 2},
                                     {"batch", 4}},
                                    "cell.json");
  const GpuMemory m = estimate_gpu_memory(cfg);
  // Parameters: patch_w 8*49 + patch_b 8 = 400; one layer: qkv_w 192 + attproj_w 64 + fc_w
  // 128 + fcproj_w 128 + ln1 16 + qkv_b 24 + attproj_b 8 + ln2 16 + fc_b 16 + fcproj_b 8 =
  // 600; head_w 80 + head_b 10; wpe 16*8 = 128; lnf 16: 1234 floats.
  EXPECT_EQ(m.parameters, 1234 * 4);
  EXPECT_EQ(m.gradients, 1234 * 4);
  EXPECT_EQ(m.optimizer, 2 * 1234 * 4);  // m and v
  // Activations (B T = 64 rows of C 8: 512 floats a row-tensor; of F 16: 1024):
  // emb 512, encoded 512, ln1 512 + 64 + 64, qkv 1536, q k v atty 2048, lse 4*2*16 = 128,
  // atty_un 512, res1 512, ln2 512 + 64 + 64, fch 1024, fch_gelu 1024, res2 512,
  // lnf 512 + 64 + 64, pooled 32, logits 40, probs 40: 10352 floats.
  // Scratch: dres 512, dln 512, dbig 1024, dbig2 1024, dqkv 1536, dq dk dv datty 2048,
  // dpooled 32, dlogits 40, demb 512: 7240 floats. Norms: 2 x L B H = 16 doubles.
  EXPECT_EQ(m.activations, (10352 + 7240) * 4 + 16 * 8);
  // Inputs: x 4*16*49 floats, the labels 4 int32.
  EXPECT_EQ(m.inputs, 4 * 16 * 49 * 4 + 4 * 4);
  // Workspace: head width 4 takes the materialising attention, whose backward needs the
  // scores and dP, B H N N floats each (2 * 8 * 256 * 4 bytes), and the key prefix
  // (4 * 16 int32): 16640 bytes, grown to 1.25x. On the emulated device each of the three
  // pieces has its guard after it (kernels/scratch.h's Carver::kGuardBytes, 0 elsewhere).
  const int64_t scratch = 16640 + 3 * static_cast<int64_t>(Carver::kGuardBytes);
  EXPECT_EQ(m.workspace, scratch + scratch / 4);
  EXPECT_EQ(m.context, kCudaContextBytes);
  EXPECT_EQ(m.total(), kCudaContextBytes + 4936 + 4936 + 9872 + 70496 + 12560 + scratch + scratch / 4);
  // bf16: the matmuls' two bfloat16 input copies, each up to max(B T 64, 49) x the widest
  // side (in_dim 49): 2 * 64 * 49 * 2 bytes; head width 4 takes float32 attention: no
  // attention copies. fp32 has none.
  EXPECT_EQ(m.bf16_copies, 0);
  json bf16 = cfg;
  bf16["precision"] = "bf16";
  EXPECT_EQ(estimate_gpu_memory(bf16).bf16_copies, 2 * 64 * 49 * 2);
  EXPECT_EQ(estimate_gpu_memory(bf16).total(), m.total() + 2 * 64 * 49 * 2);
  // SGD keeps no optimizer state.
  json sgd = cfg;
  sgd["optimizer"] = "sgd";
  EXPECT_EQ(estimate_gpu_memory(sgd).optimizer, 0);
}

TEST(GpuMemory, TasksThatTrainNothingOnAGpuTakeNone) {
  EXPECT_EQ(estimate_gpu_memory(effective_config({{"task", "norm_probe"}, {"prompt_length", 16}}, "c.json")).total(),
            0);
  EXPECT_EQ(estimate_gpu_memory(effective_config({{"task", "synthetic"}}, "c.json")).total(), 0);
}

TEST(GpuMemory, GrowsWithTheBatchAndThePromptLength) {
  const json a = effective_config({{"task", "image"}, {"prompt_length", 49}, {"batch", 32}}, "c.json");
  json b = a;
  b["batch"] = 64;
  const json c = effective_config({{"task", "image"}, {"prompt_length", 196}, {"batch", 32}}, "c.json");
  EXPECT_GT(estimate_gpu_memory(b).activations, estimate_gpu_memory(a).activations);
  EXPECT_EQ(estimate_gpu_memory(b).parameters, estimate_gpu_memory(a).parameters);
  EXPECT_GT(estimate_gpu_memory(c).total(), estimate_gpu_memory(a).total());
}

TEST(GpuMemory, ShapeIsWhatEachTaskGivesTheTrainer) {
  // Small data, so that the tasks' set-up (generating or solving their samples) is quick.
  expect_shape_is_the_tasks(effective_config({{"task", "listops"},
                                              {"prompt_length", 64},
                                              {"min_length", 4},
                                              {"n_train", 4},
                                              {"n_test", 4},
                                              {"depth", 3},
                                              {"arity", 3}},
                                             "c.json"));
  expect_shape_is_the_tasks(effective_config({{"task", "listops"},
                                              {"prompt_length", 64},
                                              {"min_length", 4},
                                              {"n_test", 2},
                                              {"depth", 3},
                                              {"arity", 3},
                                              {"cls", false}},
                                             "c.json"));
  expect_shape_is_the_tasks(
      effective_config({{"task", "pde"}, {"prompt_length", 16}, {"n_train", 2}, {"n_test", 2}}, "c.json"));
  expect_shape_is_the_tasks(effective_config(
      {{"task", "icl_regression"}, {"prompt_length", 10}, {"d", 3}, {"train_prompts", 4}, {"test_prompts", 4}},
      "c.json"));
}

TEST(GpuMemory, ShapeIsWhatTheImageTaskGivesTheTrainer) {
  // The image task reads Fashion-MNIST (experiments/image.cpp) before it trains.
  try {
    expect_shape_is_the_tasks(effective_config({{"task", "image"}, {"prompt_length", 49}}, "c.json"));
    expect_shape_is_the_tasks(effective_config({{"task", "image"}, {"prompt_length", 196}, {"cls", true}}, "c.json"));
  } catch (const std::runtime_error& e) {
    GTEST_SKIP() << "no Fashion-MNIST here: " << e.what();
  }
}

// Layer l's weights are l times one layer into each (L, ...) tensor, the hand-written
// offsets the model used before (l * 3 C C for qkv_w, l * F C for fc_w, ...), and the
// last layer's slices end where their tensors end.
TEST(ModelLayout, LayerWeightsAreEachLayersSliceOfItsTensor) {
  ModelConfig cfg;
  cfg.dim = 8, cfg.heads = 2, cfg.layers = 3, cfg.mlp_ratio = 4, cfg.tokens = 5, cfg.in_dim = 3, cfg.classes = 4;
  const std::vector<TensorInfo> layout = parameter_layout(cfg);
  std::vector<float> buf(static_cast<size_t>(parameter_floats(layout)));
  ParameterTensors t{};
  float** member = reinterpret_cast<float**>(&t);  // members in buffer order, as the model carves them
  for (size_t i = 0; i < layout.size(); ++i) member[i] = buf.data() + layout[i].offset;
  const int64_t C = 8, F = 32;
  for (int64_t l = 0; l < 3; ++l) {
    const LayerWeights w = layer_weights(t, layout, l);
    EXPECT_EQ(w.ln1_w, t.ln1_w + l * C);
    EXPECT_EQ(w.ln1_b, t.ln1_b + l * C);
    EXPECT_EQ(w.qkv_w, t.qkv_w + l * 3 * C * C);
    EXPECT_EQ(w.qkv_b, t.qkv_b + l * 3 * C);
    EXPECT_EQ(w.attproj_w, t.attproj_w + l * C * C);
    EXPECT_EQ(w.attproj_b, t.attproj_b + l * C);
    EXPECT_EQ(w.ln2_w, t.ln2_w + l * C);
    EXPECT_EQ(w.ln2_b, t.ln2_b + l * C);
    EXPECT_EQ(w.fc_w, t.fc_w + l * F * C);
    EXPECT_EQ(w.fc_b, t.fc_b + l * F);
    EXPECT_EQ(w.fcproj_w, t.fcproj_w + l * C * F);
    EXPECT_EQ(w.fcproj_b, t.fcproj_b + l * C);
  }
  const LayerWeights last = layer_weights(t, layout, 2);
  EXPECT_EQ(last.fcproj_b + C, t.lnf_w);  // the next tensor in the buffer
  EXPECT_EQ(last.ln1_w + C, t.ln1_b);
}
