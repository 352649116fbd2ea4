// The GPU memory estimate (experiments/gpu_memory.h): one small config counted by hand,
// the parameter count against the model itself, and each training task's model shape
// against what the task really gives the trainer.
#include <gtest/gtest.h>

#include "coordinator/grid.h"
#include "experiments/gpu_memory.h"
#include "experiments/registry.h"
#include "experiments/task.h"
#include "worker/model.h"

using namespace attnsweep;

namespace {

ModelConfig model_config_of_shape(const ModelShape& s) {
  ModelConfig mc;
  mc.head = s.head == ModelShape::Head::classify  ? Head::classify
            : s.head == ModelShape::Head::readout ? Head::readout
                                                  : Head::token_regress;
  mc.tokens = s.tokens;
  mc.in_dim = s.in_dim;
  mc.vocab = s.vocab;
  mc.classes = s.classes;
  mc.cls = s.cls;
  mc.pad_id = s.padded ? 0 : -1;
  mc.dim = s.dim;
  mc.layers = s.layers;
  mc.heads = s.heads;
  mc.mlp_ratio = s.head == ModelShape::Head::readout ? 4 : s.mlp_ratio;
  return mc;
}

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

void expect_shape_is_the_tasks(const json& cfg) {
  const TaskDef* t = task_of(cfg);
  ASSERT_NE(t->model_shape, nullptr) << t->name;
  const ModelShape s = t->model_shape(cfg);
  const Caught c = catch_training(cfg);
  ASSERT_TRUE(c.called) << t->name;
  EXPECT_EQ(s.tokens, c.data.tokens) << t->name;
  EXPECT_EQ(s.in_dim, c.data.in_dim) << t->name;
  EXPECT_EQ(s.classes, c.data.classes) << t->name;
  EXPECT_EQ(s.vocab, c.data.vocab) << t->name;
  EXPECT_EQ(s.padded, c.data.pad_id >= 0) << t->name;
  const ModelShape::Head head = c.data.classes > 0               ? ModelShape::Head::classify
                                : c.data.targets_per_sample == 1 ? ModelShape::Head::readout
                                                                 : ModelShape::Head::token_regress;
  EXPECT_EQ(s.head, head) << t->name;
  EXPECT_EQ(s.dim, c.config.at("dim").get<int64_t>()) << t->name;
  EXPECT_EQ(s.layers, c.config.at("layers").get<int64_t>()) << t->name;
  EXPECT_EQ(s.heads, c.config.at("heads").get<int64_t>()) << t->name;
  EXPECT_EQ(s.cls, c.config.value("cls", false)) << t->name;
  if (s.head != ModelShape::Head::readout) {
    EXPECT_EQ(s.mlp_ratio, c.config.at("mlp_ratio").get<int64_t>()) << t->name;
  }
  // The parameters counted are the model's own.
  const Model m(model_config_of_shape(s));
  EXPECT_EQ(model_gpu_memory(s, 1, false).parameters, 4 * m.num_params()) << t->name;
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
  // (4 * 16 int32): 16640 bytes, grown to 1.25x.
  EXPECT_EQ(m.workspace, 16640 + 16640 / 4);
  EXPECT_EQ(m.context, kCudaContextBytes);
  EXPECT_EQ(m.total(), kCudaContextBytes + 4936 + 4936 + 9872 + 70496 + 12560 + 20800);
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
