// results/tfevents.h: CRC-32C, TFRecord's masked CRC and framing, and the protobuf bytes
// of an Event and of the HParams plugin's summaries. The expected bytes were written by
// TensorBoard's own Python (tensorboard 2.15.2: its RecordWriter, event_pb2 and
// plugins/hparams/summary_v2), so a wrong field number, wire type or mask fails here; the
// CRC vectors are CRC-32C's published check values (iSCSI's). Then export_tensorboard's
// handling of a series without its steps, a second export and a bad OUT or DIR;
// tests/integration/export_tensorboard.sh reads whole exports back with TensorBoard's reader.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>

#include "results/cell_file.h"
#include "results/export_tensorboard.h"
#include "results/tfevents.h"

namespace attnsweep::tfevents {
namespace {

std::string hex(const std::string& bytes) {
  static const char* d = "0123456789abcdef";
  std::string h;
  for (unsigned char c : bytes) h += std::string{d[c >> 4], d[c & 15]};
  return h;
}

TEST(Tfevents, Crc32cKnownVectors) {
  EXPECT_EQ(crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(crc32c(""), 0u);
  EXPECT_EQ(crc32c(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(crc32c(std::string(32, '\xff')), 0x62A8AB43u);
  std::string ascending;
  for (int i = 0; i < 32; ++i) ascending.push_back(static_cast<char>(i));
  EXPECT_EQ(crc32c(ascending), 0x46DD794Eu);
}

TEST(Tfevents, MaskedCrc) {
  // ((0xE3069283 >> 15) | (0xE3069283 << 17)) + 0xa282ead8, mod 2^32; and TensorBoard's value.
  const uint32_t c = 0xE3069283u;
  EXPECT_EQ(masked_crc32c("123456789"), ((c >> 15) | (c << 17)) + 0xa282ead8u);
  EXPECT_EQ(masked_crc32c("123456789"), 0xC78AB0E5u);
}

TEST(Tfevents, OneRecordFramedAsTensorBoardWritesIt) {
  // Event {wall_time: 1.5, step: 7, summary {value {tag: "train/loss", simple_value: 0.25}}}
  const std::string data = [] {
    Proto e, summary;
    summary.message(1, scalar_value("train/loss", 0.25f));
    e.float64(1, 1.5).varint(2, 7).message(5, summary);
    return e.str();
  }();
  EXPECT_EQ(hex(data), "09000000000000f83f10072a130a110a0a747261696e2f6c6f7373150000803e");
  const std::string record = tfrecord(data);
  ASSERT_EQ(record.size(), 8 + 4 + data.size() + 4);
  // length 32 (uint64 LE), masked CRC of those 8 bytes, the data, masked CRC of the data
  EXPECT_EQ(hex(record),
            "2000000000000000"
            "29eda950"
            "09000000000000f83f10072a130a110a0a747261696e2f6c6f7373150000803e"
            "f4985d1a");
  EXPECT_EQ(record, event_record(1.5, 7, {scalar_value("train/loss", 0.25f)}));
}

TEST(Tfevents, FileVersionEvent) {
  // The first record of an event file: Event {wall_time: 1.5, file_version: "brain.Event:2"}.
  EXPECT_EQ(hex(file_version_record(1.5)).substr(24, 48), "09000000000000f83f1a0d627261696e2e4576656e743a32");
}

TEST(Tfevents, VarintsOfLargeAndNegativeValues) {
  Proto p;
  p.varint(1, 300);
  EXPECT_EQ(hex(p.str()), "08ac02");
  Proto n;
  n.varint(2, static_cast<uint64_t>(int64_t{-1}));  // int64 -1: ten bytes, as protobuf writes it
  EXPECT_EQ(hex(n.str()), "10ffffffffffffffffff01");
}

TEST(Tfevents, HParamsSummariesAsTensorBoardWritesThem) {
  // summary_v2.hparams_pb({"act": "softmax"}, trial_id="", start_time_secs=100.0).value[0]
  EXPECT_EQ(hex(hparams_session_start({{"act", std::string("softmax")}}, "", 100.0).str()),
            "0a1c5f68706172616d735f2f73657373696f6e5f73746172745f696e666f42060801120212004a2a0a280a0768706172616d73"
            "121d1a1b0a100a0361637412091a07736f66746d6178290000000000005940");
  // summary_v2.hparams_config_pb([HParam("act", Discrete(["relu", "softmax"]))],
  //                              [Metric("final/test_loss")], time_created_secs=50.0).value[0]
  EXPECT_EQ(hex(hparams_experiment({{"act", HParamType::String, {std::string("relu"), std::string("softmax")}}},
                                   {"final/test_loss"}, 50.0)
                    .str()),
            "0a145f68706172616d735f2f6578706572696d656e7442060801120212004a4b0a490a0768706172616d73123e123c1900000000"
            "00004940221c0a0361637420012a130a061a0472656c750a091a07736f66746d61782a130a11120f66696e616c2f746573745f6c"
            "6f7373");
}

TEST(Tfevents, RunNamesAreSafeFileNames) {
  EXPECT_EQ(tensorboard_run_name("s³/√N", "image", "3fa2c1d09b7e4a55"), "s3_sqrtN__3fa2c1d09b7e4a55");
  EXPECT_EQ(tensorboard_run_name("ReLU c=0.25", "image", "ab"), "ReLU_c=0.25__ab");
  EXPECT_EQ(tensorboard_run_name("s¹²/N", "icl_regression", "ab"), "s12_N__ab");
  EXPECT_EQ(tensorboard_run_name("ReLU²", "image", "ab"), "ReLU2__ab");
  EXPECT_EQ(tensorboard_run_name("", "command", "ab"), "command__ab");
  EXPECT_EQ(tensorboard_run_name("", "", "ab"), "cell__ab");
}

// A series whose steps are missing or of another length is named and left out; the rest of
// the cell is written, under its safe name; a second export replaces the first's file; an
// OUT that cannot be made is an ExportOutputError (exit 1), a DIR without runs/ is not.
TEST(ExportTensorboard, SeriesWithoutTheirStepsAreNamedAndLeftOut) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("attnsweep_tfevents_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "runs");
  CellResult r;
  r.cell_id = "abc";
  r.config = json{{"activation", "poly"}, {"degree", 3}, {"task", "image"}, {"seed", 1}};
  r.started = "2024-01-01T00:00:00Z";
  r.finished = "2024-01-01T00:00:10Z";
  r.final_metrics = {{"test_loss", 0.25}};
  r.datasets.push_back({"/train/step", {5}, std::vector<int64_t>{0, 1, 2, 3, 4}, "step"});
  r.datasets.push_back({"/train/loss", {5}, std::vector<float>{5, 4, 3, 2, 1}, "loss"});
  r.datasets.push_back({"/train/grad_norm", {4}, std::vector<float>{1, 1, 1, 1}, "one row short"});
  r.datasets.push_back({"/eval/loss", {2}, std::vector<float>{2, 1}, "no /eval/step"});
  write_cell_file((dir / "runs" / "abc.h5").string(), r);

  const fs::path out = dir / "tb";
  fs::create_directories(out / "s3__abc");
  std::ofstream(out / "s3__abc" / "events.out.tfevents.1.elsewhere") << "an earlier export's";
  const TensorboardExport e = export_tensorboard(dir.string(), out.string());
  EXPECT_EQ(e.cells, 1);
  EXPECT_EQ(e.series, 2);  // train/loss, final/test_loss
  EXPECT_EQ(e.points, 6);
  ASSERT_EQ(e.warnings.size(), 2u);
  EXPECT_EQ(e.warnings[0], "runs/abc.h5: /train/grad_norm: left out: 4 rows, expected 5 (the length of /train/step)");
  EXPECT_EQ(e.warnings[1], "runs/abc.h5: /eval/loss: left out: no /eval/step to give its steps");
  std::vector<std::string> files;
  for (const auto& f : fs::directory_iterator(out / "s3__abc")) files.push_back(f.path().filename().string());
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(files[0].rfind("events.out.tfevents.1704067200.", 0), 0u) << files[0];  // the cell's start

  std::ofstream(dir / "afile") << "";
  EXPECT_THROW(export_tensorboard(dir.string(), (dir / "afile" / "tb").string()), ExportOutputError);
  try {
    export_tensorboard((dir / "nowhere").string(), out.string());
    ADD_FAILURE() << "a DIR without runs/ was exported";
  } catch (const ExportOutputError&) {
    ADD_FAILURE() << "a DIR without runs/ is bad input, not an output error";
  } catch (const std::runtime_error& err) {
    EXPECT_NE(std::string(err.what()).find("no runs/ folder"), std::string::npos) << err.what();
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace attnsweep::tfevents
