// What a failure is, for whoever handles it: the command line prints an input error one
// line a problem and exits 2 (docs/command-line.md#exit-codes); a cell's child exits so
// that the coordinator retries a transient failure only (worker/training/run_cell.cpp,
// docs/reliability.md). Every error attnsweep throws on purpose is one of the four kinds;
// an exception of a library (std::bad_alloc, a filesystem error, HDF5's) counts as
// transient, as every failure did before there were kinds.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

namespace attnsweep {

enum class ErrorKind {
  input,          // a grid, a cell config, an override, a command-line value, a file read as input
  transient,      // I/O, a lost peer, a device: another attempt may succeed
  deterministic,  // what the cell met would meet it again (a command cell's malformed metrics line)
  internal,       // a broken invariant of attnsweep's own: a bug
};

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
  virtual ErrorKind kind() const noexcept = 0;
};

// One line per problem, each "FILE: JSON.PATH: what was expected" where there is a file.
struct InputError final : Error {
  std::vector<std::string> problems;
  explicit InputError(std::vector<std::string> p);  // one problem: InputError({"..."})
  ErrorKind kind() const noexcept override { return ErrorKind::input; }
};

struct TransientError final : Error {
  using Error::Error;
  ErrorKind kind() const noexcept override { return ErrorKind::transient; }
};

struct DeterministicError final : Error {
  using Error::Error;
  ErrorKind kind() const noexcept override { return ErrorKind::deterministic; }
};

struct InternalError final : Error {
  using Error::Error;
  ErrorKind kind() const noexcept override { return ErrorKind::internal; }
};

// The kind of any exception (transient where it is not an Error).
ErrorKind error_kind(const std::exception& e) noexcept;
// Whether another attempt of what failed so may succeed: a transient failure only.
inline bool worth_retrying(ErrorKind k) noexcept {
  return k == ErrorKind::transient;
}
// "input", "transient", "deterministic", "internal".
const char* error_kind_name(ErrorKind k) noexcept;

}  // namespace attnsweep
