#include "coordinator/local_slots.h"

#include <mpi.h>

#include <cstdlib>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "coordinator/wakeup.h"
#include "kernels/device.h"

namespace attnsweep {
using json = nlohmann::json;

RankSetup setup_rank(const RunOptions& opt) {
  RankSetup r;
  const int cores = std::max(1u, std::thread::hardware_concurrency());
  const int ngpu = cuda_device_count();
  if (opt.device == "cuda" && ngpu == 0)
    throw std::runtime_error(std::string("--device cuda: ") +
                             (cuda_backend_built() ? "no CUDA device is visible" : "this build has no CUDA backend"));
  r.device = (opt.device == "cuda" || (opt.device == "auto" && ngpu > 0)) ? "cuda" : "cpu";
  if (r.device == "cuda") {
    // One slot per visible GPU; keep the launcher's numbering if it set one.
    std::vector<std::string> visible;
    if (const char* v = std::getenv("CUDA_VISIBLE_DEVICES")) {
      std::stringstream ss(v);
      for (std::string item; std::getline(ss, item, ',');)
        if (!item.empty()) visible.push_back(item);
    }
    for (int g = 0; g < ngpu; ++g)
      r.gpus.push_back(g < static_cast<int>(visible.size()) ? visible[g] : std::to_string(g));
    r.slots = ngpu;
  } else {
    r.slots = opt.workers > 0 ? opt.workers : cores;
  }
  r.threads = opt.threads > 0 ? opt.threads : std::max(1, cores / r.slots);
  return r;
}

int worker_loop(LocalSlots& local, int rank, double heartbeat_every_s) {
  int outstanding = 0;
  bool stopping = false, shutdown = false, bye_sent = false;
  double next_beat = 0;
  for (;;) {
    const double now = now_s();
    if (heartbeat_every_s > 0 && now >= next_beat && !bye_sent) {
      MPI_Send(nullptr, 0, MPI_CHAR, 0, kTagHeartbeat, MPI_COMM_WORLD);
      next_beat = now + heartbeat_every_s;
    }
    if (stop_signal() != 0 && !stopping) {
      stopping = true;
      local.forward(SIGTERM);
    }
    for (const AttemptResult& r : local.poll(now)) mpi_send(0, kTagResult, to_json(r));
    while (auto m = mpi_poll(0)) {
      if (m->tag == kTagAssign) {
        --outstanding;
        Assignment a;
        a.index = m->payload.at("index").get<size_t>();
        a.id = m->payload.at("id").get<std::string>();
        a.attempt = m->payload.at("attempt").get<int>();
        a.timeout_s = m->payload.at("timeout_s").get<double>();
        a.slots = m->payload.value("slots", 1);
        outstanding -= a.slots - 1;  // one request per free slot was sent
        if (stopping) {
          AttemptResult r;
          r.index = a.index;
          r.id = a.id;
          r.attempt = a.attempt;
          r.outcome = CellStatus::interrupted;
          r.reason = "rank stopping";
          r.rank = rank;
          mpi_send(0, kTagResult, to_json(r));
        } else if (auto fail = local.launch(a, now)) {
          mpi_send(0, kTagResult, to_json(*fail));
        }
      } else if (m->tag == kTagShutdown) {
        shutdown = true;
        if (!stopping) {
          stopping = true;
          local.forward(SIGTERM);  // nothing runs on a normal end; on a stop, children checkpoint and leave
        }
      }
    }
    if (!stopping) {
      while (outstanding < local.free()) {
        mpi_send(0, kTagRequest, json::object());
        ++outstanding;
      }
    }
    if (stopping && !local.busy() && !bye_sent) {
      mpi_send(0, kTagBye, json::object());
      bye_sent = true;
    }
    if (bye_sent && shutdown) return 0;
    wait_for_event(0.002);
  }
}

}  // namespace attnsweep
