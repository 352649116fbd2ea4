// Grid files: validation messages, expansion, dropping and merging, stable cell ids.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "coordinator/grid.h"
#include "experiments/command.h"
#include "experiments/params.h"
#include "experiments/registry.h"
#include "kernels/activation.h"

namespace attnsweep {
namespace {

namespace fs = std::filesystem;

const fs::path kSource = ATTNSWEEP_SOURCE_DIR;

std::string read(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The problems of a grid text that must fail; fails the test if it loads.
std::vector<std::string> problems_of(const std::string& text, const std::string& label = "grid.json") {
  try {
    Grid g = parse_grid(text, label);
    ADD_FAILURE() << "expected an InputError, got a grid of " << g.cells.size() << " cells";
  } catch (const InputError& e) {
    return e.problems;
  }
  return {};
}

bool has(const std::vector<std::string>& lines, const std::string& line) {
  return std::find(lines.begin(), lines.end(), line) != lines.end();
}

std::string joined(const std::vector<std::string>& lines) {
  std::string s;
  for (const auto& l : lines) s += l + "\n";
  return s;
}

// ---- expansion ----------------------------------------------------------------------

TEST(Grid, ProductSizeAndOrder) {
  Grid g = parse_grid(R"({"axes": {"task": ["norm_probe"], "activation": ["poly"], "degree": [1, 2, 3],
                                    "prompt_length": [16, 32], "seed": [0, 1]}})",
                      "dir/sweep.json");
  ASSERT_EQ(g.cells.size(), 12u);
  EXPECT_EQ(g.name, "sweep");  // default: the file stem
  // The user's axis order: the first axis varies slowest, the last fastest.
  EXPECT_EQ(g.cells[0].config["degree"], 1);
  EXPECT_EQ(g.cells[0].config["seed"], 0);
  EXPECT_EQ(g.cells[1].config["seed"], 1);
  EXPECT_EQ(g.cells[2].config["prompt_length"], 32);
  EXPECT_EQ(g.cells[4].config["degree"], 2);
  EXPECT_EQ(g.cells[11].config["degree"], 3);
  // Defaults filled in, canonical types.
  EXPECT_EQ(g.cells[0].config["samples"], 32);
  EXPECT_EQ(g.cells[0].config["scale"], "none");
  EXPECT_TRUE(g.cells[0].config["degree"].is_number_integer());
  for (const auto& c : g.cells) {
    EXPECT_EQ(c.id.size(), 16u);
    EXPECT_EQ(c.id, cell_id(c.config));
    EXPECT_GT(c.est_cost_s, 0.0);
  }
}

TEST(Grid, FixedIsOverriddenByCellValues) {
  Grid g = parse_grid(R"({"axes": {"task": ["norm_probe"], "seed": [5]},
                         "fixed": {"prompt_length": 16, "seed": 1, "samples": 4},
                         "include": [{"task": "norm_probe", "prompt_length": 32}]})",
                      "g.json");
  ASSERT_EQ(g.cells.size(), 2u);
  EXPECT_EQ(g.cells[0].config["seed"], 5);  // axes over fixed
  EXPECT_EQ(g.cells[0].config["samples"], 4);
  EXPECT_EQ(g.cells[1].config["prompt_length"], 32);  // include over fixed
  EXPECT_EQ(g.cells[1].config["seed"], 1);            // fixed completes include entries
}

TEST(Grid, IncludeAndExcludeWithLists) {
  Grid g = parse_grid(R"({
    "axes": {"task": ["norm_probe"], "activation": ["softmax", "relu"], "prompt_length": [16, 32, 64]},
    "include": [{"task": "norm_probe", "activation": "sigmoid", "prompt_length": 16}],
    "exclude": [{"activation": "relu", "prompt_length": [32, 64]}, {"activation": "sigmoid"}]
  })",
                      "g.json");
  // softmax x 3 + relu x 1; the include entry is itself excluded.
  ASSERT_EQ(g.cells.size(), 4u);
  int relu = 0;
  for (const auto& c : g.cells) {
    EXPECT_NE(c.config["activation"], "sigmoid");
    if (c.config["activation"] == "relu") {
      ++relu;
      EXPECT_EQ(c.config["prompt_length"], 16);
    }
  }
  EXPECT_EQ(relu, 1);

  Grid with_include = parse_grid(R"({
    "axes": {"task": ["norm_probe"], "prompt_length": [16]},
    "include": [{"task": "norm_probe", "activation": "sigmoid", "prompt_length": 16},
                {"task": "norm_probe", "prompt_length": 16}]
  })",
                                 "g.json");
  ASSERT_EQ(with_include.cells.size(), 2u);  // the second include entry is the product cell again
  EXPECT_EQ(with_include.cells[1].config["activation"], "sigmoid");
}

