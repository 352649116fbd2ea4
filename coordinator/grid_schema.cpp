// `attnsweep schema`: the grid format as a JSON Schema (draft 2020-12), generated from
// the task registry's keys (experiments/registry.h) and the grid-level resources, so that
// editors validate grids as `plan` does (docs/grid-schema.json is its output).
#include <map>
#include <set>
#include <string>

#include "coordinator/grid.h"
#include "experiments/params.h"
#include "experiments/registry.h"
#include "kernels/activation.h"

namespace attnsweep {

namespace {

// The schema of one value of a key (what canonical_value accepts).
json value_schema(const ParamSpec& spec) {
  constexpr double kUnbounded = 1e299;  // params.cpp writes "no bound" as +-1e300
  json v;
  auto bounds = [&](json& o) {
    if (spec.min > -kUnbounded) o["minimum"] = spec.min;
    if (spec.max < kUnbounded) o["maximum"] = spec.max;
  };
  switch (spec.type) {
    case ParamType::integer:
      v["type"] = "integer";
      bounds(v);
      break;
    case ParamType::number:
      v["type"] = "number";
      bounds(v);
      break;
    case ParamType::boolean: v["type"] = "boolean"; break;
    case ParamType::string:
      v["type"] = "string";
      if (!spec.choices.empty()) v["enum"] = spec.choices;
      break;
    case ParamType::scale:
      v["anyOf"] =
          json::array({{{"type", "string"}, {"enum", spec.choices}}, {{"type", "number"}, {"exclusiveMinimum", 0}}});
      break;
  }
  if (!spec.description.empty()) v["description"] = spec.description;
  return v;
}

// For each key, the tasks it applies to and the description each gives it: every
// task's keys resolved in order (as cells are) for every activation.
using KeyUses = std::map<std::string, std::map<std::string, std::string>>;  // key -> task -> description
KeyUses tasks_of_keys() {
  KeyUses out;
  for (const TaskDef* task : task_registry())
    for (const std::string& act : activation_names()) {
      json cfg = {{"task", task->name}, {"activation", act}};
      for (const ParamSpec* p : cell_param_specs(task)) {
        const ParamSpec& s = *p;
        if (s.applies && !s.applies(cfg)) continue;
        out[s.name][task->name] = s.description;
        if (!cfg.contains(s.name) && s.default_value) {
          json d = s.default_value(cfg);
          if (!d.is_null()) cfg[s.name] = d;
        }
      }
    }
  return out;
}

}  // namespace

json grid_json_schema() {
  const auto applies = tasks_of_keys();
  const std::vector<std::string> all_tasks = task_names();
  json defs = json::object(), single = json::object(), list = json::object(), match = json::object();
  for (const ParamSpec& s : param_specs()) {
    json v = value_schema(s);
    auto it = applies.find(s.name);
    if (it != applies.end()) {
      // Tasks that describe a shared name differently (n_train: LRA's 96000 or 1000
      // samples) each say theirs; otherwise one description and the tasks it is for.
      std::set<std::string> distinct;
      for (const auto& [task, what] : it->second) distinct.insert(what);
      std::string t;
      if (distinct.size() > 1) {
        for (const auto& [task, what] : it->second) t += (t.empty() ? "" : "; ") + ("task " + task + ": " + what);
        v["description"] = t;
      } else if (it->second.size() < all_tasks.size()) {
        for (const auto& kv : it->second) t += (t.empty() ? "" : ", ") + kv.first;
        v["description"] = *distinct.begin() + " (task " + t + ")";
      }
    }
    defs[s.name] = v;
    const json ref = {{"$ref", "#/$defs/" + s.name}};
    single[s.name] = ref;
    list[s.name] = {{"type", "array"}, {"minItems", 1}, {"items", ref}};
    match[s.name] = {{"anyOf", json::array({ref, {{"type", "array"}, {"minItems", 1}, {"items", ref}}})}};
  }
  json resources = json::object();
  for (const ParamSpec& s : resource_specs()) resources[s.name] = value_schema(s);
  auto object_of = [](json props, bool non_empty) {
    json o = {{"type", "object"}, {"properties", std::move(props)}, {"additionalProperties", false}};
    if (non_empty) o["minProperties"] = 1;
    return o;
  };
  json props = {
      {"name", {{"type", "string"}, {"description", "the grid's name (reports, job names)"}}},
      {"description", {{"type", "string"}, {"description", "free text"}}},
      {"axes", object_of(list, false)},
      {"fixed", object_of(single, false)},
      {"include", {{"type", "array"}, {"items", object_of(single, false)}}},
      {"exclude", {{"type", "array"}, {"items", object_of(match, true)}}},
      {"resources", object_of(resources, false)},
      {"command",
       {{"type", "object"},
        {"properties",
         {{"argv", {{"type", "array"}, {"minItems", 1}, {"items", {{"type", "string"}}}}},
          {"keys", {{"type", "object"}}}}},
        {"required", json::array({"argv"})},
        {"additionalProperties", false}}},
      {"claims", claims_json_schema()},
  };
  props["axes"]["description"] = "key: [values]; the grid is the product of the axes";
  props["fixed"]["description"] = "key: value, set in every cell";
  props["include"]["description"] = "extra cells, each key: value over fixed";
  props["exclude"]["description"] = "cells to drop: every key matches (a list matches any of its values)";
  props["resources"]["description"] = "grid-level settings of the run";
  props["command"]["description"] =
      "the program a command cell runs (docs/own-code.md): argv with {key} placeholders, and its own keys (name: "
      "integer|number|string|boolean); the keys it declares are checked by `attnsweep plan`, not by this schema";
  json schema = {{"$schema", "https://json-schema.org/draft/2020-12/schema"},
                 {"title", "attnsweep grid"},
                 {"description", "A grid of attnsweep cells (docs/grid-format.md); generated by `attnsweep schema`."},
                 {"type", "object"},
                 {"properties", props},
                 {"additionalProperties", false},
                 {"$defs", defs}};
  return schema;
}

}  // namespace attnsweep
