// JSON text as an input file: grids (coordinator/grid.cpp) and cell configs. A syntax
// error becomes `FILE:LINE:COL: JSON syntax error: ...`, a key given twice in one object
// `FILE: PATH: duplicate key: ...` (nlohmann keeps one of the two values silently, so
// `"seed": [0], ..., "seed": [1]` would sweep only one of them), a number beyond
// double's range `FILE: JSON number out of range: ...`; all as InputError (exit 2).
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <string>

namespace attnsweep {

// The order-preserving parse of text read from `label` (the file's name in messages).
nlohmann::ordered_json parse_json_text(const std::string& text, const std::string& label);

// JSON paths of messages: "a.b" and "a[3]" (a key at the top level is just its name).
std::string dotted(const std::string& prefix, const std::string& key);
std::string indexed(const std::string& prefix, size_t i);

}  // namespace attnsweep