TEST(Grid, ExcludeKeyAbsentFromCellDoesNotMatch) {
  // degree does not apply to softmax, so {"degree": 1} cannot exclude a softmax cell.
  Grid g = parse_grid(R"({"axes": {"task": ["norm_probe"], "activation": ["softmax", "poly"], "degree": [1, 2],
                                    "prompt_length": [16]},
                         "exclude": [{"degree": 1}]})",
                      "g.json");
  ASSERT_EQ(g.cells.size(), 2u);
  EXPECT_EQ(g.cells[0].config["activation"], "softmax");
  EXPECT_FALSE(g.cells[0].config.contains("degree"));
  EXPECT_EQ(g.cells[1].config["degree"], 2);
}

TEST(Grid, ContractExampleDropsDegreeAndScaleForSoftmax) {
  // docs/grid-format.md's example, on the norm probe (the image task is not implemented yet).
  Grid g = parse_grid(R"({
    "name": "probe-poly",
    "axes": {"task": ["norm_probe"], "activation": ["softmax", "poly", "relu"], "degree": [1, 3],
             "scale": ["none", "inv_sqrt_n", "inv_n"], "prompt_length": [16, 49, 196], "seed": [0, 1, 2]},
    "fixed": {"dim": 64, "samples": 8},
    "include": [{"task": "norm_probe", "activation": "sigmoid", "prompt_length": 49, "seed": 0}],
    "exclude": [{"activation": "poly", "degree": 1, "scale": "none"}],
    "resources": {"gpus_per_cell": 1, "timeout_s": 3600, "retries": 2}
  })",
                      "g.json");
  EXPECT_EQ(g.name, "probe-poly");
  EXPECT_EQ(g.resources.gpus_per_cell, 1);
  EXPECT_EQ(g.resources.timeout_s, 3600.0);
  EXPECT_EQ(g.resources.retries, 2);
  std::map<std::string, int> per_activation;
  std::set<std::pair<int64_t, int64_t>> softmax_points;
  for (const auto& c : g.cells) {
    const std::string a = c.config["activation"];
    ++per_activation[a];
    if (a == "softmax" || a == "sigmoid") {
      EXPECT_FALSE(c.config.contains("degree")) << c.config.dump();
      EXPECT_FALSE(c.config.contains("scale")) << c.config.dump();
    }
    if (a == "relu") {
      EXPECT_FALSE(c.config.contains("degree")) << c.config.dump();
    }
    if (a == "softmax")
      softmax_points.insert({c.config["prompt_length"].get<int64_t>(), c.config["seed"].get<int64_t>()});
  }
  EXPECT_EQ(per_activation["softmax"], 9);  // one per (prompt_length, seed), not six
  EXPECT_EQ(softmax_points.size(), 9u);
  EXPECT_EQ(per_activation["poly"], 5 * 9);  // 2 degrees x 3 scales, minus degree 1 unscaled
  EXPECT_EQ(per_activation["relu"], 3 * 9);  // the degree axis merges away
  EXPECT_EQ(per_activation["sigmoid"], 1);
  EXPECT_EQ(g.cells.size(), 82u);
  EXPECT_EQ(g.resources.retries, 2);
}

TEST(Grid, ResourcesDefaults) {
  Grid g = parse_grid(R"({"fixed": {"task": "synthetic"}})", "g.json");
  ASSERT_EQ(g.cells.size(), 1u);  // no axes: one cell from fixed alone
  EXPECT_EQ(g.resources.gpus_per_cell, 1);
  EXPECT_EQ(g.resources.timeout_s, 0.0);
  EXPECT_EQ(g.resources.retries, -1);
}

TEST(Grid, RankTimeoutIsAResource) {
  Grid g = parse_grid(R"({"fixed": {"task": "synthetic"}, "resources": {"rank_timeout_s": 600}})", "g.json");
  EXPECT_EQ(g.resources.rank_timeout_s, 600.0);
  EXPECT_EQ(parse_grid(R"({"fixed": {"task": "synthetic"}})", "g.json").resources.rank_timeout_s, 0.0);  // not given
  for (const char* bad : {R"("soon")", "0.5", "-3"}) {
    try {
      parse_grid(std::string(R"({"fixed": {"task": "synthetic"}, "resources": {"rank_timeout_s": )") + bad + "}}",
                 "g.json");
      ADD_FAILURE() << "accepted rank_timeout_s " << bad;
    } catch (const InputError& e) {
      ASSERT_EQ(e.problems.size(), 1u);
      EXPECT_NE(e.problems[0].find("g.json: resources.rank_timeout_s: expected a number"), std::string::npos)
          << e.problems[0];
    }
  }
}

