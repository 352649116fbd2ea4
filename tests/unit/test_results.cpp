// results/: the HDF5 layer, per-cell files (atomic write, validity) and the aggregate.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <sstream>

#include "base/atomic_file.h"
#include "results/aggregate.h"
#include "results/cell_file.h"
#include "results/h5.h"

namespace attnsweep {
namespace {
namespace fs = std::filesystem;

// A fresh directory per test, removed afterwards.
class ResultsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::random_device rd;
    dir_ = fs::temp_directory_path() / ("attnsweep_results_" + std::to_string(::getpid()) + "_" + std::to_string(rd()));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::permissions(dir_, fs::perms::all, fs::perm_options::add, ec);
    fs::remove_all(dir_, ec);
  }
  std::string path(const std::string& rel) const { return (dir_ / rel).string(); }
  std::vector<std::string> listing(const std::string& rel) const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_ / rel)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }
  fs::path dir_;
};

CellResult sample_cell(const std::string& id, int64_t steps = 5) {
  CellResult r;
  r.cell_id = id;
  r.config = json{{"activation", "poly"}, {"degree", 3}, {"prompt_length", 16}, {"lr", 1e-3}};
  r.wall_seconds = 1.5;
  r.device = "cpu";
  r.started = "2024-01-01T00:00:00Z";
  r.finished = "2024-01-01T00:00:01Z";
  r.final_metrics = {{"attn_fro", 2.5}, {"test_loss", 0.25}};
  std::vector<int64_t> step;
  std::vector<float> loss;
  for (int64_t t = 0; t < steps; ++t) {
    step.push_back(10 * t);
    loss.push_back(1.0f / static_cast<float>(t + 1));
  }
  r.datasets.push_back({"/train/step", {static_cast<uint64_t>(steps)}, step, "optimizer step"});
  r.datasets.push_back({"/train/loss", {static_cast<uint64_t>(steps)}, loss, "training loss"});
  std::vector<double> norms(static_cast<size_t>(steps) * 2 * 3);
  for (size_t i = 0; i < norms.size(); ++i) norms[i] = 0.5 * static_cast<double>(i);
  r.datasets.push_back({"/norms/attn_fro", {static_cast<uint64_t>(steps), 2, 3}, norms, "||phi(S)||_F"});
  return r;
}

// ---- the atomic-write helper (base/atomic_file.h) ------------------------------------

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST_F(ResultsTest, AtomicWriteTextReplacesAndLeavesNoTemporary) {
  for (bool durable : {true, false}) {
    atomic_write_text(path("status.json"), "first\n", durable);
    atomic_write_text(path("status.json"), "second\n", durable);
    EXPECT_EQ(read_all(path("status.json")), "second\n");
    EXPECT_EQ(listing("."), (std::vector<std::string>{"status.json"}));
  }
  // A rename that fails (the target is a folder) throws naming the path, and removes
  // its temporary; a folder that does not exist fails before anything is written.
  fs::create_directories(dir_ / "taken");
  for (bool durable : {true, false}) {
    try {
      atomic_write_text(path("taken"), "x", durable);
      ADD_FAILURE() << "writing over a folder did not throw";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(path("taken")), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(atomic_write_text(path("missing/x.json"), "x"), std::runtime_error);
  EXPECT_EQ(listing("."), (std::vector<std::string>{"status.json", "taken"}));
}

// ---- h5 layer -------------------------------------------------------------------------

TEST_F(ResultsTest, H5AttributesDatasetsAndExtensibleRows) {
  const std::string p = path("x.h5");
  {
    h5::File f = h5::File::create(p);
    f.set_attribute_string("s", "héllo");
    f.set_attribute_double("d", 0.125);
    f.set_attribute_int64("i", -7);
    h5::Group g = f.require_group("/a/b/c");
    EXPECT_EQ(g.path(), "/a/b/c");
    h5::Dataset traj = f.create_extensible<float>("/train/loss", {}, "loss per logged step", 4);
    for (int step = 0; step < 10; ++step) {
      float v = static_cast<float>(step);
      traj.append_rows<float>(std::span<const float>(&v, 1));
    }
    h5::Dataset norms = f.create_extensible<double>("/norms/attn_fro", {2, 3}, "[T, L, H]");
    std::vector<double> row(6, 1.0);
    norms.append_rows<double>(row);
    norms.append_rows<double>(row);
    std::vector<std::string> strs{"a", "", "ü,\"x\""};
    f.write_strings("/s", strs, "strings");
    f.close();
  }
  h5::File f = h5::File::open_read(p);
  EXPECT_EQ(f.attribute_string("s"), "héllo");
  EXPECT_EQ(f.attribute_double("d"), 0.125);
  EXPECT_EQ(f.attribute_int64("i"), -7);
  EXPECT_EQ(f.attribute_double("i"), -7.0);
  EXPECT_THROW(f.attribute_int64("d"), h5::Error);
  EXPECT_TRUE(f.is_group("/a/b"));
  EXPECT_TRUE(f.exists("a/b/c"));
  EXPECT_FALSE(f.exists("/a/x/y"));
  EXPECT_FALSE(f.exists("/s/under/a/dataset"));
  h5::Dataset loss = f.open_dataset("/train/loss");
  EXPECT_EQ(loss.shape(), std::vector<uint64_t>{10});
  auto v = loss.read<double>();
  EXPECT_EQ(v[9], 9.0);
  EXPECT_EQ(loss.attribute_string("description"), "loss per logged step");
  EXPECT_EQ(f.open_dataset("/norms/attn_fro").shape(), (std::vector<uint64_t>{2, 2, 3}));
  EXPECT_EQ(f.open_dataset("/s").read_strings(), (std::vector<std::string>{"a", "", "ü,\"x\""}));
  EXPECT_EQ(f.children(), (std::vector<std::string>{"a", "norms", "s", "train"}));
}

TEST_F(ResultsTest, H5ErrorsNameFileObjectAndWhat) {
  const std::string p = path("x.h5");
  h5::File f = h5::File::create(p);
  std::vector<double> d{1, 2};
  f.write_dataset<double>("/d", {2}, d, "two");
  try {
    f.write_dataset<double>("/d", {2}, d, "again");
    FAIL() << "expected an error";
  } catch (const h5::Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(p + ":/d: cannot create dataset"), std::string::npos) << msg;
    EXPECT_NE(msg.find("(HDF5: "), std::string::npos) << msg;
  }
  try {
    (void)f.open_dataset("/nope/x");
    FAIL() << "expected an error";
  } catch (const h5::Error& e) {
    EXPECT_EQ(std::string(e.what()), p + ":/nope/x: no such dataset");
  }
  EXPECT_THROW(f.write_dataset<double>("/bad", {3}, d, "wrong shape"), h5::Error);
}

// ---- per-cell files -------------------------------------------------------------------

TEST_F(ResultsTest, CellFileRoundTrip) {
  const std::string p = path("abc.h5");
  CellResult r = sample_cell("abc");
  write_cell_file(p, r);
  CellSummary s = read_cell_summary(p);
  EXPECT_EQ(s.cell_id, "abc");
  EXPECT_EQ(s.config, r.config);
  EXPECT_EQ(s.status, CellStatus::complete);
  EXPECT_EQ(s.diverged_at_step, -1);
  EXPECT_EQ(s.device, "cpu");
  EXPECT_EQ(s.wall_seconds, 1.5);
  EXPECT_EQ(s.final_metrics, r.final_metrics);

  h5::File f = h5::File::open_read(p);
  EXPECT_EQ(f.attribute_string("config"), r.config.dump());
  EXPECT_EQ(f.attribute_string("attnsweep_version"), ATTNSWEEP_VERSION);
  EXPECT_EQ(f.attribute_string("started"), "2024-01-01T00:00:00Z");
  EXPECT_EQ(f.attribute_string("finished"), "2024-01-01T00:00:01Z");
  h5::Dataset step = f.open_dataset("/train/step");
  EXPECT_EQ(step.kind(), h5::Kind::Integer);
  EXPECT_EQ(step.read<int64_t>(), (std::vector<int64_t>{0, 10, 20, 30, 40}));
  EXPECT_EQ(step.attribute_string("description"), "optimizer step");
  h5::Dataset loss = f.open_dataset("/train/loss");
  EXPECT_EQ(loss.kind(), h5::Kind::Float);
  EXPECT_EQ(loss.read<float>()[1], 0.5f);
  h5::Dataset norms = f.open_dataset("/norms/attn_fro");
  EXPECT_EQ(norms.shape(), (std::vector<uint64_t>{5, 2, 3}));
  EXPECT_EQ(norms.read<double>()[7], 3.5);
}

TEST_F(ResultsTest, CellFileWriteIsAtomic) {
  write_cell_file(path("abc.h5"), sample_cell("abc"));
  EXPECT_EQ(listing(""), std::vector<std::string>{"abc.h5"});  // no temporary left

  // A failure half-way (inconsistent dataset) leaves neither the file nor a temporary.
  CellResult bad = sample_cell("bad");
  bad.datasets.push_back({"/train/broken", {4}, std::vector<double>{1, 2, 3}, "3 values for 4"});
  EXPECT_THROW(write_cell_file(path("bad.h5"), bad), std::runtime_error);
  CellResult clash = sample_cell("clash");
  clash.datasets.push_back({"/train/loss", {1}, std::vector<double>{1}, "same path twice"});
  EXPECT_THROW(write_cell_file(path("clash.h5"), clash), std::runtime_error);
  EXPECT_EQ(listing(""), std::vector<std::string>{"abc.h5"});

  EXPECT_THROW(write_cell_file(path("missing/dir/x.h5"), sample_cell("x")), std::runtime_error);
  EXPECT_THROW(write_cell_file("/proc/attnsweep_unwritable.h5", sample_cell("x")),
               std::runtime_error);  // even for root
  CellResult running = sample_cell("r");
  running.status = CellStatus::running;
  EXPECT_THROW(write_cell_file(path("r.h5"), running), std::runtime_error);
  EXPECT_EQ(listing(""), std::vector<std::string>{"abc.h5"});
}

TEST_F(ResultsTest, CellFileWriteToUnwritableDirThrowsAndLeavesNothing) {
  if (::geteuid() == 0) GTEST_SKIP() << "root ignores directory permissions";
  fs::create_directories(dir_ / "ro");
  fs::permissions(dir_ / "ro", fs::perms::owner_read | fs::perms::owner_exec);
  try {
    write_cell_file(path("ro/x.h5"), sample_cell("x"));
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("ro/x.h5.tmp."), std::string::npos) << e.what();
  }
  fs::permissions(dir_ / "ro", fs::perms::owner_all);
  EXPECT_TRUE(listing("ro").empty());
}

