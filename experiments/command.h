// The command task (experiments/command.cpp): a cell runs the user's own program. The
// grid's `command` section names the program (an argument list with "{key}" where a
// cell's value goes) and declares the program's own keys (name and type), which are
// then validated and swept like built-in keys (experiments/params.h DeclaredKeysScope).
// The effective config holds the section as canonical JSON text under the key
// `command`, so a cell file is self-contained and the cell id changes with the program.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "experiments/params.h"

namespace attnsweep {

using json = nlohmann::json;

struct CommandSection {
  std::vector<std::string> argv;  // as given: "{lr}" not yet substituted
  std::vector<ParamSpec> keys;    // the declared keys
  std::string text;               // canonical JSON text: the value of the config's `command` key
};

// Reads a `command` section ({"argv": [...], "keys": {name: type or {type, default, min,
// max, choices, description}}}). On problems appends (JSON path under `path`, message)
// to *problems and returns nullopt; *partial (when given) still gets the keys declared
// well, so the grid's other problems are reported without an echo of "unknown key".
std::optional<CommandSection> read_command_section(const json& section, const std::string& path,
                                                   std::vector<std::pair<std::string, std::string>>* problems,
                                                   CommandSection* partial = nullptr);

// The program's argument list for an effective config: each "{key}" replaced by the
// cell's value as text ("{{" and "}}" are literal braces). Never through a shell.
// Throws std::runtime_error naming the argument on an unknown key.
std::vector<std::string> command_argv(const json& config);

}  // namespace attnsweep
