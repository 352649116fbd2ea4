// TensorBoard's event files, written without TensorFlow or a protobuf library (what
// `attnsweep export --tensorboard` writes, results/export_tensorboard.h): the TFRecord
// framing with its masked CRC-32C, the few pieces of protobuf's wire format an Event
// needs, and the messages TensorBoard reads: Event, Summary.Value (a scalar, or the
// HParams plugin's experiment and session infos). Every field number of TensorBoard's
// messages that attnsweep writes is here and nowhere else (from TensorBoard's event.proto,
// summary.proto, tensor.proto and tensor_shape.proto, its HParams plugin's api.proto and
// plugin_data.proto, and protobuf's struct.proto).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace attnsweep::tfevents {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78): TFRecord's checksum.
// crc32c("123456789") = 0xE3069283.
uint32_t crc32c(std::string_view data);
// TFRecord's masked CRC: ((crc >> 15) | (crc << 17)) + 0xa282ead8. Stored CRCs are masked
// (as LevelDB, whose log format TFRecord follows, masks them) because a CRC computed over
// data that holds unmasked CRCs is a weak check.
uint32_t masked_crc32c(std::string_view data);
// One TFRecord: the length as uint64 little-endian, the masked CRC of those 8 bytes, the
// data, the masked CRC of the data (both CRCs uint32 little-endian).
std::string tfrecord(std::string_view data);

// A protobuf message as it is built: fields appended in the order written (proto3: a
// field at its default is simply not written).
class Proto {
 public:
  Proto& varint(int field, uint64_t v);         // wire type 0: int32, int64 (two's complement), enum, bool
  Proto& float32(int field, float v);           // wire type 5, little-endian IEEE 754
  Proto& float64(int field, double v);          // wire type 1, little-endian IEEE 754
  Proto& bytes(int field, std::string_view v);  // wire type 2: a string, bytes or a message
  Proto& message(int field, const Proto& m) { return bytes(field, m.str()); }
  const std::string& str() const { return s_; }

 private:
  void raw_varint(uint64_t v);
  std::string s_;
};

// An Event record's bytes (TFRecord-framed): wall time in seconds since the epoch, the
// step and a Summary of `values` (Summary.Value messages).
std::string event_record(double wall_time, int64_t step, const std::vector<Proto>& values);
// The first record of every event file: its file_version, "brain.Event:2".
std::string file_version_record(double wall_time);

// Summary.Value: `tag` with a simple_value (TensorBoard's scalars).
Proto scalar_value(std::string_view tag, float value);

// The HParams plugin. A hyperparameter's value: a number, a string or a boolean
// (google.protobuf.Value's number_value, string_value, bool_value).
using HParamValue = std::variant<double, std::string, bool>;
enum class HParamType { String = 1, Bool = 2, Float64 = 3 };  // api.proto DataType

struct HParamInfo {
  std::string name;
  HParamType type = HParamType::String;
  std::vector<HParamValue> domain;  // the values the grid takes (domain_discrete)
  // Whether the sessions differ in it: the HParams view shows these columns first.
  bool differs = false;
};

// 0: what TensorBoard's own writer stores, and the only version its reader accepts.
inline constexpr int kHParamsPluginDataVersion = 0;
inline constexpr const char* kExperimentTag = "_hparams_/experiment";
inline constexpr const char* kSessionStartTag = "_hparams_/session_start_info";
inline constexpr const char* kSessionEndTag = "_hparams_/session_end_info";
enum class SessionStatus { Unknown = 0, Success = 1, Failure = 2, Running = 3 };  // api.proto Status

// Summary.Value of tag _hparams_/experiment: the hyperparameters and the metrics (each a
// scalar tag of the session's own run) the HParams view lists. Written once, in the
// logdir's top folder.
Proto hparams_experiment(const std::vector<HParamInfo>& hparams, const std::vector<std::string>& metric_tags,
                         double time_created);
// Summary.Value of tag _hparams_/session_start_info: one session's hyperparameters,
// written in its run (its folder). `model_uri`: where its result is.
Proto hparams_session_start(const std::map<std::string, HParamValue>& hparams, const std::string& model_uri,
                            double start_time);
// Summary.Value of tag _hparams_/session_end_info.
Proto hparams_session_end(SessionStatus status, double end_time);

}  // namespace attnsweep::tfevents