TEST_F(ResultsTest, CellFileValidity) {
  const std::string p = path("abc.h5");
  write_cell_file(p, sample_cell("abc"));
  std::string why;
  EXPECT_TRUE(cell_file_valid(p, "abc", &why)) << why;

  EXPECT_FALSE(cell_file_valid(p, "xyz", &why));
  EXPECT_EQ(why, "cell_id is abc, expected xyz");

  fs::copy_file(p, path("half.h5"));
  fs::resize_file(path("half.h5"), fs::file_size(p) / 2);
  EXPECT_FALSE(cell_file_valid(path("half.h5"), "abc", &why));
  EXPECT_NE(why.find("truncated"), std::string::npos) << why;
  EXPECT_THROW(read_cell_summary(path("half.h5")), std::runtime_error);

  std::ofstream(path("text.h5")) << "not hdf5 at all\n";
  EXPECT_FALSE(cell_file_valid(path("text.h5"), "abc", &why));
  EXPECT_EQ(why, "not an HDF5 file");

  std::ofstream(path("empty.h5")).close();
  EXPECT_FALSE(cell_file_valid(path("empty.h5"), "abc", &why));
  EXPECT_EQ(why, "not an HDF5 file");

  EXPECT_FALSE(cell_file_valid(path("absent.h5"), "abc", &why));
  EXPECT_EQ(why, "no such file");

  {  // an HDF5 file of another schema
    h5::File f = h5::File::create(path("other.h5"));
    f.set_attribute_string("cell_id", "abc");
    f.close();
  }
  EXPECT_FALSE(cell_file_valid(path("other.h5"), "abc", &why));
  EXPECT_EQ(why, "not an attnsweep result file (an HDF5 file without the checksum header of write_cell_file)");
}

