#include "experiments/task.h"

#include "experiments/registry.h"

#include <stdexcept>

namespace attnsweep {

const std::vector<const TaskDef*>& task_registry() {
  static const std::vector<const TaskDef*> tasks = {&norm_probe_task(), &image_task(), &icl_regression_task(),
                                                    &listops_task(),    &pde_task(),   &synthetic_task(),
                                                    &command_task()};
  return tasks;
}

const TaskDef* find_task(std::string_view name) {
  for (const TaskDef* t : task_registry())
    if (t->name == name) return t;
  return nullptr;
}

const TaskDef* task_of(const json& config) {
  auto it = config.find("task");
  if (it == config.end() || !it->is_string()) return nullptr;
  return find_task(it->get_ref<const std::string&>());
}

TaskOutput run_task(const json& config, const TaskContext& ctx) {
  const std::string task = config.at("task").get<std::string>();
  const TaskDef* t = find_task(task);
  if (t == nullptr || t->run == nullptr) throw std::runtime_error("task: \"" + task + "\" is not implemented");
  return t->run(config, ctx);
}

json fusion_identity(const json& config) {
  const TaskDef* task = task_of(config);
  if (!task || task->fusion.may_differ.empty()) return nullptr;
  json c = config;
  for (const std::string& k : task->fusion.may_differ) c.erase(k);
  return c;
}

std::string fusion_data_key(const json& config) {
  const TaskDef* task = task_of(config);
  json d = json::object();
  if (task)
    for (const std::string& k : task->fusion.data) d[k] = config.value(k, json());
  return d.dump();
}

}  // namespace attnsweep
