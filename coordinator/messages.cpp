#include "coordinator/messages.h"

#include <mpi.h>

#include <chrono>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace attnsweep {
using json = nlohmann::json;

namespace {

// A buffer MPI may still read or write after its request was let go of (a send to a lost
// rank, a receive a frozen sender never finished): kept, reachable, to the process's end.
void keep_to_exit(std::unique_ptr<std::string> buffer) {
  static std::mutex mu;
  static auto* kept = new std::vector<std::unique_ptr<std::string>>();
  std::lock_guard<std::mutex> lock(mu);
  kept->push_back(std::move(buffer));
}

// After MPI_Finalize, MPI has taken what was pending: nothing is left to free.
bool mpi_finalized() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  return finalized != 0;
}

}  // namespace

struct Outbox::State {
  struct Pending {
    int dest = -1, tag = -1;
    MPI_Request req = MPI_REQUEST_NULL;
    std::unique_ptr<std::string> text;  // stable address: MPI reads it until the send completes
  };
  std::vector<Pending> pending;
  std::set<int> abandoned;

  static void release(Pending& p) {
    MPI_Request_free(&p.req);
    keep_to_exit(std::move(p.text));
  }
};

Outbox::Outbox() : s_(std::make_unique<State>()) {}

Outbox::~Outbox() {
  if (mpi_finalized()) return;
  for (State::Pending& p : s_->pending) State::release(p);
}

void Outbox::post(int dest, int tag, const json& payload) {
  State::Pending p;
  p.dest = dest, p.tag = tag;
  p.text = std::make_unique<std::string>(payload.is_null() ? std::string() : payload.dump());
  MPI_Isend(p.text->data(), static_cast<int>(p.text->size()), MPI_CHAR, dest, tag, MPI_COMM_WORLD, &p.req);
  if (s_->abandoned.count(dest)) {
    State::release(p);
    return;
  }
  s_->pending.push_back(std::move(p));
}

void Outbox::post_empty_once(int dest, int tag) {
  progress();
  for (const State::Pending& p : s_->pending)
    if (p.dest == dest && p.tag == tag) return;
  post(dest, tag, json());
}

size_t Outbox::progress() {
  std::erase_if(s_->pending, [](State::Pending& p) {
    int done = 0;
    MPI_Test(&p.req, &done, MPI_STATUS_IGNORE);
    return done != 0;
  });
  return s_->pending.size();
}

size_t Outbox::pending() const {
  return s_->pending.size();
}

void Outbox::abandon(int dest) {
  s_->abandoned.insert(dest);
  std::erase_if(s_->pending, [&](State::Pending& p) {
    if (p.dest != dest) return false;
    State::release(p);
    return true;
  });
}

bool Outbox::flush(double timeout_s) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (progress() > 0) {
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

struct Inbox::State {
  struct Receiving {
    int source = -1, tag = -1;
    MPI_Request req = MPI_REQUEST_NULL;
    std::unique_ptr<std::string> text;  // stable address: MPI writes it until the receive completes
  };
  std::map<int, std::deque<Receiving>> by_source;  // in arrival order per source

  // The front of a source's queue, once complete.
  std::optional<Message> take(int source) {
    auto it = by_source.find(source);
    if (it == by_source.end() || it->second.empty()) return std::nullopt;
    Receiving& r = it->second.front();
    int done = 0;
    MPI_Test(&r.req, &done, MPI_STATUS_IGNORE);
    if (!done) return std::nullopt;
    Message m;
    m.source = r.source;
    m.tag = r.tag;
    m.payload = r.text->empty() ? json::object() : json::parse(*r.text);
    it->second.pop_front();
    return m;
  }
};

Inbox::Inbox() : s_(std::make_unique<State>()) {}

Inbox::~Inbox() {
  if (mpi_finalized()) return;
  // A receive a frozen sender never finished: let go of, its buffer kept.
  for (auto& [source, q] : s_->by_source)
    for (State::Receiving& r : q) {
      MPI_Request_free(&r.req);
      keep_to_exit(std::move(r.text));
    }
}

std::optional<Message> Inbox::poll(int source) {
  for (auto& [from, q] : s_->by_source)
    if (source == MPI_ANY_SOURCE || from == source)
      if (auto m = s_->take(from)) return m;
  for (;;) {
    int flag = 0;
    MPI_Status st;
    MPI_Iprobe(source, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &st);
    if (!flag) return std::nullopt;
    int count = 0;
    MPI_Get_count(&st, MPI_CHAR, &count);
    State::Receiving r;
    r.source = st.MPI_SOURCE;
    r.tag = st.MPI_TAG;
    r.text = std::make_unique<std::string>(static_cast<size_t>(count), '\0');
    // The probed message itself: only this thread receives, and MPI keeps the order of one
    // sender's messages of one tag, so a receive of that sender and tag matches it.
    MPI_Irecv(r.text->data(), count, MPI_CHAR, r.source, r.tag, MPI_COMM_WORLD, &r.req);
    s_->by_source[r.source].push_back(std::move(r));
    if (auto m = s_->take(st.MPI_SOURCE)) return m;
  }
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