// The checksum header: a result file changed after it was written is rejected before
// libhdf5 parses it (libhdf5 1.10 crashes or spins on some damaged files: tests/fuzz/known/).
TEST_F(ResultsTest, CellFileChecksum) {
  const std::string p = path("abc.h5");
  write_cell_file(p, sample_cell("abc"));
  std::string why;
  ASSERT_TRUE(cell_file_valid(p, "abc", &why)) << why;
  const auto size = fs::file_size(p);
  auto flip = [&](const std::string& copy, std::streamoff at) {
    fs::copy_file(p, path(copy));
    std::fstream f(path(copy), std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(at);
    const char c = static_cast<char>(f.get());
    f.seekp(at);
    f.put(static_cast<char>(c ^ 0x01));
  };
  for (std::streamoff at :
       {std::streamoff{600}, static_cast<std::streamoff>(size / 2), static_cast<std::streamoff>(size - 1)}) {
    const std::string copy = "flip" + std::to_string(at) + ".h5";
    flip(copy, at);
    EXPECT_FALSE(cell_file_valid(path(copy), "abc", &why)) << "byte " << at;
    EXPECT_EQ(why, "checksum mismatch: the file changed after it was written (damaged, or appended to)") << at;
  }
  flip("header.h5", 30);  // inside the checksum digits
  EXPECT_FALSE(cell_file_valid(path("header.h5"), "abc", &why));
  EXPECT_NE(why.find("checksum"), std::string::npos) << why;
  fs::copy_file(p, path("longer.h5"));
  std::ofstream(path("longer.h5"), std::ios::app) << "x";
  EXPECT_FALSE(cell_file_valid(path("longer.h5"), "abc", &why));
  EXPECT_EQ(why, "checksum mismatch: the file changed after it was written (damaged, or appended to)");

  // The inputs that crash or stall libhdf5 (found by tests/fuzz) are rejected without it.
  int known = 0;
  for (const auto& e : fs::directory_iterator(ATTNSWEEP_SOURCE_DIR "/tests/fuzz/known")) {
    EXPECT_FALSE(cell_file_valid(e.path().string(), "abc", &why)) << e.path();
    EXPECT_EQ(why, "not an attnsweep result file (an HDF5 file without the checksum header of write_cell_file)")
        << e.path();
    ++known;
  }
  EXPECT_GE(known, 3);
}

// ---- aggregate ------------------------------------------------------------------------

double read_scalar_csv_count(const std::string& p) {
  std::ifstream in(p);
  std::string line;
  double n = 0;
  while (std::getline(in, line)) ++n;
  return n;
}

class AggregateTest : public ResultsTest {
 protected:
  // Cells with known power laws: poly attn_fro = 3 N^0.5, jac_fro = 0.5 N^1.5; softmax
  // attn_fro = 2 N (no jac_fro); seeds 0 and 1 give the same values.
  void SetUp() override {
    ResultsTest::SetUp();
    fs::create_directories(dir_ / "runs");
    for (const char* act : {"poly", "softmax"})
      for (int64_t n : {16, 64, 256})
        for (int64_t seed : {0, 1}) {
          CellResult r;
          r.config = json{{"activation", act}, {"prompt_length", n}, {"seed", seed}, {"lr", 1e-3}};
          if (std::string(act) == "poly") {
            r.config["degree"] = 3;
            r.config["scale"] = "inv_sqrt_n";
            r.final_metrics = {{"attn_fro", 3 * std::sqrt(double(n))}, {"jac_fro", 0.5 * std::pow(double(n), 1.5)}};
          } else {
            r.final_metrics = {{"attn_fro", 2.0 * double(n)}, {"test_loss", 0.1}};
          }
          r.cell_id = std::string(act) + "_n" + std::to_string(n) + "_s" + std::to_string(seed);
          r.wall_seconds = double(n);
          // trajectories of different lengths; softmax seed 1 has none at all
          if (!(std::string(act) == "softmax" && seed == 1)) {
            const uint64_t t = static_cast<uint64_t>(n / 16 + 1);  // 2, 5, 17 steps
            std::vector<int64_t> step(t);
            std::vector<float> loss(t);
            for (uint64_t i = 0; i < t; ++i) {
              step[i] = static_cast<int64_t>(i);
              loss[i] = static_cast<float>(n) + static_cast<float>(i);
            }
            r.datasets.push_back({"/train/step", {t}, step, "step"});
            r.datasets.push_back({"/train/loss", {t}, loss, "training loss"});
            r.datasets.push_back({"/norms/attn_fro", {t, 1, 1}, std::vector<float>(t, 1.0f), "||phi(S)||_F"});
          }
          write_cell_file(path("runs/" + r.cell_id + ".h5"), r);
          ++good_;
        }
    CellResult d = sample_cell("diverged_one");  // excluded from fits, kept as a row
    d.config = json{{"activation", "poly"},
                    {"degree", 3},
                    {"scale", "inv_sqrt_n"},
                    {"lr", 1e-3},
                    {"prompt_length", 1024},
                    {"seed", 0},
                    {"note", "has, comma \"and\" quotes"}};
    d.final_metrics = {{"attn_fro", 1e9}};
    d.status = CellStatus::diverged;
    d.diverged_at_step = 3;
    write_cell_file(path("runs/diverged_one.h5"), d);
    ++good_;
    // bad files
    std::ofstream(path("runs/text.h5")) << "hello\n";
    fs::copy_file(path("runs/poly_n16_s0.h5"), path("runs/truncated.h5"));
    fs::resize_file(path("runs/truncated.h5"), fs::file_size(path("runs/poly_n16_s0.h5")) / 2);
    fs::copy_file(path("runs/poly_n16_s0.h5"), path("runs/renamed.h5"));
    fs::copy_file(path("runs/poly_n16_s0.h5"), path("runs/zzz.h5.tmp.123"));  // a writer's temporary
    std::ofstream(path("runs/notes.txt")) << "ignored\n";
  }
  int64_t good_ = 0;
};

TEST_F(AggregateTest, CellsSkippedAndFits) {
  AggregateResult a = aggregate_dir(dir_.string(), {});
  EXPECT_EQ(a.cells, good_);
  ASSERT_EQ(a.skipped.size(), 3u);
  EXPECT_EQ(a.skipped[0], "runs/renamed.h5: cell_id is poly_n16_s0, expected renamed");
  EXPECT_EQ(a.skipped[1], "runs/text.h5: not an HDF5 file");
  EXPECT_EQ(a.skipped[2].rfind("runs/truncated.h5: truncated file", 0), 0u) << a.skipped[2];
  EXPECT_EQ(listing(""), (std::vector<std::string>{"aggregate.h5", "paired.csv", "runs", "summary.csv"}));
  // softmax and poly cells equal but for the activation pair (seeds 0 and 1) on the one
  // metric both have, at each N: softmax's 2N against poly's 3 sqrt(N)
  ASSERT_EQ(a.paired.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    const double n = std::vector<double>{16, 64, 256}[i];
    EXPECT_EQ(a.paired[i].prompt_length, n);
    EXPECT_EQ(a.paired[i].metric, "attn_fro");
    EXPECT_EQ(a.paired[i].a, "activation=softmax");
    EXPECT_EQ(a.paired[i].group, "lr=0.001");
    EXPECT_EQ(a.paired[i].pairs, 2);
    EXPECT_NEAR(a.paired[i].mean_diff, 2 * n - 3 * std::sqrt(n), 1e-9);
  }

  ASSERT_EQ(a.fits.size(), 3u);
  const std::string poly = "activation=poly degree=3 lr=0.001 scale=inv_sqrt_n";
  EXPECT_EQ(a.fits[0].group, poly);
  EXPECT_EQ(a.fits[0].metric, "attn_fro");
  EXPECT_NEAR(a.fits[0].slope, 0.5, 1e-12);
  EXPECT_NEAR(a.fits[0].intercept, std::log(3.0), 1e-12);
  EXPECT_NEAR(a.fits[0].r2, 1.0, 1e-12);
  EXPECT_NEAR(a.fits[0].slope_ci95, 0.0, 1e-6);
  EXPECT_EQ(a.fits[0].points, 6);  // the diverged N=1024 cell is left out
  EXPECT_EQ(a.fits[0].n_min, 16);
  EXPECT_EQ(a.fits[0].n_max, 256);
  EXPECT_EQ(a.fits[1].group, poly);
  EXPECT_EQ(a.fits[1].metric, "jac_fro");
  EXPECT_NEAR(a.fits[1].slope, 1.5, 1e-12);
  EXPECT_EQ(a.fits[2].group, "activation=softmax lr=0.001");
  EXPECT_EQ(a.fits[2].metric, "attn_fro");
  EXPECT_NEAR(a.fits[2].slope, 1.0, 1e-12);

  h5::File f = h5::File::open_read(path("aggregate.h5"));
  EXPECT_EQ(f.open_dataset("/fits/group").read_strings()[2], "activation=softmax lr=0.001");
  EXPECT_NEAR(f.open_dataset("/fits/slope").read<double>()[1], 1.5, 1e-12);
  EXPECT_EQ(f.open_dataset("/fits/points").read<int64_t>(), (std::vector<int64_t>{6, 6, 6}));
  EXPECT_EQ(f.open_dataset("/skipped").read_strings(), a.skipped);
  EXPECT_EQ(f.attribute_int64("cells"), good_);
}

TEST_F(AggregateTest, CellColumnsAndTypes) {
  AggregateResult a = aggregate_dir(dir_.string(), {});
  const std::vector<std::string> expected{
      "cell_id", "status",        "device", "wall_seconds", "diverged_at_step", "activation", "degree",    "lr",
      "note",    "prompt_length", "scale",  "seed",         "attn_fro",         "jac_fro",    "test_loss", "label"};
  EXPECT_EQ(a.columns, expected);
  h5::File f = h5::File::open_read(path("aggregate.h5"));
  h5::Group cells = f.open_group("/cells");
  EXPECT_EQ(cells.children().size(), expected.size());
  auto ids = cells.open_dataset("cell_id").read_strings();
  ASSERT_EQ(ids.size(), static_cast<size_t>(good_));
  EXPECT_EQ(ids.front(), "diverged_one");  // sorted by file name
  EXPECT_EQ(cells.open_dataset("prompt_length").kind(), h5::Kind::Integer);
  EXPECT_EQ(cells.open_dataset("seed").kind(), h5::Kind::Integer);
  EXPECT_EQ(cells.open_dataset("diverged_at_step").read<int64_t>()[0], 3);
  EXPECT_EQ(cells.open_dataset("lr").kind(), h5::Kind::Float);
  auto degree = cells.open_dataset("degree");  // missing for softmax: float with NaN
  EXPECT_EQ(degree.kind(), h5::Kind::Float);
  auto dv = degree.read<double>();
  EXPECT_EQ(dv[0], 3.0);
  EXPECT_TRUE(std::isnan(dv.back()));
  auto scale = cells.open_dataset("scale").read_strings();
  EXPECT_EQ(scale[0], "inv_sqrt_n");
  EXPECT_EQ(scale.back(), "none");  // softmax takes no scale: named, so that a groupby keeps it
  auto label = cells.open_dataset("label").read_strings();
  EXPECT_EQ(label[0], "s³/√N");
  EXPECT_EQ(label.back(), "softmax");
  auto jac = cells.open_dataset("jac_fro").read<double>();
  EXPECT_TRUE(std::isnan(jac.back()));
  EXPECT_EQ(cells.open_dataset("status").read_strings()[0], "diverged");
  EXPECT_EQ(cells.open_dataset("attn_fro").attribute_string("description"), "final metric (/final attribute attn_fro)");
}

// A boolean parameter (the image task's `cls`) is written as the grid writes it, in /cells
// and summary.csv, and each cell's /cell_groups strings are the very strings of the /fits
// and /paired rows it belongs to (the report matches them as they are: with cls as 0 in
// /cells and "cls=false" in /paired no cell found its pair).
TEST_F(ResultsTest, BooleansAsInTheGridAndCellGroupsNameTheirFitsAndPairs) {
  fs::create_directories(dir_ / "runs");
  for (const char* act : {"softmax", "relu"})
    for (int64_t n : {16, 49})
      for (int64_t seed : {0, 1, 2}) {
        CellResult r;
        r.config = json{{"activation", act}, {"prompt_length", n}, {"seed", seed}, {"cls", false}, {"lr", 1e-4}};
        if (std::string(act) == "relu") r.config["scale"] = "inv_n";
        r.final_metrics = {{"test_mse", 0.5 + 0.01 * double(seed)}};
        r.cell_id = std::string(act) + "_n" + std::to_string(n) + "_s" + std::to_string(seed);
        write_cell_file(path("runs/" + r.cell_id + ".h5"), r);
      }
  AggregateResult a = aggregate_dir(dir_.string(), {});
  ASSERT_EQ(a.cells, 12);
  h5::File f = h5::File::open_read(path("aggregate.h5"));
  EXPECT_EQ(f.open_dataset("/cells/cls").read_strings(), std::vector<std::string>(12, "false"));
  const auto label = f.open_dataset("/cells/label").read_strings();
  const auto act = f.open_dataset("/cells/activation").read_strings();
  const auto fit_group = f.open_dataset("/cell_groups/fit_group").read_strings();
  const auto paired_group = f.open_dataset("/cell_groups/paired_group").read_strings();
  const auto spec = f.open_dataset("/cell_groups/paired_spec").read_strings();
  const auto fits = f.open_dataset("/fits/group").read_strings();
  const auto pairs = f.open_dataset("/paired/group").read_strings();
  const auto pa = f.open_dataset("/paired/a").read_strings(), pb = f.open_dataset("/paired/b").read_strings();
  ASSERT_EQ(pairs.size(), 2u);  // softmax against relu at N = 16 and 49
  for (size_t i = 0; i < 12; ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(label[i], act[i] == "softmax" ? "softmax" : "ReLU/N");
    EXPECT_EQ(paired_group[i], pairs[0]);
    EXPECT_EQ(spec[i], act[i] == "softmax" ? pa[0] : pb[0]);
    EXPECT_NE(std::find(fits.begin(), fits.end(), fit_group[i]), fits.end()) << fit_group[i];
  }
  EXPECT_EQ(pairs[0], "cls=false lr=1e-04");
  std::ifstream in(path("summary.csv"));
  std::string header, row;
  std::getline(in, header);
  std::getline(in, row);
  EXPECT_EQ(
      header.rfind("cell_id,status,device,wall_seconds,diverged_at_step,activation,cls,lr,prompt_length,scale,seed,"
                   "test_mse,label",
                   0),
      0u)
      << header;
  EXPECT_NE(row.find(",relu,false,1e-04,16,inv_n,0,"), std::string::npos) << row;
}

TEST_F(AggregateTest, TrajectoriesAreNaNPadded) {
  AggregateResult a = aggregate_dir(dir_.string(), {});
  h5::File f = h5::File::open_read(path("aggregate.h5"));
  EXPECT_EQ(f.open_group("/trajectories").children(),
            (std::vector<std::string>{"norms_attn_fro", "train_loss", "train_step"}));
  h5::Dataset loss = f.open_dataset("/trajectories/train_loss");
  const uint64_t cells = static_cast<uint64_t>(a.cells), T = 17;
  ASSERT_EQ(loss.shape(), (std::vector<uint64_t>{cells, T}));
  auto v = loss.read<double>();
  auto ids = f.open_dataset("/cells/cell_id").read_strings();
  for (uint64_t i = 0; i < cells; ++i) {
    SCOPED_TRACE(ids[i]);
    if (ids[i] == "poly_n64_s0") {  // 5 steps: 64..68, then NaN
      for (uint64_t t = 0; t < 5; ++t) EXPECT_EQ(v[i * T + t], 64.0 + double(t));
      for (uint64_t t = 5; t < T; ++t) EXPECT_TRUE(std::isnan(v[i * T + t]));
    } else if (ids[i] == "softmax_n64_s1") {  // no /train at all: an all-NaN row
      for (uint64_t t = 0; t < T; ++t) EXPECT_TRUE(std::isnan(v[i * T + t]));
    } else if (ids[i] == "poly_n256_s1") {
      EXPECT_EQ(v[i * T + 16], 256.0 + 16);
    }
  }
  auto step = f.open_dataset("/trajectories/train_step").read<double>();
  EXPECT_EQ(step[1 * T + 1], 1.0);
}

TEST_F(AggregateTest, SummaryCsv) {
  AggregateResult a = aggregate_dir(dir_.string(), {});
  std::ifstream in(path("summary.csv"));
  std::string header;
  std::getline(in, header);
  std::string joined;
  for (const auto& c : a.columns) joined += (joined.empty() ? "" : ",") + c;
  EXPECT_EQ(header, joined);
  std::string first;
  std::getline(in, first);
  EXPECT_EQ(
      first.rfind(
          "diverged_one,diverged,cpu,1.5,3,poly,3,0.001,\"has, comma \"\"and\"\" quotes\",1024,inv_sqrt_n,0,1e+09,,",
          0),
      0u)
      << first;
  EXPECT_EQ(read_scalar_csv_count(path("summary.csv")), double(a.cells + 1));
}

TEST_F(AggregateTest, FitRangeFilter) {
  AggregateOptions opt;
  opt.fit_min_n = 64;
  AggregateResult a = aggregate_dir(dir_.string(), opt);
  ASSERT_EQ(a.fits.size(), 3u);
  EXPECT_EQ(a.fits[0].points, 4);
  EXPECT_EQ(a.fits[0].n_min, 64);
  EXPECT_NEAR(a.fits[0].slope, 0.5, 1e-12);
  opt.fit_min_n = 100;  // one prompt length left: no fit
  EXPECT_TRUE(aggregate_dir(dir_.string(), opt).fits.empty());
  opt = {};
  opt.fit_max_n = 64;
  EXPECT_EQ(aggregate_dir(dir_.string(), opt).fits[0].n_max, 64);
}

TEST_F(AggregateTest, ReadableWithH5py) {
  const char* py = "/usr/bin/python3";
  if (!fs::exists(py)) GTEST_SKIP() << "no " << py;
  AggregateResult a = aggregate_dir(dir_.string(), {});
  std::ostringstream script;
  script << "import sys\n"
            "try:\n  import h5py, numpy\nexcept ImportError:\n  sys.exit(77)\n"
            "with h5py.File(sys.argv[1], 'r') as f:\n"
            "  cells = {k: f['cells'][k][()] for k in f['cells']}\n"
            "  assert len(cells) == "
         << a.columns.size()
         << ", len(cells)\n"
            "  for k, v in cells.items():\n"
            "    assert v.shape == ("
         << a.cells
         << ",), (k, v.shape)\n"
            "  assert cells['prompt_length'].dtype == numpy.int64\n"
            "  assert numpy.isnan(cells['jac_fro']).any()\n"
            "  assert f['cells/cell_id'].asstr()[0] == 'diverged_one'\n"
            "  assert f['trajectories/train_loss'].shape == ("
         << a.cells
         << ", 17)\n"
            "  assert abs(f['fits/slope'][0] - 0.5) < 1e-12\n"
            "  assert f.attrs['attnsweep_version'] == '" ATTNSWEEP_VERSION "'\n";
  std::ofstream(path("check.py")) << script.str();
  const std::string cmd = std::string(py) + " " + path("check.py") + " " + path("aggregate.h5");
  int rc = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(rc));
  if (WEXITSTATUS(rc) == 77) GTEST_SKIP() << "h5py is not importable by " << py;
  EXPECT_EQ(WEXITSTATUS(rc), 0) << cmd;
}

