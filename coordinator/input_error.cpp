#include "coordinator/input_error.h"

#include <utility>

namespace attnsweep {
namespace {

std::string join_lines(const std::vector<std::string>& lines) {
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) out += (i ? "\n" : "") + lines[i];
  return out;
}

}  // namespace

InputError::InputError(std::vector<std::string> p) : std::runtime_error(join_lines(p)), problems(std::move(p)) {}

}  // namespace attnsweep
