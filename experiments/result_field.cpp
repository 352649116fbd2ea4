#include "experiments/result_field.h"

#include <utility>

namespace attnsweep {

using K = ResultKind;
using T = ResultType;

ResultField make_final_metric(std::string name, std::string description, bool fitted, std::string when,
                              std::string label) {
  ResultField r;
  r.kind = K::final_metric, r.name = std::move(name), r.type = T::float64, r.when = std::move(when);
  r.description = std::move(description), r.fitted = fitted, r.label = std::move(label);
  return r;
}

ResultField make_dataset(std::string path, ResultType type, std::vector<std::string> shape, std::string description,
                         bool trajectory, std::string when, std::string label) {
  ResultField r;
  r.kind = K::dataset, r.name = std::move(path), r.type = type, r.shape = std::move(shape);
  r.when = std::move(when), r.description = std::move(description), r.trajectory = trajectory;
  r.label = std::move(label);
  return r;
}

}  // namespace attnsweep