TEST_F(ResultsTest, AggregateWithoutRunsFolderThrows) {
  try {
    aggregate_dir(dir_.string(), {});
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), dir_.string() + ": no runs/ folder (is this a results directory?)");
  }
}

TEST_F(ResultsTest, AggregateOfEmptyRuns) {
  fs::create_directories(dir_ / "runs");
  AggregateResult a = aggregate_dir(dir_.string(), {});
  EXPECT_EQ(a.cells, 0);
  h5::File f = h5::File::open_read(path("aggregate.h5"));
  EXPECT_TRUE(f.open_dataset("/skipped").read_strings().empty());
  EXPECT_TRUE(f.open_dataset("/cells/cell_id").read_strings().empty());
  EXPECT_EQ(read_scalar_csv_count(path("summary.csv")), 1.0);
}

TEST_F(AggregateTest, NormTrajectoriesAreFourDimensionalAndNaNPadded) {
  // sample_cell has /norms/attn_fro [5, 2, 3]; the grid cells [t, 1, 1].
  write_cell_file(path("runs/zz_sample.h5"), sample_cell("zz_sample"));
  AggregateResult a = aggregate_dir(dir_.string(), {});
  h5::File f = h5::File::open_read(path("aggregate.h5"));
  h5::Dataset n = f.open_dataset("/trajectories/norms_attn_fro");
  const uint64_t cells = static_cast<uint64_t>(a.cells);
  ASSERT_EQ(n.shape(), (std::vector<uint64_t>{cells, 17, 2, 3}));
  EXPECT_EQ(n.kind(), h5::Kind::Float);
  auto ids = f.open_dataset("/cells/cell_id").read_strings();
  const uint64_t row = static_cast<uint64_t>(std::find(ids.begin(), ids.end(), "zz_sample") - ids.begin());
  ASSERT_LT(row, cells);
  auto v = n.read_block<float>({row, 0, 0, 0}, {1, 17, 2, 3});
  EXPECT_EQ(v[0 * 6 + 1 * 3 + 2], 0.5f * 5);   // t=0, l=1, h=2 -> element 5
  EXPECT_EQ(v[4 * 6 + 1 * 3 + 2], 0.5f * 29);  // t=4 -> element 29
  EXPECT_TRUE(std::isnan(v[5 * 6]));           // past its 5 steps
  const uint64_t p64 = static_cast<uint64_t>(std::find(ids.begin(), ids.end(), "poly_n64_s0") - ids.begin());
  auto w = n.read_block<float>({p64, 0, 0, 0}, {1, 17, 2, 3});
  EXPECT_EQ(w[0], 1.0f);
  EXPECT_TRUE(std::isnan(w[1]));  // head 1 it does not have
}

