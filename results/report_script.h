// results/plot.py, compiled into the binary: `attnsweep report` writes it to a
// temporary file and runs it with /usr/bin/python3 (matplotlib Agg, h5py, numpy).
#pragma once

#include <string_view>

namespace attnsweep {

std::string_view plot_script();

}  // namespace attnsweep
