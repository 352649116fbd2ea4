#include "results/tfevents.h"

#include <array>
#include <bit>
#include <cstring>

namespace attnsweep::tfevents {
namespace {

static_assert(std::endian::native == std::endian::little, "the wire formats are little-endian; so is this host");

// The byte-at-a-time table of the reflected CRC-32C: entry b is the CRC of byte b.
constexpr std::array<uint32_t, 256> kCrc32cTable = [] {
  std::array<uint32_t, 256> t{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t c = b;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    t[b] = c;
  }
  return t;
}();

template <class T>
void append_le(std::string& s, T v) {
  char b[sizeof v];
  std::memcpy(b, &v, sizeof v);
  s.append(b, sizeof v);
}

// Summary.Value's field numbers (summary.proto), and SummaryMetadata's.
constexpr int kValueTag = 1, kValueSimpleValue = 2, kValueTensor = 8, kValueMetadata = 9;
constexpr int kMetadataPluginData = 1, kPluginName = 1, kPluginContent = 2;
// HParamsPluginData's (plugin_data.proto): version 1, then the oneof of its data.
constexpr int kPluginDataVersion = 1, kPluginDataExperiment = 2, kPluginDataSessionStart = 3, kPluginDataSessionEnd = 4;

// google.protobuf.Value (struct.proto): number_value 2, string_value 3, bool_value 4.
Proto protobuf_value(const HParamValue& v) {
  Proto p;
  if (const double* d = std::get_if<double>(&v)) return p.float64(2, *d);
  if (const std::string* s = std::get_if<std::string>(&v)) return p.bytes(3, *s);
  return p.varint(4, std::get<bool>(v) ? 1 : 0);
}

// A Summary.Value of the HParams plugin: the tag, SummaryMetadata {plugin_data {"hparams",
// HParamsPluginData}}, and the empty float tensor that TensorBoard's own writer puts there
// (its readers keep the plugin's tags as tensor series): the bytes its writer makes.
Proto hparams_value(std::string_view tag, int data_field, const Proto& data) {
  Proto plugin_data;
  if (kHParamsPluginDataVersion != 0) plugin_data.varint(kPluginDataVersion, kHParamsPluginDataVersion);
  plugin_data.message(data_field, data);
  Proto plugin;
  plugin.bytes(kPluginName, "hparams").bytes(kPluginContent, plugin_data.str());
  Proto metadata;
  metadata.message(kMetadataPluginData, plugin);
  // TensorProto (tensor.proto): dtype 1 = DT_FLOAT; tensor_shape 2 = TensorShapeProto
  // {dim 2: [Dim {size 1: 0}]}, shape [0]; a Dim of size 0 has no field written.
  Proto shape;
  shape.message(2, Proto());
  Proto tensor;
  tensor.varint(1, 1).message(2, shape);
  Proto value;
  // In field-number order, as protobuf's own serializers write (and so byte for byte theirs).
  value.bytes(kValueTag, tag).message(kValueTensor, tensor).message(kValueMetadata, metadata);
  return value;
}

}  // namespace

uint32_t crc32c(std::string_view data) {
  uint32_t c = 0xFFFFFFFFu;
  for (unsigned char b : data) c = kCrc32cTable[(c ^ b) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(std::string_view data) {
  const uint32_t c = crc32c(data);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

std::string tfrecord(std::string_view data) {
  std::string r;
  r.reserve(data.size() + 16);
  append_le<uint64_t>(r, data.size());
  append_le<uint32_t>(r, masked_crc32c(r));
  r.append(data);
  append_le<uint32_t>(r, masked_crc32c(data));
  return r;
}

void Proto::raw_varint(uint64_t v) {
  while (v >= 0x80) {
    s_.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  s_.push_back(static_cast<char>(v));
}

Proto& Proto::varint(int field, uint64_t v) {
  raw_varint(static_cast<uint64_t>(field) << 3 | 0);
  raw_varint(v);
  return *this;
}

Proto& Proto::float32(int field, float v) {
  raw_varint(static_cast<uint64_t>(field) << 3 | 5);
  append_le(s_, v);
  return *this;
}

Proto& Proto::float64(int field, double v) {
  raw_varint(static_cast<uint64_t>(field) << 3 | 1);
  append_le(s_, v);
  return *this;
}

Proto& Proto::bytes(int field, std::string_view v) {
  raw_varint(static_cast<uint64_t>(field) << 3 | 2);
  raw_varint(v.size());
  s_.append(v);
  return *this;
}

// Event (event.proto): wall_time 1 (double), step 2 (int64), file_version 3, summary 5
// (Summary: value 1, repeated).
std::string event_record(double wall_time, int64_t step, const std::vector<Proto>& values) {
  Proto summary;
  for (const Proto& v : values) summary.message(1, v);
  Proto e;
  e.float64(1, wall_time);
  if (step != 0) e.varint(2, static_cast<uint64_t>(step));
  e.message(5, summary);
  return tfrecord(e.str());
}

std::string file_version_record(double wall_time) {
  Proto e;
  e.float64(1, wall_time).bytes(3, "brain.Event:2");
  return tfrecord(e.str());
}

Proto scalar_value(std::string_view tag, float value) {
  Proto v;
  v.bytes(kValueTag, tag).float32(kValueSimpleValue, value);
  return v;
}

// Experiment (api.proto): time_created_secs 3, hparam_infos 4, metric_infos 5.
// HParamInfo: name 1, type 4, domain_discrete 5 (ListValue: values 1), differs 7.
// MetricInfo: name 1 (MetricName: group 1, tag 2; the group "" is the session's own run).
Proto hparams_experiment(const std::vector<HParamInfo>& hparams, const std::vector<std::string>& metric_tags,
                         double time_created) {
  Proto experiment;
  experiment.float64(3, time_created);
  for (const HParamInfo& h : hparams) {
    Proto domain;
    for (const HParamValue& v : h.domain) domain.message(1, protobuf_value(v));
    Proto info;
    info.bytes(1, h.name).varint(4, static_cast<uint64_t>(h.type)).message(5, domain);
    if (h.differs) info.varint(7, 1);
    experiment.message(4, info);
  }
  for (const std::string& tag : metric_tags) {
    Proto name;
    name.bytes(2, tag);
    Proto info;
    info.message(1, name);
    experiment.message(5, info);
  }
  return hparams_value(kExperimentTag, kPluginDataExperiment, experiment);
}

// SessionStartInfo (plugin_data.proto): hparams 1 (a map: entries {key 1, value 2}),
// model_uri 2, start_time_secs 5.
Proto hparams_session_start(const std::map<std::string, HParamValue>& hparams, const std::string& model_uri,
                            double start_time) {
  Proto start;
  for (const auto& [name, v] : hparams) {
    Proto entry;
    entry.bytes(1, name).message(2, protobuf_value(v));
    start.message(1, entry);
  }
  if (!model_uri.empty()) start.bytes(2, model_uri);
  start.float64(5, start_time);
  return hparams_value(kSessionStartTag, kPluginDataSessionStart, start);
}

// SessionEndInfo (plugin_data.proto): status 1, end_time_secs 2.
Proto hparams_session_end(SessionStatus status, double end_time) {
  Proto end;
  if (status != SessionStatus::Unknown) end.varint(1, static_cast<uint64_t>(status));
  end.float64(2, end_time);
  return hparams_value(kSessionEndTag, kPluginDataSessionEnd, end);
}

}  // namespace attnsweep::tfevents