TEST_F(AggregateTest, RerunReadsOnlyChangedFiles) {
  AggregateResult first = aggregate_dir(dir_.string(), {});
  EXPECT_EQ(first.reread, good_);
  EXPECT_EQ(first.reused, 0);
  h5::File f1 = h5::File::open_read(path("aggregate.h5"));
  auto loss1 = f1.open_dataset("/trajectories/train_loss").read<double>();
  auto norms1 = f1.open_dataset("/trajectories/norms_attn_fro").read<float>();
  f1.close();
  std::ifstream c1(path("summary.csv"));
  std::string csv1((std::istreambuf_iterator<char>(c1)), {});

  AggregateResult second = aggregate_dir(dir_.string(), {});
  EXPECT_EQ(second.reread, 0);
  EXPECT_EQ(second.reused, good_);
  EXPECT_EQ(second.skipped, first.skipped);  // bad files are still looked at and listed
  EXPECT_EQ(second.columns, first.columns);
  ASSERT_EQ(second.fits.size(), first.fits.size());
  EXPECT_EQ(second.fits[0].slope, first.fits[0].slope);
  {
    h5::File f2 = h5::File::open_read(path("aggregate.h5"));
    auto loss2 = f2.open_dataset("/trajectories/train_loss").read<double>();
    ASSERT_EQ(loss2.size(), loss1.size());
    for (size_t i = 0; i < loss1.size(); ++i)
      EXPECT_TRUE(loss1[i] == loss2[i] || (std::isnan(loss1[i]) && std::isnan(loss2[i]))) << i;
    auto norms2 = f2.open_dataset("/trajectories/norms_attn_fro").read<float>();
    ASSERT_EQ(norms2.size(), norms1.size());
    for (size_t i = 0; i < norms1.size(); ++i)
      EXPECT_TRUE(norms1[i] == norms2[i] || (std::isnan(norms1[i]) && std::isnan(norms2[i]))) << i;
  }
  std::ifstream c2(path("summary.csv"));
  EXPECT_EQ(std::string((std::istreambuf_iterator<char>(c2)), {}), csv1);

  // One file rewritten (new metric, longer trajectory), one added, one removed.
  CellResult r = sample_cell("poly_n64_s0", 20);
  r.config = json{{"activation", "poly"}, {"degree", 3},         {"scale", "inv_sqrt_n"},
                  {"lr", 1e-3},           {"prompt_length", 64}, {"seed", 0}};
  r.final_metrics = {{"attn_fro", 3 * 8.0}, {"jac_fro", 0.5 * 512.0}, {"extra", 7.0}};
  fs::remove(path("runs/poly_n64_s0.h5"));
  write_cell_file(path("runs/poly_n64_s0.h5"), r);
  write_cell_file(path("runs/zz_new.h5"), sample_cell("zz_new"));
  fs::remove(path("runs/softmax_n16_s0.h5"));
  AggregateResult third = aggregate_dir(dir_.string(), {});
  EXPECT_EQ(third.cells, good_);
  EXPECT_EQ(third.reread, 2);
  EXPECT_EQ(third.reused, good_ - 2);
  h5::File f3 = h5::File::open_read(path("aggregate.h5"));
  auto ids = f3.open_dataset("/cells/cell_id").read_strings();
  EXPECT_EQ(std::count(ids.begin(), ids.end(), "softmax_n16_s0"), 0);
  const uint64_t T = 20;
  h5::Dataset loss = f3.open_dataset("/trajectories/train_loss");
  ASSERT_EQ(loss.shape(), (std::vector<uint64_t>{static_cast<uint64_t>(third.cells), T}));
  auto v = loss.read<double>();
  auto extra = f3.open_dataset("/cells/extra").read<double>();
  for (size_t i = 0; i < ids.size(); ++i) {
    SCOPED_TRACE(ids[i]);
    if (ids[i] == "poly_n64_s0") {
      EXPECT_EQ(v[i * T + 19], double(1.0f / 20.0f));
      EXPECT_EQ(extra[i], 7.0);
    } else if (ids[i] == "poly_n256_s1") {  // copied from the previous aggregate, re-padded to 20
      EXPECT_EQ(v[i * T + 16], 256.0 + 16);
      EXPECT_TRUE(std::isnan(v[i * T + 17]));
      EXPECT_TRUE(std::isnan(extra[i]));
    }
  }
  AggregateOptions full;
  full.reuse_previous = false;
  AggregateResult fourth = aggregate_dir(dir_.string(), full);
  EXPECT_EQ(fourth.reread, good_);
  EXPECT_EQ(fourth.reused, 0);
}

