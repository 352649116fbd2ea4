#include "experiments/task.h"

#include <stdexcept>

namespace attnsweep {

ActivationSpec activation_spec_of(const json& config) {
  ActivationSpec spec;
  const std::string act = config.value("activation", std::string("softmax"));
  const std::optional<Activation> id = activation_from_name(act);
  if (!id) throw std::runtime_error("activation: unknown value \"" + act + "\"");
  spec.activation = *id;
  spec.degree = config.value("degree", 1);
  if (config.contains("scale")) {
    const json& s = config["scale"];
    if (s.is_number()) {
      spec.scale = ScaleKind::value;
      spec.scale_value = s.get<double>();
    } else {
      const std::string name = s.get<std::string>();
      const std::optional<ScaleKind> kind = scale_from_name(name);
      if (!kind) throw std::runtime_error("scale: unknown value \"" + name + "\"");
      spec.scale = *kind;
    }
  }
  return spec;
}

TaskOutput run_task(const json& config, const TaskContext& ctx) {
  const std::string task = config.at("task").get<std::string>();
  if (task == "norm_probe") return run_norm_probe(config, ctx);
  if (task == "synthetic") return run_synthetic(config, ctx);
  if (task == "image") return run_image(config, ctx);
  if (task == "icl_regression") return run_icl_regression(config, ctx);
  if (task == "listops") return run_listops(config, ctx);
  if (task == "pde") return run_pde(config, ctx);
  throw std::runtime_error("task: \"" + task + "\" is not implemented");
}

}  // namespace attnsweep
