#include "coordinator/local_slots.h"
#include "base/options.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "coordinator/gpu_binding.h"
#include "coordinator/wakeup.h"
#include "kernels/device.h"

namespace attnsweep {
using json = nlohmann::json;

std::vector<int> slot_devices(int devices, int per_device) {
  std::vector<int> d(static_cast<size_t>(std::max(0, devices) * std::max(0, per_device)));
  for (size_t j = 0; j < d.size(); ++j) d[j] = static_cast<int>(j % static_cast<size_t>(devices));
  return d;
}

int distinct_devices(const std::vector<FreeSlot>& free) {
  std::map<int, int> per;
  for (const FreeSlot& f : free) ++per[f.device];
  return static_cast<int>(per.size());
}

std::vector<int> choose_slots(const std::vector<FreeSlot>& free, int need) {
  // Per device: its free slots and its lowest one.
  struct Dev {
    int device = 0, free = 0, lowest = 0;
  };
  std::map<int, Dev> per;
  for (const FreeSlot& f : free) {
    auto [it, added] = per.try_emplace(f.device, Dev{f.device, 0, f.slot});
    ++it->second.free;
    it->second.lowest = std::min(it->second.lowest, f.slot);
  }
  if (need < 1 || static_cast<int>(per.size()) < need) return {};
  std::vector<Dev> devs;
  for (const auto& kv : per) devs.push_back(kv.second);
  std::sort(devs.begin(), devs.end(),
            [](const Dev& a, const Dev& b) { return a.free != b.free ? a.free > b.free : a.lowest < b.lowest; });
  std::vector<int> out;
  for (int i = 0; i < need; ++i) out.push_back(devs[static_cast<size_t>(i)].lowest);
  return out;
}

RankSetup setup_rank(const RunOptions& opt, int cells_per_gpu) {
  RankSetup r;
  const int cores = std::max(1u, std::thread::hardware_concurrency());
  const int ngpu = cuda_device_count();
  if (opt.device == "cuda" && ngpu == 0)
    throw std::runtime_error(std::string("--device cuda: ") +
                             (cuda_backend_built() ? "no CUDA device is visible" : "this build has no CUDA backend"));
  r.device = (opt.device == "cuda" || (opt.device == "auto" && ngpu > 0)) ? "cuda" : "cpu";
  // Pretend GPUs for tests on CPU hosts (ATTNSWEEP_FAKE_GPU_COUNT): shared out and named as
  // real ones, but the cells run on the CPU (coordinator/gpu_binding.h).
  bool faked = false;
  const int planned = r.device == "cuda" ? ngpu : opt.device == "auto" ? planned_gpu_count(0, &faked) : 0;
  if (r.device == "cuda" || faked) {
    // The node's ranks share out its GPUs by local rank; keep the launcher's numbering if it set one.
    std::vector<std::string> visible;
    if (const char* v = options::launcher_env("CUDA_VISIBLE_DEVICES")) {
      std::stringstream ss(v);
      for (std::string item; std::getline(ss, item, ',');)
        if (!item.empty()) visible.push_back(item);
    }
    const LocalRank local = local_rank_from_env();
    std::string names;
    for (int g : node_gpus(planned, local)) {
      r.gpus.push_back(g < static_cast<int>(visible.size()) ? visible[g] : std::to_string(g));
      names += (names.empty() ? "" : ",") + r.gpus.back();
    }
    if (local.size > 1 || faked)
      std::fprintf(stderr, "attnsweep: %s local rank %d of %d takes GPU%s %s of %d%s\n", hostname().c_str(), local.rank,
                   local.size, r.gpus.size() == 1 ? "" : "s", names.c_str(), planned,
                   faked ? " (ATTNSWEEP_FAKE_GPU_COUNT: its cells run on the CPU)" : "");
    r.cells_per_gpu = faked ? 1 : std::max(1, cells_per_gpu);
    r.devices = static_cast<int>(r.gpus.size());
    r.slots = r.devices * r.cells_per_gpu;
    r.device_of = slot_devices(r.devices, r.cells_per_gpu);
  } else {
    r.slots = opt.workers > 0 ? opt.workers : cores;
    r.devices = r.slots;
    r.device_of = slot_devices(r.slots, 1);
  }
  r.threads = opt.threads > 0 ? opt.threads : std::max(1, cores / r.slots);
  return r;
}

std::string failure_from_log(const std::string& log_path) {
  std::ifstream f(log_path, std::ios::binary);
  if (!f) return "";
  f.seekg(0, std::ios::end);
  const std::streamoff size = f.tellg();
  const std::streamoff from = std::max<std::streamoff>(0, size - 65536);  // the attempt's end is enough
  f.seekg(from);
  const std::string prefix = "attnsweep train: cell ";
  std::string line, last;
  while (std::getline(f, line))
    if (line.rfind(prefix, 0) == 0)
      last = line.substr(prefix.size());
    else if (line.rfind("=== attnsweep: cell ", 0) == 0)
      last.clear();  // an attempt's header: only this attempt's cause counts
  if (const size_t at = last.find(" failed: "); at != std::string::npos && at == last.find(' '))
    last = last.substr(at + 9);  // "<id> failed: why": the cell is named by the event already
  if (last.size() > 1000) last = last.substr(0, 997) + "...";
  return last;
}

int worker_loop(LocalSlots& local, int rank, double heartbeat_every_s) {
  // Slots offered to rank 0 (a request each) and not yet assigned.
  std::vector<bool> offered(static_cast<size_t>(local.size()), false);
  bool stopping = false, shutdown = false, bye_sent = false;
  double next_beat = 0;
  Outbox out;  // nothing here waits on rank 0 (a frozen one included)
  Inbox in;
  for (;;) {
    const double now = now_s();
    out.progress();
    if (heartbeat_every_s > 0 && now >= next_beat && !bye_sent) {
      out.post_empty_once(0, kTagHeartbeat);
      next_beat = now + heartbeat_every_s;
    }
    if (stop_signal() != 0 && !stopping) {
      stopping = true;
      local.forward(SIGTERM);
    }
    for (const AttemptResult& r : local.poll(now)) out.post(0, kTagResult, to_json(r));
    while (auto m = in.poll(0)) {
      if (m->tag == kTagAssign) {
        const Assignment a = assignment_from_json(m->payload);
        // The offered slots rank 0 chose for it (choose_slots over my offers).
        const std::vector<int> taken = m->payload.at("on_slots").get<std::vector<int>>();
        for (int j : taken)
          if (j >= 0 && j < local.size()) offered[static_cast<size_t>(j)] = false;
        if (stopping) {
          for (const CellAttempt& c : a.cells()) {
            AttemptResult r;
            r.index = c.index;
            r.id = c.id;
            r.attempt = c.attempt;
            r.outcome = CellStatus::interrupted;
            r.reason = "rank stopping";
            r.rank = rank;
            out.post(0, kTagResult, to_json(r));
          }
        } else {
          for (const AttemptResult& fail : local.launch(a, taken, now)) out.post(0, kTagResult, to_json(fail));
        }
      } else if (m->tag == kTagShutdown) {
        shutdown = true;
        if (!stopping) {
          stopping = true;
          local.forward(SIGTERM);  // nothing runs on a normal end; on a stop, children checkpoint and leave
        }
      }
    }
    if (!stopping)
      for (int j = 0; j < local.size(); ++j)
        if (local.is_free(j) && !offered[static_cast<size_t>(j)]) {
          out.post(0, kTagRequest, {{"slot", j}, {"device", local.device_of(j)}});
          offered[static_cast<size_t>(j)] = true;
        }
    if (stopping && !local.busy() && !bye_sent) {
      out.post(0, kTagBye, json::object());
      bye_sent = true;
    }
    if (bye_sent && shutdown) {
      // bye and the last results delivered before MPI_Finalize; rank 0 takes them within
      // milliseconds, and a rank 0 that never does is gone (mpirun ends this rank then).
      if (!out.flush(kLastSendsToRank0S))
        std::fprintf(stderr, "attnsweep: rank %d: rank 0 took no delivery of its last %zu messages in %.0f s\n", rank,
                     out.pending(), kLastSendsToRank0S);
      return 0;
    }
    wait_for_event(0.002);
  }
}

}  // namespace attnsweep
