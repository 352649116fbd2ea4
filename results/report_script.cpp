#include "results/report_script.h"

#include "plot_script.h"  // generated from results/plot.py (results/CMakeLists.txt)

namespace attnsweep {

std::string_view plot_script() {
  return {kPlotScript, sizeof kPlotScript - 1};
}

}  // namespace attnsweep