TEST(Grid, GpusPerCellIsTheDefaultOfDevices) {
  // resources.gpus_per_cell sets `devices` of every training cell that does not set its
  // own; cells of tasks that do not train (norm_probe) drop the key as any other.
  Grid g = parse_grid(R"({"axes": {"task": ["image", "norm_probe"], "prompt_length": [16]},
                          "fixed": {"batch": 8},
                          "include": [{"task": "image", "prompt_length": 49, "devices": 1}],
                          "resources": {"gpus_per_cell": 2}})",
                      "g.json");
  ASSERT_EQ(g.cells.size(), 3u);
  EXPECT_EQ(g.cells[0].config.at("devices"), 2);
  EXPECT_FALSE(g.cells[1].config.contains("devices"));
  EXPECT_EQ(g.cells[2].config.at("devices"), 1);
  // A value the cell cannot take is reported where it came from.
  try {
    parse_grid(R"({"fixed": {"task": "image", "prompt_length": 16, "batch": 9}, "resources": {"gpus_per_cell": 2}})",
               "g.json");
    FAIL() << "batch 9 on 2 devices accepted";
  } catch (const InputError& e) {
    ASSERT_EQ(e.problems.size(), 1u);
    EXPECT_NE(e.problems[0].find("resources.gpus_per_cell"), std::string::npos) << e.problems[0];
    EXPECT_NE(e.problems[0].find("not divisible"), std::string::npos) << e.problems[0];
  }
}

TEST(Grid, OnlyIncludeEntriesMakeOnlyThoseCells) {
  Grid g = parse_grid(R"({"fixed": {"task": "synthetic"}, "include": [{"seconds": 1}, {"seconds": 2}]})", "g.json");
  ASSERT_EQ(g.cells.size(), 2u);
  EXPECT_EQ(g.cells[0].config["seconds"], 1.0);
  EXPECT_EQ(g.cells[1].config["seconds"], 2.0);
}

TEST(Grid, DuplicatesMergeKeepingFirstOccurrence) {
  Grid g = parse_grid(R"({"axes": {"task": ["norm_probe"], "seed": [1, 0, 1, 0], "prompt_length": [16]}})", "g.json");
  ASSERT_EQ(g.cells.size(), 2u);
  EXPECT_EQ(g.cells[0].config["seed"], 1);
  EXPECT_EQ(g.cells[1].config["seed"], 0);
  // A key that does not apply merges cells too: activation is dropped for synthetic.
  Grid s = parse_grid(R"({"axes": {"task": ["synthetic"], "activation": ["softmax", "poly"], "seconds": [0, 0.0]}})",
                      "g.json");
  ASSERT_EQ(s.cells.size(), 1u);
  EXPECT_FALSE(s.cells[0].config.contains("activation"));
  EXPECT_FALSE(s.cells[0].config.contains("prompt_length"));
}

TEST(Grid, NormProbeExampleHas273Cells) {
  Grid g = load_grid((kSource / "experiments/grids/norm_probe.json").string());
  EXPECT_EQ(g.name, "norm_probe");
  ASSERT_EQ(g.cells.size(), 273u);
  std::set<std::string> groups, ids;
  std::set<std::pair<int64_t, int64_t>> points;
  for (const auto& c : g.cells) {
    json group = c.config;
    points.insert({group["prompt_length"].get<int64_t>(), group["seed"].get<int64_t>()});
    group.erase("prompt_length");
    group.erase("seed");
    groups.insert(group.dump());
    ids.insert(c.id);
    EXPECT_EQ(c.config["samples"], 32);
  }
  EXPECT_EQ(groups.size(), 13u) << [&] {
    std::string s;
    for (const auto& x : groups) s += x + "\n";
    return s;
  }();
  EXPECT_EQ(points.size(), 7u * 3u);
  EXPECT_EQ(ids.size(), 273u);  // different configs, different ids
}

// ---- ids ----------------------------------------------------------------------------

TEST(CellId, PinnedValues) {
  // Ids are names of result files on disk: they must never change between versions.
  // Expected values are sha256 of the canonical text, computed with Python's hashlib.
  json s = effective_config(json{{"task", "synthetic"}, {"seconds", 1}}, "cell.json");
  EXPECT_EQ(canonical_json(s),
            R"({"crash_attempts":0,"exit_code":0,"hang":false,"seconds":1.0,"seed":0,"task":"synthetic"})");
  EXPECT_EQ(cell_id(s), "257e66eeba77f6bb");
  json p = effective_config(
      json{{"task", "norm_probe"}, {"activation", "poly"}, {"degree", 3.0}, {"scale", 0.25}, {"prompt_length", 16}},
      "cell.json");
  EXPECT_EQ(
      canonical_json(p),
      R"({"activation":"poly","degree":3,"dim":64,"head_dim":16,"prompt_length":16,"samples":32,"scale":0.25,"seed":0,"task":"norm_probe"})");
  EXPECT_EQ(cell_id(p), "39771d1c2a6179a0");
}

