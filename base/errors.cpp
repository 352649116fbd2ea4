#include "base/errors.h"

#include <utility>

namespace attnsweep {
namespace {

std::string join_lines(const std::vector<std::string>& lines) {
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) out += (i ? "\n" : "") + lines[i];
  return out;
}

}  // namespace

InputError::InputError(std::vector<std::string> p) : Error(join_lines(p)), problems(std::move(p)) {}

ErrorKind error_kind(const std::exception& e) noexcept {
  if (const auto* typed = dynamic_cast<const Error*>(&e)) return typed->kind();
  return ErrorKind::transient;
}

const char* error_kind_name(ErrorKind k) noexcept {
  switch (k) {
    case ErrorKind::input: return "input";
    case ErrorKind::transient: return "transient";
    case ErrorKind::deterministic: return "deterministic";
    case ErrorKind::internal: return "internal";
  }
  return "?";
}

}  // namespace attnsweep
