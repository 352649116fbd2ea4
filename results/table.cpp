#include "results/table.h"

#include <charconv>
#include <cmath>
#include <fstream>
#include <limits>
#include <optional>
#include <stdexcept>

#include "base/atomic_file.h"
#include "kernels/activation.h"

namespace attnsweep {
namespace {

// RFC 4180: quote a field holding a comma, quote or line break; double the quotes.
std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char ch : s) {
    if (ch == '"') out += '"';
    out += ch;
  }
  return out + "\"";
}
}  // namespace

std::string format_number(double v) {
  if (std::isnan(v)) return "";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return ec == std::errc() ? std::string(buf, end) : std::to_string(v);
}

std::string label_value(const nlohmann::json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_integer()) return v.dump();
  if (v.is_number()) return format_number(v.get<double>());
  return v.dump();  // true, false, null, arrays and objects as JSON text
}

std::string Column::csv(size_t i) const {
  switch (type) {
    case Int: return std::to_string(ints[i]);
    case Float: return std::isnan(floats[i]) && !missing_csv.empty() ? missing_csv : format_number(floats[i]);
    case String: return strings[i].empty() && !missing_csv.empty() ? missing_csv : strings[i];
  }
  return {};
}

bool replicate_key(const std::string& k) {
  const std::string last = k.substr(k.rfind('.') == std::string::npos ? 0 : k.rfind('.') + 1);
  return last == "seed" || (last.size() > 5 && last.compare(last.size() - 5, 5, "_seed") == 0);
}

std::string group_label(const std::map<std::string, nlohmann::json>& params,
                        const std::function<bool(const std::string&)>& skip) {
  std::string group;
  for (const auto& [k, v] : params) {
    if (k == "prompt_length" || replicate_key(k) || (skip && skip(k))) continue;
    group += (group.empty() ? "" : " ") + k + "=" + label_value(v);
  }
  return group;
}

std::string activation_label(const std::map<std::string, nlohmann::json>& params) {
  auto it = params.find("activation");
  if (it == params.end() || !it->second.is_string()) return {};
  auto c = params.find("scale");
  const std::string scale_name = c != params.end() && c->second.is_string() ? c->second.get<std::string>() : "";
  const std::optional<ActivationNames> names = look_up_activation(it->second.get<std::string>(), scale_name);
  if (!names) return {};
  const ActivationInfo& info = activation_info(names->activation);
  std::string s;
  if (info.takes_degree) {  // s^p: the papers' name of the polynomial
    static constexpr const char* kSuperscript[] = {"⁰", "¹", "²", "³", "⁴", "⁵", "⁶", "⁷", "⁸", "⁹"};
    auto d = params.find("degree");
    s.push_back('s');
    if (d == params.end() || !d->second.is_number_integer())
      s.append("ᵖ");
    else
      for (char ch : std::to_string(d->second.get<int64_t>())) s.append(ch == '-' ? "⁻" : kSuperscript[ch - '0']);
  } else {
    s.append(info.label);
  }
  if (info.takes_scale) {
    if (c != params.end() && c->second.is_string()) {
      if (names->scale) {
        s += kScales[static_cast<size_t>(*names->scale)].label;
      } else {
        s += ' ';
        s += c->second.get_ref<const std::string&>();
      }
    } else if (c != params.end() && c->second.is_number()) {
      s += " c=";
      s += label_value(c->second);
    }
  }
  return s;
}

Column string_column(std::string name, std::string description, const std::vector<std::string>& values) {
  return Column{Column::String, std::move(name), std::move(description), {}, {}, values, {}};
}
Column float_column(std::string name, std::string description, const std::vector<double>& values) {
  return Column{Column::Float, std::move(name), std::move(description), {}, values, {}, {}};
}
Column int_column(std::string name, std::string description, const std::vector<int64_t>& values) {
  return Column{Column::Int, std::move(name), std::move(description), values, {}, {}, {}};
}

Column json_column(std::string name, std::string description, const std::vector<nlohmann::json>& values) {
  bool all_present = true, all_numeric = true, all_integer = true;
  for (const nlohmann::json& v : values) {
    if (v.is_null()) {
      all_present = false;
      continue;
    }
    if (!v.is_number()) all_numeric = false;
    if (!v.is_number_integer()) all_integer = false;
  }
  Column c;
  c.name = std::move(name);
  c.description = std::move(description);
  if (all_numeric && all_integer && all_present && !values.empty()) {
    c.type = Column::Int;
    for (const nlohmann::json& v : values) c.ints.push_back(v.get<int64_t>());
  } else if (all_numeric) {
    c.type = Column::Float;
    for (const nlohmann::json& v : values) c.floats.push_back(v.is_null() ? kNaN : v.get<double>());
  } else {
    c.type = Column::String;
    for (const nlohmann::json& v : values) c.strings.push_back(v.is_null() ? "" : label_value(v));
  }
  return c;
}

void write_csv(const std::string& path, const std::vector<Column>& cols, size_t rows) {
  const std::string tmp = temp_path_for(path);
  TempFileGuard guard(tmp);
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw std::runtime_error(tmp + ": cannot create file");
    for (size_t c = 0; c < cols.size(); ++c) out << (c ? "," : "") << csv_field(cols[c].name);
    out << "\n";
    for (size_t i = 0; i < rows; ++i) {
      for (size_t c = 0; c < cols.size(); ++c) out << (c ? "," : "") << csv_field(cols[c].csv(i));
      out << "\n";
    }
    out.close();
    if (!out) throw std::runtime_error(tmp + ": write failed");
  }
  commit_file(tmp, path);
  guard.release();
}

void write_column(h5::Group& g, const Column& c) {
  switch (c.type) {
    case Column::Int: g.write_dataset<int64_t>(c.name, {c.ints.size()}, c.ints, c.description); break;
    case Column::Float: g.write_dataset<double>(c.name, {c.floats.size()}, c.floats, c.description); break;
    case Column::String: g.write_strings(c.name, c.strings, c.description); break;
  }
}

}  // namespace attnsweep