// `precision` came after results existed: at its default it is left out of the config,
// so a training cell keeps the id it had before the key (edcdd9b364c5ccff: the id the
// binary of 2026-12-01, before the key, gives this cell); any other value is in the
// config and the id.
TEST(CellId, PrecisionAtItsDefaultKeepsTheIdOfBefore) {
  const json before = effective_config(json{{"task", "image"}, {"prompt_length", 16}}, "cell.json");
  EXPECT_EQ(cell_id(before), "edcdd9b364c5ccff");
  EXPECT_FALSE(before.contains("precision"));
  const json fp32 = effective_config(json{{"task", "image"}, {"prompt_length", 16}, {"precision", "fp32"}}, "c");
  EXPECT_EQ(fp32, before);
  const json bf16 = effective_config(json{{"task", "image"}, {"prompt_length", 16}, {"precision", "bf16"}}, "c");
  EXPECT_EQ(bf16.at("precision"), "bf16");
  EXPECT_NE(cell_id(bf16), cell_id(before));
  EXPECT_EQ(effective_config(bf16, "c"), bf16);  // a result's config reloads to itself
  const std::vector<std::string> p =
      problems_of(R"({"fixed": {"task": "image", "prompt_length": 16, "precision": "fp16"}})");
  EXPECT_TRUE(has(p, R"(grid.json: fixed.precision: unknown value "fp16"; expected one of fp32, bf16, tf32)"))
      << joined(p);
}

TEST(CellId, StableAcrossFormattingAndNumberSpelling) {
  Grid a = parse_grid(R"({"axes": {"task": ["norm_probe"], "prompt_length": [16, 32], "seed": [0, 1]},
                         "fixed": {"samples": 8}})",
                      "a.json");
  Grid b = parse_grid(R"({
      "fixed"   : { "samples" : 8.0 },
      "axes"    : { "seed" : [ 1, 0.0 ], "prompt_length" : [ 32.0, 16 ], "task" : [ "norm_probe" ] }
  })",
                      "b.json");
  ASSERT_EQ(a.cells.size(), 4u);
  ASSERT_EQ(b.cells.size(), 4u);
  std::set<std::string> ia, ib;
  for (const auto& c : a.cells) ia.insert(c.id);
  for (const auto& c : b.cells) ib.insert(c.id);
  EXPECT_EQ(ia, ib);
  EXPECT_NE(a.cells[0].id, b.cells[0].id);  // different expansion order...
  EXPECT_EQ(a.hash, b.hash);                // ...same grid hash
  EXPECT_EQ(a.hash.size(), 64u);

  // number keys: 1 and 1.0 are the same; integer keys: 3.0 and 3 are the same.
  EXPECT_EQ(cell_id(effective_config(json::parse(R"({"task": "synthetic", "seconds": 1})"), "c")),
            cell_id(effective_config(json::parse(R"({"task": "synthetic", "seconds": 1.0})"), "c")));
  EXPECT_EQ(cell_id(effective_config(json::parse(R"({"task": "norm_probe", "prompt_length": 3.0})"), "c")),
            cell_id(effective_config(json::parse(R"({"task": "norm_probe", "prompt_length": 3})"), "c")));
  EXPECT_EQ(
      cell_id(effective_config(
          json::parse(R"({"task": "norm_probe", "activation": "relu", "scale": 2, "prompt_length": 3})"), "c")),
      cell_id(effective_config(
          json::parse(R"({"task": "norm_probe", "activation": "relu", "scale": 2.0, "prompt_length": 3})"), "c")));
  // Different configs, different ids.
  EXPECT_NE(cell_id(effective_config(json::parse(R"({"task": "synthetic", "seconds": 1})"), "c")),
            cell_id(effective_config(json::parse(R"({"task": "synthetic", "seconds": 2})"), "c")));
  EXPECT_NE(cell_id(effective_config(json::parse(R"({"task": "synthetic", "seed": 1})"), "c")),
            cell_id(effective_config(json::parse(R"({"task": "synthetic", "seed": 0})"), "c")));
}

TEST(CellConfig, RoundTripAndDefaults) {
  Grid g = load_grid((kSource / "experiments/grids/norm_probe.json").string());
  for (const auto& c : g.cells) {
    json again = effective_config(c.config, "cell.json");
    EXPECT_EQ(again, c.config);
    EXPECT_EQ(cell_id(again), c.id);
  }
  // A partial cell is completed; keys that do not apply are dropped.
  json e =
      effective_config(json::parse(R"({"task": "norm_probe", "prompt_length": 64, "degree": 2, "hang": true})"), "c");
  EXPECT_EQ(e, json::parse(R"({"task": "norm_probe", "activation": "softmax", "prompt_length": 64, "seed": 0,
                               "samples": 32, "dim": 64, "head_dim": 16})"));
}