// In-context regression result files (paper B): limit_sq_error = c / L exactly and
// test_mse = m * L^-0.5, over three weight seeds (init_seed, a replicate: pooled, not a
// group) and two init_std (two groups): /fits has slope -1 and -0.5 per group.
TEST_F(ResultsTest, FitsOfLimitSqErrorAndTestMseAgainstL) {
  fs::create_directories(dir_ / "runs");
  const std::map<double, double> c = {{0.1, 0.37}, {1.0, 2.9}};  // init_std -> c
  int cells = 0;
  for (const auto& [std_, cc] : c)
    for (int64_t L : {16, 64, 256, 1024})
      for (int64_t init_seed : {0, 1, 2}) {
        CellResult r;
        r.config = json{{"task", "icl_regression"}, {"activation", "softmax"}, {"prompt_length", L},
                        {"init_std", std_},         {"init_seed", init_seed},  {"steps", 0}};
        r.cell_id = "icl_" + std::to_string(cells++);
        r.final_metrics = {{"limit_sq_error", cc / double(L)}, {"test_mse", 0.5 * cc / std::sqrt(double(L))}};
        r.datasets.push_back({"/icl/limit_sq_error", {1}, std::vector<double>{cc / double(L)}, "limit_sq_error"});
        write_cell_file(path("runs/" + r.cell_id + ".h5"), r);
      }
  AggregateResult a = aggregate_dir(dir_.string(), {});
  EXPECT_EQ(a.cells, cells);
  ASSERT_EQ(a.fits.size(), 4u);  // 2 groups x 2 metrics, sorted by group then metric
  const char* groups[] = {"activation=softmax init_std=0.1 steps=0 task=icl_regression",
                          "activation=softmax init_std=1 steps=0 task=icl_regression"};
  const double cs[] = {0.37, 2.9};
  for (int g = 0; g < 2; ++g) {
    const Fit& lim = a.fits[2 * g];
    const Fit& mse = a.fits[2 * g + 1];
    SCOPED_TRACE(groups[g]);
    EXPECT_EQ(lim.group, groups[g]);
    EXPECT_EQ(lim.metric, "limit_sq_error");
    EXPECT_NEAR(lim.slope, -1.0, 1e-12);
    EXPECT_NEAR(lim.intercept, std::log(cs[g]), 1e-12);
    EXPECT_NEAR(lim.r2, 1.0, 1e-12);
    EXPECT_NEAR(lim.slope_ci95, 0.0, 1e-9);
    EXPECT_EQ(lim.points, 12);  // 4 L x 3 init_seed
    EXPECT_EQ(lim.n_min, 16);
    EXPECT_EQ(lim.n_max, 1024);
    EXPECT_EQ(mse.group, groups[g]);
    EXPECT_EQ(mse.metric, "test_mse");
    EXPECT_NEAR(mse.slope, -0.5, 1e-12);
    EXPECT_NEAR(mse.intercept, std::log(0.5 * cs[g]), 1e-12);
    EXPECT_EQ(mse.points, 12);
  }
  h5::File f = h5::File::open_read(path("aggregate.h5"));
  EXPECT_EQ(f.open_dataset("/fits/metric").read_strings(),
            (std::vector<std::string>{"limit_sq_error", "test_mse", "limit_sq_error", "test_mse"}));
  auto slope = f.open_dataset("/fits/slope").read<double>();
  ASSERT_EQ(slope.size(), 4u);
  EXPECT_NEAR(slope[0], -1.0, 1e-12);
  EXPECT_NEAR(slope[2], -1.0, 1e-12);
  EXPECT_EQ(f.open_dataset("/trajectories/icl_limit_sq_error").shape(),
            (std::vector<uint64_t>{static_cast<uint64_t>(cells), 1}));
}

