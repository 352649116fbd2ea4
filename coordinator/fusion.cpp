#include "coordinator/fusion.h"

#include <algorithm>
#include <functional>
#include <map>
#include <vector>

#include "base/sha256.h"
#include "experiments/registry.h"

namespace attnsweep {

namespace {
constexpr size_t kNone = static_cast<size_t>(-1);
}  // namespace

std::string fusion_key(const json& config) {
  const json identity = fusion_identity(config);
  return identity.is_null() ? "" : sha256_hex(canonical_json(identity)).substr(0, 16);
}

int fuse_size(const Grid& grid, int flag) {
  if (flag > 0) return flag;
  if (grid.resources.fuse > 0) return grid.resources.fuse;
  int k = 1;
  for (const TaskDef* t : task_registry())
    for (const Cell& c : grid.cells)
      if (c.config.value("task", std::string()) == t->name) {
        k = std::max(k, t->fusion.default_size);
        break;
      }
  return k;
}

FusionPlan plan_fusion(const Grid& grid) {
  FusionPlan p;
  std::map<std::string, size_t> rows;
  for (size_t i = 0; i < grid.cells.size(); ++i) {
    const json& c = grid.cells[i].config;
    p.key.push_back(fusion_key(c));
    p.data_key.push_back(fusion_data_key(c));
    if (p.key.back().empty()) {
      p.key_index_.push_back(kNone);
      continue;
    }
    auto [it, fresh] = rows.emplace(p.key.back(), p.members_.size());
    if (fresh) p.members_.emplace_back();
    p.members_[it->second].push_back(i);
    p.key_index_.push_back(it->second);
  }
  p.groups_of_key = p.members_.size();
  return p;
}

std::vector<size_t> FusionPlan::alike(size_t i) const {
  return key_index_[i] == kNone ? std::vector<size_t>{} : members_[key_index_[i]];
}

std::vector<size_t> pick_companions(const FusionPlan& plan, size_t lead, const std::vector<size_t>& candidates, int k) {
  std::vector<size_t> out;
  for (const bool same_data : {true, false})
    for (size_t c : candidates) {
      if (static_cast<int>(out.size()) >= k - 1) return out;
      if (c != lead && (plan.data_key[c] == plan.data_key[lead]) == same_data) out.push_back(c);
    }
  return out;
}

int group_size_cap(int k, size_t alike, size_t slots) {
  slots = std::max<size_t>(1, slots);
  return std::max(1, std::min<int>(k, static_cast<int>((alike + slots - 1) / slots)));
}

std::vector<std::vector<size_t>> static_groups(const FusionPlan& plan, int k, size_t slots) {
  std::vector<std::vector<size_t>> groups;
  std::vector<bool> placed(plan.key.size(), false);
  for (size_t i = 0; i < plan.key.size(); ++i) {
    if (placed[i]) continue;
    std::vector<size_t> candidates;
    for (size_t j : plan.alike(i))
      if (!placed[j] && j != i) candidates.push_back(j);
    std::vector<size_t> g{i};
    const int cap = group_size_cap(k, plan.alike(i).size(), slots);
    if (cap > 1)
      for (size_t j : pick_companions(plan, i, candidates, cap)) g.push_back(j);
    for (size_t j : g) placed[j] = true;
    groups.push_back(std::move(g));
  }
  return groups;
}

double group_cost_s(const Grid& grid, const FusionPlan& plan, const std::vector<size_t>& group) {
  double total = 0;
  for (size_t n = 0; n < group.size(); ++n) {
    const Cell& c = grid.cells[group[n]];
    const TaskDef* t = task_of(c.config);
    // A cell shares the group's batches only with a member of equal data key before it;
    // one with data of its own draws and steps its own (measured: no saving, see fusion.h).
    bool shares_data = false;
    for (size_t m = 0; m < n; ++m) shares_data |= plan.data_key[group[m]] == plan.data_key[group[n]];
    const bool added = shares_data && t != nullptr && t->fusion.added_cell_share != nullptr;
    total += c.est_cost_s * (added ? t->fusion.added_cell_share(c.config) : 1.0);
  }
  return total;
}

double estimated_wall_s(std::vector<double> costs, int slots) {
  std::sort(costs.begin(), costs.end(), std::greater<>());
  std::vector<double> load(static_cast<size_t>(std::max(1, slots)), 0.0);
  for (double c : costs) *std::min_element(load.begin(), load.end()) += c;
  return *std::max_element(load.begin(), load.end());
}

double loaded_wall_s(double idle_wall_s, int slots, double cores, double others) {
  if (!(cores > 0) || !(others > 0)) return idle_wall_s;
  return idle_wall_s * std::max(1.0, (others + std::max(1, slots)) / cores);
}

}  // namespace attnsweep