TEST(CellConfig, LoadFromFileAndErrors) {
  const fs::path dir = fs::temp_directory_path() / ("attnsweep_test_grid_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string good = (dir / "cell.json").string();
  std::ofstream(good) << R"({"task": "synthetic", "seconds": 0.5, "exit_code": 3})";
  json cfg = load_cell_config(good);
  EXPECT_EQ(cfg["seconds"], 0.5);
  EXPECT_EQ(cfg["exit_code"], 3);
  EXPECT_EQ(cfg["hang"], false);

  const std::string bad = (dir / "bad.json").string();
  std::ofstream(bad) << R"({"task": "norm_probe", "activaton": "poly", "prompt_length": [16], "seed": -2})";
  try {
    load_cell_config(bad);
    ADD_FAILURE() << "bad cell loaded";
  } catch (const InputError& e) {
    EXPECT_TRUE(has(e.problems, bad + ": activaton: unknown key (did you mean \"activation\"?)")) << e.what();
    EXPECT_TRUE(has(e.problems, bad + ": prompt_length: expected a single value, got a list")) << e.what();
    EXPECT_TRUE(has(e.problems, bad + ": seed: expected an integer >= 0, got -2")) << e.what();
  }
  try {
    effective_config(json::parse(R"({"task": "norm_probe", "prompt_length": 20000})"), "cell.json");
    ADD_FAILURE() << "bad cell accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()),
              "cell.json: prompt_length: 20000 is more than task norm_probe can make (1..16384)");
  }
  EXPECT_THROW(effective_config(json::array({1}), "cell.json"), InputError);
  fs::remove_all(dir);
}

// ---- errors -------------------------------------------------------------------------

TEST(GridErrors, MissingFile) {
  try {
    load_grid("no/such/grid.json");
    ADD_FAILURE() << "loaded a missing file";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), "no/such/grid.json: cannot read file (No such file or directory)");
  }
}

TEST(GridErrors, SyntaxErrorHasLineAndColumn) {
  auto p = problems_of("{\n  \"axes\": {\n    \"seed\": [1,,2]\n  }\n}\n");
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].rfind("grid.json:3:16: JSON syntax error: syntax error while parsing value - unexpected ','", 0), 0u)
      << p[0];
  EXPECT_EQ(p[0].find("[json.exception"), std::string::npos) << p[0];
}

TEST(GridErrors, DuplicateKeys) {
  auto p = problems_of(R"({"axes": {"seed": [0], "task": ["norm_probe"], "seed": [1]},
                          "include": [{"seed": 1}, {"seed": 2, "prompt_length": 4, "seed": 3}],
                          "fixed": {"prompt_length": 16}, "fixed": {}})");
  EXPECT_EQ(p,
            (std::vector<std::string>{"grid.json: axes.seed: duplicate key: only one of its values would be used",
                                      "grid.json: include[1].seed: duplicate key: only one of its values would be used",
                                      "grid.json: fixed: duplicate key: only one of its values would be used"}))
      << joined(p);
}

TEST(GridErrors, AllProblemsReportedTogether) {
  auto p = problems_of(R"({
    "axes": {"task": ["norm_probe"], "activaton": ["poly"], "activation": ["poly", "softmx"],
             "degree": [1, "two", 2.5], "prompt_length": [16, 20000]},
    "fixed": {"sead": 1, "samples": [1, 2]},
    "include": [3, {"task": "norm_probe", "prompt_length": 0}],
    "exclude": [{"scale": ["inv_sqrtn"]}],
    "resources": {"retries": -1, "gpus": 2},
    "descripton": "typo"
  })");
  std::string registry_names;  // the registry's activations, in its order
  for (const std::string& a : activation_names()) registry_names += (registry_names.empty() ? "" : ", ") + a;
  const std::vector<std::string> expected = {
      "grid.json: descripton: unknown key (did you mean \"description\"?)",
      "grid.json: axes.activaton: unknown key (did you mean \"activation\"?)",
      "grid.json: axes.activation[1]: unknown value \"softmx\" (did you mean \"softmax\"?); expected one of " +
          registry_names,
      "grid.json: axes.degree[1]: expected an integer in 1..16, got \"two\"",
      "grid.json: axes.degree[2]: expected an integer in 1..16, got 2.5",
      "grid.json: fixed.sead: unknown key (did you mean \"seed\"?)",
      "grid.json: fixed.samples: expected a single value, got a list (to sweep it, move it to axes)",
      "grid.json: include[0]: expected an object of key: value, got 3",
      "grid.json: include[1].prompt_length: expected an integer >= 1, got 0",
      "grid.json: exclude[0].scale[0]: unknown value \"inv_sqrtn\" (did you mean \"inv_sqrt_n\"?); expected one of "
      "none, inv_sqrt_n, inv_n, or a positive number",
      "grid.json: resources.retries: expected an integer in 0..100, got -1",
      "grid.json: resources.gpus: unknown key",
  };
  for (const auto& line : expected) EXPECT_TRUE(has(p, line)) << "missing: " << line << "\ngot:\n" << joined(p);
  // Unknown top-level keys first, then the sections in the order a grid file is read.
  EXPECT_EQ(p, expected) << joined(p);
}