// An unchanged rerun writes nothing heavy: aggregate.h5 is left as it is (same inode,
// same bytes), only its mtime moves; a different --fit-min-n rewrites it.
TEST_F(AggregateTest, UnchangedRerunLeavesAggregateAlone) {
  aggregate_dir(dir_.string(), {});
  struct stat before {};
  ASSERT_EQ(::stat(path("aggregate.h5").c_str(), &before), 0);
  std::ifstream in1(path("aggregate.h5"), std::ios::binary);
  const std::string bytes1((std::istreambuf_iterator<char>(in1)), {});
  AggregateResult second = aggregate_dir(dir_.string(), {});
  EXPECT_EQ(second.reread, 0);
  struct stat after {};
  ASSERT_EQ(::stat(path("aggregate.h5").c_str(), &after), 0);
  EXPECT_EQ(after.st_ino, before.st_ino);  // not replaced by a new file
  std::ifstream in2(path("aggregate.h5"), std::ios::binary);
  EXPECT_EQ(std::string((std::istreambuf_iterator<char>(in2)), {}), bytes1);
  EXPECT_EQ(second.fits.size(), 3u);
  AggregateOptions opt;
  opt.fit_min_n = 64;
  AggregateResult third = aggregate_dir(dir_.string(), opt);
  EXPECT_EQ(third.reread, 0);
  struct stat rewritten {};
  ASSERT_EQ(::stat(path("aggregate.h5").c_str(), &rewritten), 0);
  EXPECT_NE(rewritten.st_ino, before.st_ino);  // the fits changed: a new file
  h5::File f = h5::File::open_read(path("aggregate.h5"));
  EXPECT_EQ(f.open_dataset("/fits/points").read<int64_t>(), (std::vector<int64_t>{4, 4, 4}));
  EXPECT_EQ(f.open_dataset("/trajectories/train_loss").shape(),
            (std::vector<uint64_t>{static_cast<uint64_t>(good_), 17}));
}

// Makes the (first) chunk of `dataset` in the cell file `p` fail to inflate, then writes
// the file's checksum header again: a file that passes the checksum and whose metadata
// libhdf5 reads (aggregate's pass 1 keeps it), but whose trajectory cannot be read.
void damage_chunk(const std::string& p, const std::string& dataset) {
  std::string raw;
  {
    h5::File f = h5::File::open_read(p);
    h5::Dataset d = f.open_dataset(dataset);
    const hsize_t origin[1] = {0};
    hsize_t bytes = 0;
    ASSERT_GE(H5Dget_chunk_storage_size(d.id(), origin, &bytes), 0);
    raw.resize(bytes);
    uint32_t filters = 0;
    ASSERT_GE(H5Dread_chunk(d.id(), H5P_DEFAULT, origin, &filters, raw.data()), 0);
  }
  std::ifstream in(p, std::ios::binary);
  std::string file((std::istreambuf_iterator<char>(in)), {});
  in.close();
  const size_t at = file.find(raw, 512);
  ASSERT_NE(at, std::string::npos);
  ASSERT_EQ(file.find(raw, at + 1), std::string::npos);  // the chunk, not a lookalike
  std::fill(file.begin() + static_cast<ptrdiff_t>(at), file.begin() + static_cast<ptrdiff_t>(at + raw.size()), '\xff');
  file.replace(0, 512, cell_file_header(file.substr(512)));
  std::ofstream(p, std::ios::binary | std::ios::trunc) << file;
}

