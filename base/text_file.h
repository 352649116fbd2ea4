// A whole file read into a string: grids, manifests, cell configs, status files and
// locks (the one reader of the layers above).
#pragma once

#include <string>

namespace attnsweep {

// Throws std::runtime_error "PATH: cannot read file (errno text)" when the file cannot
// be opened or a read fails part way (a directory: "Is a directory").
std::string read_text(const std::string& path);

}  // namespace attnsweep