TEST(GridErrors, MisspeltSectionIsNotEchoedByEveryCell) {
  // Without "axes" every cell would lack a task; that is noise, the typo is the problem.
  auto p = problems_of(R"({"axis": {"task": ["norm_probe"], "prompt_length": [16]}, "fixed": {"seed": 1}})");
  EXPECT_EQ(p, std::vector<std::string>{"grid.json: axis: unknown key (did you mean \"axes\"?)"}) << joined(p);
  auto q = problems_of(R"({"axes": {"task": ["norm_probe"], "prompt_length": [16]}, "prompt_length": 32})");
  EXPECT_EQ(q,
            std::vector<std::string>{
                "grid.json: prompt_length: unknown top-level key; parameters go in \"axes\" or \"fixed\""})
      << joined(q);
}

TEST(GridErrors, CrossFieldProblemPointsAtTheAxisElement) {
  // Every cell with prompt_length 20000 has the problem; it is reported once, at its source.
  auto p = problems_of(R"({"axes": {"task": ["norm_probe"], "prompt_length": [16, 20000], "seed": [0, 1, 2]}})");
  ASSERT_EQ(p.size(), 1u) << joined(p);
  EXPECT_EQ(p[0], "grid.json: axes.prompt_length[1]: 20000 is more than task norm_probe can make (1..16384)");
  auto q = problems_of(R"({"fixed": {"task": "norm_probe"}, "include": [{"prompt_length": 16}, {"seed": 1}]})");
  ASSERT_EQ(q.size(), 1u) << joined(q);
  EXPECT_EQ(q[0], "grid.json: include[1].prompt_length: missing; task norm_probe needs it: an integer >= 1");
}

TEST(DidYouMean, ClosestMatch) {
  const std::vector<std::string> keys = {"activation", "degree", "scale", "prompt_length", "seed"};
  EXPECT_EQ(closest_match("activaton", keys), "activation");
  EXPECT_EQ(closest_match("Seed", keys), "seed");
  EXPECT_EQ(closest_match("promptlength", keys), "prompt_length");
  EXPECT_EQ(closest_match("scael", keys), "scale");  // a swap is one edit
  EXPECT_EQ(closest_match("xyz", keys), "");
  EXPECT_EQ(closest_match("layers", keys), "");
  EXPECT_EQ(closest_match("ab", {"xy"}), "");
}

TEST(Params, TableIsConsistent) {
  std::set<std::string> names;
  for (const auto& s : param_specs()) {
    EXPECT_TRUE(names.insert(s.name).second) << "duplicate key " << s.name;
    EXPECT_EQ(find_param(s.name), &s);
  }
  // Every task's keys: described, each name once, of the domain param_specs() validates
  // against, and every default a valid value (resolved in order, as cells are).
  for (const TaskDef* task : task_registry()) {
    json cfg = {{"task", task->name}, {"activation", "poly"}, {"prompt_length", 16}};
    std::set<std::string> seen;
    for (const ParamSpec* p : cell_param_specs(task)) {
      const ParamSpec& s = *p;
      EXPECT_TRUE(seen.insert(s.name).second) << task->name << ": duplicate key " << s.name;
      EXPECT_FALSE(s.description.empty()) << task->name << ": " << s.name;
      const ParamSpec* known = find_param(s.name);
      ASSERT_NE(known, nullptr) << s.name;
      EXPECT_TRUE(known->type == s.type && known->min == s.min && known->max == s.max && known->choices == s.choices)
          << task->name << ": " << s.name << " differs from its first declaration";
      if (s.applies && !s.applies(cfg)) continue;
      if (!s.default_value || cfg.contains(s.name)) continue;
      std::string problem;
      json d = s.default_value(cfg);
      if (d.is_null()) continue;
      EXPECT_FALSE(canonical_value(s, d, &problem).is_null()) << task->name << ": " << s.name << ": " << problem;
      cfg[s.name] = d;
    }
    EXPECT_EQ(find_task(task->name), task);
    EXPECT_NE(task->run, nullptr) << task->name;
    EXPECT_NE(task->cost_s, nullptr) << task->name;
  }
  EXPECT_EQ(find_param("nope"), nullptr);
  EXPECT_EQ(find_task("nope"), nullptr);
  // task_names() is the registry's order; the tasks docs/grid-format.md names are among them (a
  // new task adds to the list and changes nothing here: docs/adding-a-task.md).
  std::vector<std::string> registered;
  for (const TaskDef* task : task_registry()) registered.push_back(task->name);
  EXPECT_EQ(task_names(), registered);
  for (const char* name : {"norm_probe", "image", "icl_regression", "listops", "pde", "synthetic"})
    EXPECT_NE(find_task(name), nullptr) << name;
}

