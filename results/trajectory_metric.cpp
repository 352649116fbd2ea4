#include "results/trajectory_metric.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <vector>

namespace attnsweep {

std::optional<TrajectoryMetric> parse_trajectory_metric(const std::string& name, std::string* problem) {
  if (name.rfind("late:", 0) != 0 && name.rfind("growth:", 0) != 0) return std::nullopt;
  // stat:dataset:layerK, the dataset of letters, digits, _ and /, K a positive integer
  const size_t c1 = name.find(':'), c2 = name.rfind(':');
  const std::string stat = name.substr(0, c1), path = c2 > c1 ? name.substr(c1 + 1, c2 - c1 - 1) : "",
                    layer = c2 > c1 ? name.substr(c2 + 1) : "";
  const bool path_ok = !path.empty() && std::all_of(path.begin(), path.end(), [](char ch) {
    return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '/';
  });
  const std::string digits = layer.rfind("layer", 0) == 0 ? layer.substr(5) : "";
  const bool layer_ok = !digits.empty() && digits.size() < 6 &&
                        std::all_of(digits.begin(), digits.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
  if (!path_ok || !layer_ok || std::stoi(digits) < 1) {
    *problem =
        "expected late:<dataset>:layer<k> or growth:<dataset>:layer<k> (k >= 1, e.g. "
        "late:norms/attn_fro:layer4), got \"" +
        name + "\"";
    return std::nullopt;
  }
  TrajectoryMetric t;
  t.stat = stat;
  t.path = path.front() == '/' ? path : "/" + path;
  t.layer = std::stoi(digits);
  return t;
}

double trajectory_metric_value(const h5::File& f, const TrajectoryMetric& m) {
  constexpr double nan = std::numeric_limits<double>::quiet_NaN();
  if (!f.is_dataset(m.path)) return nan;
  const h5::Dataset d = f.open_dataset(m.path);
  const std::vector<uint64_t> shape = d.shape();
  if (shape.size() != 3 || shape[0] < 4 || static_cast<uint64_t>(m.layer) > shape[1] || shape[2] == 0) return nan;
  const std::vector<double> v = d.read<double>();
  const size_t T = shape[0], L = shape[1], H = shape[2];
  auto mean_rows = [&](size_t r0, size_t r1) {  // mean over rows [r0, r1) and heads of the layer
    double s = 0;
    size_t n = 0;
    for (size_t t = r0; t < r1; ++t)
      for (size_t h = 0; h < H; ++h) {
        const double x = v[(t * L + static_cast<size_t>(m.layer - 1)) * H + h];
        if (!std::isfinite(x)) return nan;
        s += x;
        ++n;
      }
    return n ? s / static_cast<double>(n) : nan;
  };
  const size_t q3 = T / 2, q4 = 3 * T / 4;
  const double late = mean_rows(q4, T);
  if (m.stat == "late") return late;
  const double before = mean_rows(q3, q4);
  return late > 0 && before > 0 ? std::log(late / before) : nan;
}

}  // namespace attnsweep
