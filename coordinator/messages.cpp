#include "coordinator/messages.h"

#include <mpi.h>

namespace attnsweep {
using json = nlohmann::json;

void mpi_send(int dest, int tag, const json& payload) {
  const std::string text = payload.dump();
  MPI_Send(text.data(), static_cast<int>(text.size()), MPI_CHAR, dest, tag, MPI_COMM_WORLD);
}

std::optional<Message> mpi_poll(int source) {
  int flag = 0;
  MPI_Status st;
  MPI_Iprobe(source, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &st);
  if (!flag) return std::nullopt;
  int count = 0;
  MPI_Get_count(&st, MPI_CHAR, &count);
  std::string text(static_cast<size_t>(count), '\0');
  MPI_Recv(text.data(), count, MPI_CHAR, st.MPI_SOURCE, st.MPI_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  Message m;
  m.source = st.MPI_SOURCE;
  m.tag = st.MPI_TAG;
  m.payload = text.empty() ? json::object() : json::parse(text);
  return m;
}

json to_json(const Assignment& a, const std::vector<int>& on_slots) {
  json also = json::array();
  for (const CellAttempt& c : a.also) also.push_back({{"index", c.index}, {"id", c.id}, {"attempt", c.attempt}});
  return {{"index", a.index}, {"id", a.id},           {"attempt", a.attempt}, {"timeout_s", a.timeout_s},
          {"slots", a.slots}, {"on_slots", on_slots}, {"also", also}};
}

Assignment assignment_from_json(const json& j) {
  Assignment a;
  a.index = j.at("index").get<size_t>();
  a.id = j.at("id").get<std::string>();
  a.attempt = j.at("attempt").get<int>();
  a.timeout_s = j.at("timeout_s").get<double>();
  a.slots = j.value("slots", 1);
  for (const json& c : j.value("also", json::array()))
    a.also.push_back({c.at("index").get<size_t>(), c.at("id").get<std::string>(), c.at("attempt").get<int>()});
  return a;
}

json to_json(const AttemptResult& r) {
  return {{"index", r.index},     {"id", r.id},
          {"attempt", r.attempt}, {"outcome", std::string(to_string(r.outcome))},
          {"reason", r.reason},   {"wall_s", r.wall_s},
          {"rank", r.rank},       {"slot", r.slot},
          {"host", r.host},       {"retry", r.retry}};
}

AttemptResult result_from_json(const json& j) {
  AttemptResult r;
  r.index = j.at("index").get<size_t>();
  r.id = j.at("id").get<std::string>();
  r.attempt = j.at("attempt").get<int>();
  const std::string o = j.at("outcome").get<std::string>();
  // Anything but complete, diverged or interrupted is a failure (as it always was).
  const std::optional<CellStatus> outcome = cell_status_from_string(o);
  r.outcome = outcome && (is_final(*outcome) || *outcome == CellStatus::interrupted) ? *outcome : CellStatus::failed;
  r.reason = j.value("reason", "");
  r.wall_s = j.value("wall_s", 0.0);
  r.rank = j.value("rank", 0);
  r.slot = j.value("slot", 0);
  r.host = j.value("host", "");
  r.retry = j.value("retry", true);
  return r;
}

}  // namespace attnsweep