// A task's own keys and the training keys' per-task defaults come from its TaskDef.
TEST(Params, TaskKeysAndTrainingDefaults) {
  const json icl = effective_config({{"task", "icl_regression"}, {"prompt_length", 10}}, "c");
  EXPECT_EQ(icl.at("optimizer"), "sgd");
  EXPECT_EQ(icl.at("eval_every"), 1000);
  EXPECT_EQ(icl.at("d"), 5);
  EXPECT_FALSE(icl.contains("dim"));  // the read-out's width is d + 1
  const json img = effective_config({{"task", "image"}, {"prompt_length", 16}}, "c");
  EXPECT_EQ(img.at("optimizer"), "adamw");
  EXPECT_EQ(img.at("eval_every"), 500);
  EXPECT_EQ(img.at("cls"), false);
  EXPECT_FALSE(img.contains("d"));
  const json lo = effective_config({{"task", "listops"}, {"prompt_length", 64}}, "c");
  EXPECT_EQ(lo.at("cls"), true);
  EXPECT_EQ(lo.at("n_train"), 96000);
  EXPECT_EQ(lo.at("min_length"), 16);
  const json pde = effective_config({{"task", "pde"}, {"prompt_length", 64}}, "c");
  EXPECT_EQ(pde.at("n_train"), 1000);
  EXPECT_FALSE(pde.contains("cls"));
  const json probe = effective_config({{"task", "norm_probe"}, {"prompt_length", 64}}, "c");
  EXPECT_EQ(probe.at("dim"), 64);
  EXPECT_FALSE(probe.contains("steps"));
}

TEST(Params, EstimatedCost) {
  json probe = effective_config(json::parse(R"({"task": "norm_probe", "prompt_length": 1000, "samples": 10})"), "c");
  EXPECT_DOUBLE_EQ(estimate_cost_s(probe), 10 * 1e6 * (2 * 16 + 20) / 5.4e9 + 0.03);
  json syn = effective_config(json::parse(R"({"task": "synthetic", "seconds": 2.5})"), "c");
  EXPECT_DOUBLE_EQ(estimate_cost_s(syn), 2.505);
  // image_smoke's cell: 8.5-9.1 s of CPU on the Xeon VM of 2026-12-05, 2.4 s of it its two
  // evaluations of the 10,000 test images, which plan left out before (6.6 s); with
  // eval_batches 1 an evaluation is one batch.
  json img = effective_config(json::parse(R"({"task": "image", "prompt_length": 49, "layers": 2, "heads": 4, "dim": 64,
    "steps": 200, "batch": 64, "eval_every": 100})"),
                              "c");
  EXPECT_NEAR(estimate_cost_s(img), 8.8, 0.9);
  img["eval_batches"] = 1;
  EXPECT_NEAR(estimate_cost_s(img), 6.1 + 0.5, 0.2);
}

// ---- the bad-input corpus -----------------------------------------------------------

// names joined by ", ": the registries' lists as messages print them.
std::string comma_list(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  for (size_t i = s.find(from); i != std::string::npos; i = s.find(from, i + to.size())) s.replace(i, from.size(), to);
}