// What an aggregate wrote: every /trajectories dataset (shape, values as float64 bits,
// so that NaN padding compares too, and description), /skipped, the /index rows and
// summary.csv.
struct AggregateOutput {
  struct Trajectory {
    std::vector<uint64_t> shape, bits;
    std::string description;
  };
  std::map<std::string, Trajectory> trajectories;
  std::vector<std::string> skipped, index_rows;
  std::string csv;
};

AggregateOutput read_aggregate_output(const fs::path& dir) {
  AggregateOutput out;
  h5::File f = h5::File::open_read((dir / "aggregate.h5").string());
  h5::Group t = f.open_group("/trajectories");
  for (const std::string& name : t.children()) {
    h5::Dataset d = t.open_dataset(name);
    const std::vector<double> v = d.read<double>();
    std::vector<uint64_t> bits(v.size());
    std::memcpy(bits.data(), v.data(), v.size() * sizeof(double));
    out.trajectories[name] = {d.shape(), std::move(bits), d.attribute_string("description")};
  }
  out.skipped = f.open_dataset("/skipped").read_strings();
  out.index_rows = f.open_dataset("/index/row").read_strings();
  std::ifstream in(dir / "summary.csv", std::ios::binary);
  out.csv.assign(std::istreambuf_iterator<char>(in), {});
  return out;
}

void expect_same_output(const AggregateOutput& got, const AggregateOutput& expected) {
  EXPECT_EQ(got.skipped, expected.skipped);
  EXPECT_EQ(got.index_rows, expected.index_rows);
  EXPECT_EQ(got.csv, expected.csv);
  ASSERT_EQ(got.trajectories.size(), expected.trajectories.size());
  for (const auto& [name, t] : expected.trajectories) {
    auto it = got.trajectories.find(name);
    ASSERT_NE(it, got.trajectories.end()) << name;
    EXPECT_EQ(it->second.shape, t.shape) << name;
    EXPECT_TRUE(it->second.bits == t.bits) << name << ": values differ";
    EXPECT_EQ(it->second.description, t.description) << name;
  }
}

// Two processes (pass 1: a forked child verifies checksums ahead; pass 2: forked children
// read changed files into shared memory, the next block's child while a block is
// written) write exactly what one process writes: with the work shared out as the two
// processes go; with all of it left to the children (pass 1's child finds text.h5 and
// truncated.h5 damaged, pass 2's fails on zz_damaged.h5, whose chunk does not inflate:
// the parent checks or reads those again, the one-process way, and its messages are
// the same); and with children that die (SIGKILL after their first file: the parent
// does the rest itself). The same for a rerun that copies the rows of unchanged files
// from the previous aggregate.h5 (into either of pass 2's two block buffers).
TEST_F(AggregateTest, TwoProcessReadEqualsOneProcess) {
  write_cell_file(path("runs/zz_damaged.h5"), sample_cell("zz_damaged", 300));
  damage_chunk(path("runs/zz_damaged.h5"), "/train/loss");
  std::string why;
  ASSERT_TRUE(cell_file_valid(path("runs/zz_damaged.h5"), "zz_damaged", &why)) << why;

  AggregateOptions one;
  one.reuse_previous = false;
  one.fork_min_rows = 0;
  const AggregateResult a = aggregate_dir(dir_.string(), one);
  EXPECT_EQ(a.forks, 0);
  EXPECT_EQ(a.cells, good_ + 1);
  ASSERT_EQ(std::count_if(a.skipped.begin(), a.skipped.end(),
                          [](const std::string& s) {
                            return s.rfind("runs/zz_damaged.h5: trajectories not read (row kept): ", 0) == 0;
                          }),
            1);
  const AggregateOutput expected = read_aggregate_output(dir_);
  ASSERT_FALSE(expected.trajectories.empty());

  for (int mode : {0, 1, 2})                // shared, all to the child, the child dies
    for (int64_t block_rows : {0, 1, 3}) {  // 0: all 14 rows in one block
      SCOPED_TRACE("block_rows " + std::to_string(block_rows) + ", test_reader " + std::to_string(mode));
      AggregateOptions two = one;
      two.fork_min_rows = 1;
      two.block_rows = block_rows;
      two.test_reader = mode;
      const AggregateResult b = aggregate_dir(dir_.string(), two);
      EXPECT_GT(b.forks, 0);
      EXPECT_EQ(b.cells, a.cells);
      EXPECT_EQ(b.reread, a.reread);
      EXPECT_EQ(b.skipped, a.skipped);
      EXPECT_EQ(b.columns, a.columns);
      expect_same_output(read_aggregate_output(dir_), expected);
    }

  // The rerun: 3 files rewritten since the previous aggregate (one process), kept aside.
  one.reuse_previous = true;
  aggregate_dir(dir_.string(), one);
  for (const char* id : {"poly_n16_s1", "poly_n64_s0", "softmax_n256_s0"})
    write_cell_file(path("runs/" + std::string(id) + ".h5"), sample_cell(id, 7));
  fs::copy_file(path("aggregate.h5"), path("previous.h5"));
  const AggregateResult c = aggregate_dir(dir_.string(), one);
  EXPECT_EQ(c.reread, 3);
  const AggregateOutput expected_rerun = read_aggregate_output(dir_);
  for (int64_t block_rows : {0, 1, 3}) {
    SCOPED_TRACE("rerun, block_rows " + std::to_string(block_rows));
    fs::copy_file(path("previous.h5"), path("aggregate.h5"), fs::copy_options::overwrite_existing);
    AggregateOptions two = one;
    two.fork_min_rows = 1;
    two.block_rows = block_rows;
    const AggregateResult b = aggregate_dir(dir_.string(), two);
    EXPECT_GT(b.forks, 0);
    EXPECT_EQ(b.reread, c.reread);
    EXPECT_EQ(b.reused, c.reused);
    EXPECT_EQ(b.skipped, c.skipped);
    expect_same_output(read_aggregate_output(dir_), expected_rerun);
  }
}

}  // namespace
}  // namespace attnsweep
