#include "coordinator/json_text.h"

#include <algorithm>
#include <functional>
#include <set>
#include <utility>
#include <vector>

#include "base/errors.h"

namespace attnsweep {

using ordered_json = nlohmann::ordered_json;

std::string dotted(const std::string& prefix, const std::string& key) {
  return prefix.empty() ? key : prefix + "." + key;
}
std::string indexed(const std::string& prefix, size_t i) {
  return prefix + "[" + std::to_string(i) + "]";
}

namespace {

std::pair<size_t, size_t> line_col(const std::string& text, size_t byte) {
  // nlohmann's byte count includes the offending character.
  const size_t pos = std::min(byte > 0 ? byte - 1 : 0, text.size());
  size_t line = 1, line_start = 0;
  for (size_t i = 0; i < pos; ++i)
    if (text[i] == '\n') ++line, line_start = i + 1;
  return {line, pos - line_start + 1};
}

// Paths of keys that appear twice in one object, from nlohmann's parser callback.
class DuplicateKeys {
 public:
  bool operator()(int /*depth*/, ordered_json::parse_event_t event, ordered_json& parsed) {
    using E = ordered_json::parse_event_t;
    switch (event) {
      case E::object_start:
      case E::array_start: stack_.push_back({event == E::object_start, child_path(), "", 0, {}}); break;
      case E::object_end:
      case E::array_end:
        stack_.pop_back();
        value_done();
        break;
      case E::key: {
        Frame& f = stack_.back();
        f.key = parsed.get<std::string>();
        if (!f.keys.insert(f.key).second) paths.push_back(dotted(f.path, f.key));
        break;
      }
      case E::value: value_done(); break;
    }
    return true;
  }
  std::vector<std::string> paths;

 private:
  struct Frame {
    bool object;
    std::string path;
    std::string key;  // object: the key being read
    size_t index;     // array: the element being read
    std::set<std::string> keys;
  };
  std::string child_path() const {
    if (stack_.empty()) return "";
    const Frame& f = stack_.back();
    return f.object ? dotted(f.path, f.key) : indexed(f.path, f.index);
  }
  void value_done() {
    if (!stack_.empty() && !stack_.back().object) ++stack_.back().index;
  }
  std::vector<Frame> stack_;
};

}  // namespace

ordered_json parse_json_text(const std::string& text, const std::string& label) {
  try {
    DuplicateKeys dups;
    ordered_json root = ordered_json::parse(text, std::ref(dups));
    if (!dups.paths.empty()) {
      std::vector<std::string> lines;
      std::set<std::string> seen;  // each path once
      for (const auto& p : dups.paths) {
        std::string line =
            label + ": " + (p.empty() ? "" : p + ": ") + "duplicate key: only one of its values would be used";
        if (seen.insert(line).second) lines.push_back(std::move(line));
      }
      throw InputError(std::move(lines));
    }
    return root;
  } catch (const nlohmann::json::parse_error& e) {
    auto [line, col] = line_col(text, e.byte);
    std::string msg = e.what();
    // Drop nlohmann's "[json.exception.parse_error.101] parse error at line L, column C: ".
    if (size_t p = msg.find("parse error"); p != std::string::npos)
      if (size_t q = msg.find(": ", p); q != std::string::npos) msg = msg.substr(q + 2);
    throw InputError({label + ":" + std::to_string(line) + ":" + std::to_string(col) + ": JSON syntax error: " + msg});
  } catch (const nlohmann::json::out_of_range& e) {
    // A number beyond double's range (1e400): nlohmann throws out_of_range.406, without
    // a position. Found by tests/fuzz (corpus/grid/regress_number_overflow*.json).
    std::string msg = e.what();
    if (size_t p = msg.find("] "); p != std::string::npos) msg = msg.substr(p + 2);
    throw InputError({label + ": JSON number out of range: " + msg});
  }
}

}  // namespace attnsweep
