// trainer_ref_dump CONFIG_JSON OUT.h5: what tests/integration/trainer_torch.py needs to
// rebuild the trainer's model in PyTorch and compare. Builds the model of CONFIG (keys
// below), initialises it, draws `steps` random batches, and writes
//   /params/<name>        initial parameters (every tensor of the model, its shape)
//   /grads/<name>         gradients of the mean loss on batch 0 at the initial weights
//   /batch/x              [steps, B, N, in_dim] (with vocab > 0: token ids, in_dim 1;
//                         with pad_id >= 0 each row ends in 0..N-2 padding tokens)
//   /batch/y_class        [steps, B] int64 (classify) or /batch/y_value [steps, B] float32
//                         ([steps, B, N] for head token_regress)
//   /loss                 [steps] loss of each step's batch before its update (float64)
//   /lr                   [steps] learning rate of each step
//   /grad_norm            [steps] global gradient norm before clipping
//   /final/<name>         parameters after `steps` optimizer steps
// and the config (with every default filled in) as the root attribute `config`.
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "experiments/rng.h"
#include "experiments/task.h"
#include "experiments/training_keys.h"
#include "results/h5.h"
#include "worker/training/trainer.h"

using namespace attnsweep;

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: trainer_ref_dump CONFIG_JSON OUT.h5\n");
    return 2;
  }
  try {
    json c = json::parse(argv[1]);
    const json defaults = {{"head", "classify"},  {"tokens", 6},       {"in_dim", 5},     {"dim", 16},
                           {"layers", 2},         {"heads", 2},        {"mlp_ratio", 4},  {"classes", 3},
                           {"cls", false},        {"batch", 4},        {"steps", 20},     {"lr", 1e-2},
                           {"weight_decay", 0.1}, {"warmup_steps", 3}, {"clip", 1.0},     {"optimizer", "adamw"},
                           {"seed", 0},           {"init_seed", 0},    {"init_std", 0.0}, {"activation", "softmax"}};
    for (auto it = defaults.begin(); it != defaults.end(); ++it)
      if (!c.contains(it.key())) c[it.key()] = it.value();
    // The other training keys (log_every, lr_schedule, ...) take their declared defaults.
    for (const ParamSpec& s : training_param_specs())
      if (!c.contains(s.name)) c[s.name] = s.default_value(json{{"task", "image"}});
    const bool classify = c["head"] == "classify", per_token = c["head"] == "token_regress";
    TrainingData shape;  // only the shape fields: model_config_of reads them
    shape.tokens = c["tokens"];
    shape.vocab = c.value("vocab", int64_t{0});
    shape.pad_id = c.value("pad_id", int64_t{-1});
    shape.in_dim = per_token         ? c["in_dim"].get<int64_t>()
                   : !classify       ? c["dim"].get<int64_t>()
                   : shape.vocab > 0 ? 1
                                     : c["in_dim"].get<int64_t>();
    shape.classes = classify ? c["classes"].get<int64_t>() : 0;
    shape.targets_per_sample = per_token ? shape.tokens : 1;
    const ModelConfig mc = model_config_of(c, shape);
    const TrainConfig tc = train_config_of(c);
    Trainer tr(mc, tc);
    Model& m = tr.model();
    const int64_t B = tc.batch, S = tc.steps, xsz = B * mc.tokens * mc.in_dim, per = mc.targets_per_sample();

    Rng rng(seed_of({tc.seed, 0xBA7Cull}));
    std::vector<float> x(static_cast<size_t>(S * xsz)), yv(static_cast<size_t>(S * B * per));
    std::vector<int32_t> yc(static_cast<size_t>(S * B));
    std::vector<int64_t> yc64(yc.size());
    for (float& v : x)
      v = shape.vocab > 0 ? static_cast<float>(static_cast<int64_t>(rng.uniform() * static_cast<double>(shape.vocab)))
                          : static_cast<float>(rng.normal());
    if (shape.pad_id >= 0) {  // real ids avoid pad_id; each row keeps 2..N real tokens
      const int64_t N = mc.tokens;
      for (int64_t r = 0; r < S * B; ++r) {
        const int64_t n = 2 + static_cast<int64_t>(rng.uniform() * static_cast<double>(N - 1));
        for (int64_t t = 0; t < N; ++t) {
          float& v = x[static_cast<size_t>(r * N + t)];
          if (t >= n)
            v = static_cast<float>(shape.pad_id);
          else if (v == static_cast<float>(shape.pad_id))
            v = static_cast<float>((shape.pad_id + 1) % shape.vocab);
        }
      }
    }
    for (size_t i = 0; i < yc.size(); ++i) {
      yc[i] = classify ? static_cast<int32_t>(rng.uniform() * static_cast<double>(mc.classes)) : 0;
      yc64[i] = yc[i];
    }
    for (float& v : yv) v = static_cast<float>(rng.normal());

    h5::File f = h5::File::create(argv[2]);
    f.set_attribute_string("config", c.dump());
    auto write_tensors = [&](const std::string& group, const float* base) {
      for (const TensorInfo& t : m.tensors()) {
        if (t.size == 0) continue;
        std::vector<uint64_t> shp(t.shape.begin(), t.shape.end());
        f.write_dataset<float>(group + "/" + t.name, shp, std::span<const float>(base + t.offset, t.size), t.name);
      }
    };
    write_tensors("/params", m.params());
    const uint64_t uS = static_cast<uint64_t>(S), uB = static_cast<uint64_t>(B);
    f.write_dataset<float>("/batch/x", {uS, uB, static_cast<uint64_t>(mc.tokens), static_cast<uint64_t>(mc.in_dim)},
                           std::span<const float>(x), "inputs of every step");
    if (classify)
      f.write_dataset<int64_t>("/batch/y_class", {uS, uB}, std::span<const int64_t>(yc64), "labels");
    else if (per_token)
      f.write_dataset<float>("/batch/y_value", {uS, uB, static_cast<uint64_t>(per)}, std::span<const float>(yv),
                             "targets, one per token");
    else
      f.write_dataset<float>("/batch/y_value", {uS, uB}, std::span<const float>(yv), "targets");

    // Unclipped gradients at the initial weights on batch 0 (step() clips in place).
    m.forward(x.data(), yc.data(), yv.data(), B, false);
    m.backward();
    write_tensors("/grads", m.grads());
    std::vector<double> loss, lr, gn;
    for (int64_t t = 0; t < S; ++t) {
      const auto r = tr.step(x.data() + t * xsz, yc.data() + t * B, yv.data() + t * B * per, B, t, false);
      loss.push_back(r.fwd.loss);
      lr.push_back(r.lr);
      gn.push_back(r.grad_norm);
    }
    f.write_dataset<double>("/loss", {uS}, std::span<const double>(loss), "loss per step");
    f.write_dataset<double>("/lr", {uS}, std::span<const double>(lr), "lr per step");
    f.write_dataset<double>("/grad_norm", {uS}, std::span<const double>(gn), "grad norm per step");
    write_tensors("/final", m.params());
    f.close();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "trainer_ref_dump: %s\n", e.what());
    return 1;
  }
  return 0;
}