// Each .expect is the whole message (tests/integration/bad_inputs.sh: @FILE@ the grid's
// path, @ACTIVATIONS@ and @TASKS@ the registries' names).
// The command task (experiments/command.h): the grid declares the program's keys, which
// are then validated, defaulted and swept like built-in ones; the cell's config carries
// the section, so a cell file alone (attnsweep train) is validated the same way.
TEST(CommandGrid, DeclaredKeysAreValidatedAndSwept) {
  const std::string grid = R"({"command": {"argv": ["prog", "--lr={lr}", "{act}"],
                                            "keys": {"lr": {"type": "number", "min": 0}, "act": "string",
                                                     "width": {"type": "integer", "default": 8}}},
                               "axes": {"task": ["command"], "lr": [0.1, 1], "seed": [0, 1]},
                               "fixed": {"act": "relu"}})";
  const Grid g = parse_grid(grid, "g.json");
  ASSERT_EQ(g.cells.size(), 4u);
  const json& c = g.cells[0].config;
  EXPECT_EQ(c.at("lr"), json(0.1));
  EXPECT_EQ(c.at("width"), json(8));  // the declared default
  EXPECT_EQ(c.at("grace_s"), json(30.0));
  EXPECT_TRUE(c.at("command").is_string());
  EXPECT_EQ(g.cells[1].config.at("lr").dump(), "0.1");
  EXPECT_EQ(g.cells[2].config.at("lr").dump(), "1.0");  // canonical: a number key's 1 is 1.0
  // A cell file alone: the same effective config, the same id.
  json own = json::object();
  for (const char* k : {"task", "command", "lr", "act", "seed"}) own[k] = c.at(k);
  EXPECT_EQ(cell_id(effective_config(own, "cell.json")), g.cells[0].id);
  EXPECT_EQ(command_argv(c), (std::vector<std::string>{"prog", "--lr=0.1", "relu"}));

  // Another program is another cell.
  std::string other = grid;
  replace_all(other, "\"prog\"", "\"prog2\"");
  EXPECT_NE(parse_grid(other, "g.json").cells[0].id, g.cells[0].id);

  std::string bad = grid;
  replace_all(bad, "\"lr\": [0.1, 1]", "\"lr\": [0.1, -1, true]");
  replace_all(bad, "\"act\": \"relu\"", "\"act\": \"relu\", \"widht\": 3");
  const auto p = problems_of(bad, "g.json");
  EXPECT_TRUE(has(p, "g.json: axes.lr[1]: expected a number >= 0, got -1")) << joined(p);
  EXPECT_TRUE(has(p, "g.json: axes.lr[2]: expected a number >= 0, got true")) << joined(p);
  EXPECT_TRUE(has(p, "g.json: fixed.widht: unknown key (did you mean \"width\"?)")) << joined(p);

  // A required declared key that no cell sets.
  std::string missing = grid;
  replace_all(missing, "\"fixed\": {\"act\": \"relu\"}", "\"fixed\": {}");
  const auto m = problems_of(missing, "g.json");
  EXPECT_TRUE(has(m, "g.json: act: missing; task command needs it: a string")) << joined(m);

  // The section's own problems.
  const auto s = problems_of(R"({"command": {"argv": [], "kyes": {}}, "axes": {"task": ["command"]}})", "g.json");
  EXPECT_TRUE(has(s, "g.json: command.argv: expected a non-empty list of strings, got a list")) << joined(s);
  EXPECT_TRUE(has(s, "g.json: command.kyes: unknown key (did you mean \"keys\"?)")) << joined(s);
  // Without the section, the declared keys are unknown keys like any other.
  const auto u = problems_of(R"({"axes": {"task": ["command"], "lr": [1]}})", "g.json");
  EXPECT_TRUE(has(u, "g.json: command: missing; task command needs it: a string")) << joined(u);
}

TEST(BadGrids, EveryFileFailsWithItsExpectedMessage) {
  const fs::path dir = kSource / "tests/bad_inputs/grids";
  std::vector<std::string> tasks;
  for (const TaskDef* t : task_registry()) tasks.emplace_back(t->name);
  std::vector<fs::path> grids;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const fs::path p = entry.path();
    if (p.extension() == ".json") grids.push_back(p);
    if (p.extension() == ".expect") {
      EXPECT_TRUE(fs::exists(fs::path(p).replace_extension(".json"))) << p;
    }
  }
  std::sort(grids.begin(), grids.end());
  EXPECT_GE(grids.size(), 20u);
  for (const auto& p : grids) {
    SCOPED_TRACE(p.filename().string());
    const fs::path expect_file = fs::path(p).replace_extension(".expect");
    ASSERT_TRUE(fs::exists(expect_file));
    std::string want = read(expect_file);
    while (!want.empty() && (want.back() == '\n' || want.back() == '\r')) want.pop_back();
    ASSERT_FALSE(want.empty());
    replace_all(want, "@FILE@", p.string());
    replace_all(want, "@ACTIVATIONS@", comma_list(activation_names()));
    replace_all(want, "@TASKS@", comma_list(tasks));
    try {
      Grid g = load_grid(p.string());
      ADD_FAILURE() << "loaded with " << g.cells.size() << " cells";
    } catch (const InputError& e) {
      EXPECT_EQ(std::string(e.what()), want);
      // Every line names the file as given.
      for (const auto& line : e.problems) EXPECT_EQ(line.rfind(p.string() + ":", 0), 0u) << line;
    }
  }
}

}  // namespace
}  // namespace attnsweep
