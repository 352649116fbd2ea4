// `attnsweep run`: rank 0 coordinates (class Coordinator: assign, collect, retry, time out,
// declare silent ranks lost, status.json and progress), every rank runs its slots, and
// run_sweep sets up MPI and the heartbeats and ends the run with the right exit code.
// About 630 lines: the coordinator loop is one state machine, kept in one place.
#include "coordinator/sweep.h"
#include "base/options.h"

#include <fcntl.h>
#include <mpi.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "base/cpu_env.h"
#include "base/process.h"
#include "base/utc_time.h"
#include "coordinator/fusion.h"
#include "coordinator/heartbeat.h"
#include "coordinator/liveness.h"
#include "coordinator/local_slots.h"
#include "coordinator/messages.h"
#include "coordinator/resume.h"
#include "coordinator/run_plan.h"
#include "coordinator/rundir.h"
#include "coordinator/scheduler.h"
#include "coordinator/shared_dir.h"
#include "coordinator/wakeup.h"
#include "kernels/device.h"
#include "results/cell_file.h"
#include "worker/training/progress.h"
#include "worker/training/run_cell.h"

namespace attnsweep {

namespace fs = std::filesystem;
namespace {

// ---- rank 0: the coordinator ----------------------------------------------------------
class Coordinator {
 public:
  Coordinator(const Grid& grid, const RunOptions& opt, RunDir& rd, int world, LocalSlots& local, int retries,
              double timeout_s, double rank_timeout_s, std::vector<std::string> hosts, const RunPlan& plan)
      : grid_(grid),
        opt_(opt),
        plan_(plan),
        swept_(swept_keys(grid)),
        rd_(rd),
        world_(world),
        local_(local),
        sched_(plan.cost_s, SchedulerConfig{retries, opt.backoff_s, 60.0}, plan.devices),
        timeout_s_(timeout_s),
        live_(world, rank_timeout_s, now_s()),
        hosts_(std::move(hosts)),
        offers_(static_cast<size_t>(world)),
        shutdown_sent_(static_cast<size_t>(world), false),
        bye_(static_cast<size_t>(world), false),
        tty_(::isatty(2) != 0) {
    hosts_.resize(static_cast<size_t>(world), "?");
  }

  // True when a rank was lost: run_sweep then must not wait for it in MPI_Finalize.
  bool lost_a_rank() const { return live_.any_lost(); }

  void mark_finished(size_t i, CellStatus s) {
    sched_.mark_finished(i, s);
    ++resumed_;
  }

  int run() {
    t0_ = now_s();
    // The earlier runs' time on this directory (status.json before this run rewrites it):
    // elapsed_total_s adds this run's to it.
    try {
      const std::string path = rd_.dir() + "/status.json";
      if (std::filesystem::exists(path)) {
        const json old = json::parse(read_text(path));
        prior_elapsed_ = old.value("elapsed_total_s", old.value("elapsed_s", 0.0));
      }
    } catch (const std::exception&) {
      prior_elapsed_ = 0;  // an unreadable status: this run's time only
    }
    last_line_ = t0_;
    live_ = Liveness(world_, live_.timeout_s(), t0_);
    rd_.append_event({{"event", "sweep_started"},
                      {"grid", grid_.name},
                      {"cells", grid_.cells.size()},
                      {"already_done", resumed_},
                      {"ranks", world_},
                      {"host", hostname()},
                      {"pid", ::getpid()}});
    bool stopping = false, finishing = false;
    int stop_signal = 0;
    for (;;) {
      const double now = now_s();
      if (const int sig = ::attnsweep::stop_signal(); sig != 0 && !stopping) {
        stopping = true;
        stop_signal = sig;
        std::fprintf(stderr, "%sattnsweep: signal %d: no new cells; stopping the running ones\n", tty_ ? "\n" : "",
                     sig);
        rd_.append_event({{"event", "stop_requested"}, {"signal", sig}});
        local_.forward(SIGTERM);
        shutdown_all();
      }
      for (const AttemptResult& r : local_.poll(now)) handle(r, now);
      if (world_ > 1) {
        out_.progress();
        drain_messages(now, stopping || finishing);
        for (const LostRank& l : live_.check(now)) on_rank_lost(l, now);
      }
      if (!stopping && !finishing) assign(now);
      if (!stopping && !finishing && sched_.all_terminal()) {
        finishing = true;
        shutdown_all();
      }
      if ((stopping || finishing) && !local_.busy() && all_bye()) break;
      report(now, false);
      double wait = world_ > 1 ? 0.002 : 0.25;
      wait = std::min(wait, std::max(0.0, local_.next_deadline() - now));
      // A cell backing off wakes us when it is due; a ready cell waits for a free slot (SIGCHLD wakes us).
      if (!stopping && !finishing)
        if (const double t = sched_.next_ready_time(); t > now) wait = std::min(wait, t - now);
      wait_for_event(wait);
    }
    // The last shutdowns delivered (a rank leaves once it has its own), waiting a bounded time.
    if (world_ > 1 && !out_.flush(kLastSendsToWorkersS))
      std::fprintf(stderr, "attnsweep: %zu message%s to ranks that said goodbye undelivered after %g s; leaving\n",
                   out_.pending(), out_.pending() == 1 ? "" : "s", kLastSendsToWorkersS);
    const bool interrupted = stopping && !sched_.all_terminal();
    // A lost rank may still hold a child writing a result, and the job must requeue to
    // confirm every cell: resumable, whatever the cells did.
    const bool lost = live_.any_lost();
    const int code = interrupted || lost ? 75 : (sched_.count(CellStatus::failed) > 0 ? 1 : 0);
    report(now_s(), true, interrupted ? "interrupted" : lost ? "lost_ranks" : "finished");
    for (const json& l : lost_ranks_)
      std::fprintf(stderr,
                   "attnsweep: rank %d on host %s was lost (silent for %.1f s, --rank-timeout-s %g); its cells were "
                   "reassigned; exiting 75 (resumable) so that the job requeues: a rerun checks every cell\n",
                   l["rank"].get<int>(), l["host"].get<std::string>().c_str(), l["silent_s"].get<double>(),
                   live_.timeout_s());
    if (!lost_ranks_.empty())
      std::fprintf(
          stderr,
          "attnsweep: every result is written (%s/status.json: lost_ranks); mpirun or srun may wait for a lost host "
          "that is frozen or cut off and not return: if it has not returned within a minute, kill it and "
          "rerun (the rerun finds what is left, docs/lost-ranks.md)\n",
          rd_.dir().c_str());
    rd_.append_event({{"event", "sweep_finished"},
                      {"complete", sched_.count(CellStatus::complete)},
                      {"diverged", sched_.count(CellStatus::diverged)},
                      {"failed", sched_.count(CellStatus::failed)},
                      {"pending", sched_.count(CellStatus::pending)},
                      {"exit_code", code},
                      {"signal", stop_signal},
                      {"lost_ranks", lost_ranks_}});
    return code;
  }

 private:
  // The attempt of cell i (the scheduler's pick, now running) and, with fusion, of up to
  // fuse - 1 alike cells that may run now (coordinator/fusion.h), claimed here. A group is
  // no bigger than the grid's alike cells over the rank's slots, so that a small grid
  // spreads over the slots rather than queue behind one child.
  Assignment next_assignment(size_t i, double now) {
    Assignment a;
    a.index = i;
    a.id = grid_.cells[i].id;
    a.attempt = sched_.attempts(i);
    a.timeout_s = timeout_s_;
    a.slots = sched_.slots(i);
    if (plan_.fuse <= 1 || a.slots != 1) return a;
    std::vector<size_t> candidates;
    for (size_t j : plan_.fusion.alike(i))
      if (j != i && sched_.claimable(j, now)) candidates.push_back(j);
    for (size_t j : pick_companions(plan_.fusion, i, candidates, plan_.group_cap(i)))
      if (sched_.claim(j, now)) a.also.push_back({j, grid_.cells[j].id, sched_.attempts(j)});
    return a;
  }

  void started(const Assignment& a, int rank) {
    json group = json::array();
    if (!a.also.empty())
      for (const CellAttempt& c : a.cells()) group.push_back(c.id);
    for (const CellAttempt& c : a.cells()) {
      json e = {{"event", "started"}, {"cell_id", c.id}, {"attempt", c.attempt}, {"rank", rank}, {"slots", a.slots}};
      if (!a.also.empty()) e["group"] = group;  // the cells one child trains as one, the lead first
      rd_.append_event(e);
    }
  }

  // A cell fits a rank when that many of its free slots sit on distinct devices
  // (distinct_devices); choose_slots picks them. Rank 0's slots are its own; another
  // rank's are those it offered (a request per free slot) and rank 0 has not assigned.
  void assign(double now) {
    while (local_.free() > 0) {
      const std::vector<FreeSlot> free = local_.free_slots();
      const auto i = sched_.next(now, distinct_devices(free));
      if (!i) break;
      const Assignment a = next_assignment(*i, now);
      started(a, 0);
      for (const AttemptResult& fail : local_.launch(a, choose_slots(free, a.slots), now)) handle(fail, now);
    }
    for (int r = 1; r < world_; ++r) {
      std::vector<FreeSlot>& offers = offers_[static_cast<size_t>(r)];
      while (!offers.empty() && !shutdown_sent_[r] && !live_.lost(r)) {
        const auto i = sched_.next(now, distinct_devices(offers));
        if (!i) break;
        const Assignment a = next_assignment(*i, now);
        const std::vector<int> on = choose_slots(offers, a.slots);
        std::erase_if(offers, [&](const FreeSlot& f) { return std::find(on.begin(), on.end(), f.slot) != on.end(); });
        started(a, r);
        out_.post(r, kTagAssign, to_json(a, on));
        for (const CellAttempt& c : a.cells()) live_.assigned(r, c.index, c.attempt);
      }
    }
  }

  void drain_messages(double now, bool stopping) {
    while (auto m = in_.poll(MPI_ANY_SOURCE)) {
      // Whatever a lost rank says later is ignored: its cells went to other ranks.
      const bool alive = live_.heard(m->source, now);
      switch (m->tag) {
        case kTagHeartbeat: break;
        case kTagRequest:
          if (!stopping && alive)
            offers_[static_cast<size_t>(m->source)].push_back(
                {m->payload.at("slot").get<int>(), m->payload.at("device").get<int>()});
          break;
        case kTagResult: {
          const AttemptResult r = result_from_json(m->payload);
          if (live_.take_result(m->source, r.index, r.attempt)) {
            handle(r, now);
          } else {
            rd_.append_event({{"event", "ignored_result"},
                              {"cell_id", r.id},
                              {"attempt", r.attempt},
                              {"rank", m->source},
                              {"host", hosts_[m->source]},
                              {"outcome", std::string(to_string(r.outcome))},
                              {"reason", alive ? "not an attempt this rank holds" : "the rank was lost"}});
          }
          break;
        }
        case kTagBye:
          if (!alive) break;
          live_.retire(m->source);
          bye_[m->source] = true;
          offers_[static_cast<size_t>(m->source)].clear();
          if (!shutdown_sent_[m->source]) {  // a rank that stopped on its own signal
            out_.post(m->source, kTagShutdown, json::object());
            shutdown_sent_[m->source] = true;
          }
          break;
        default:
          std::fprintf(stderr, "attnsweep: rank 0: unexpected message '%s' from rank %d\n", tag_name(m->tag),
                       m->source);
      }
    }
  }

  void shutdown_all() {
    for (int r = 1; r < world_; ++r)
      if (!shutdown_sent_[r] && !live_.lost(r)) {
        out_.post(r, kTagShutdown, json::object());
        shutdown_sent_[r] = true;
      }
  }

  bool all_bye() const {
    for (int r = 1; r < world_; ++r)
      if (!bye_[r] && !live_.lost(r)) return false;
    return true;
  }

  // A rank silent for longer than --rank-timeout-s: no more work for it, and the cells
  // it held go back to the scheduler (their attempt given back, as for a preemption).
  void on_rank_lost(const LostRank& l, double now) {
    const std::string& host = hosts_[static_cast<size_t>(l.rank)];
    json ids = json::array();
    for (size_t i : l.cells) ids.push_back(grid_.cells[i].id);
    std::fprintf(stderr,
                 "%sattnsweep: rank %d on host %s lost: silent for %.1f s (--rank-timeout-s %g); %zu cell%s it "
                 "ran go to other ranks\n",
                 tty_ ? "\n" : "", l.rank, host.c_str(), l.silent_s, live_.timeout_s(), l.cells.size(),
                 l.cells.size() == 1 ? "" : "s");
    rd_.append_event({{"event", "rank_lost"},
                      {"rank", l.rank},
                      {"host", host},
                      {"silent_s", l.silent_s},
                      {"rank_timeout_s", live_.timeout_s()},
                      {"cells", ids}});
    lost_ranks_.push_back(
        {{"rank", l.rank}, {"host", host}, {"silent_s", l.silent_s}, {"at", iso_utc_now()}, {"cells_reassigned", ids}});
    offers_[static_cast<size_t>(l.rank)].clear();
    // Its pending sends are let go of, never waited on (a frozen rank takes none). Should
    // it wake (SIGCONT), it reads what was queued for it, then this shutdown: it stops its
    // children and waits in MPI_Finalize like the others instead of running on (Open MPI
    // 4.1's mpirun then ends the job cleanly on rank 0's exit; with the lost rank still
    // busy, it crashed with 139 in 1 of 6 runs). What it sends then is ignored (below).
    out_.abandon(l.rank);
    if (!shutdown_sent_[static_cast<size_t>(l.rank)]) {
      out_.post(l.rank, kTagShutdown, json::object());
      shutdown_sent_[static_cast<size_t>(l.rank)] = true;
    }
    for (size_t i : l.cells) {
      sched_.on_result(i, CellStatus::interrupted, now, "rank lost");
      rd_.append_event({{"event", "reassigned"},
                        {"cell_id", grid_.cells[i].id},
                        {"rank", l.rank},
                        {"host", host},
                        {"reason", "rank " + std::to_string(l.rank) + " on " + host + " lost"}});
    }
  }

  void handle(const AttemptResult& r, double now) {
    const Decision d = sched_.on_result(r.index, r.outcome, now, r.reason, r.retry);
    json where = {{"cell_id", r.id}, {"attempt", r.attempt}, {"rank", r.rank}, {"slot", r.slot}, {"host", r.host}};
    switch (d.kind) {
      case Decision::done:
        ++finished_now_;
        work_done_ += cost(r.index);
        where.update({{"event", "finished"}, {"status", std::string(to_string(r.outcome))}, {"wall_s", r.wall_s}});
        break;
      case Decision::retry:
        where.update({{"event", "retried"}, {"reason", r.reason}, {"retry_in_s", d.retry_at - now}});
        break;
      case Decision::failed: {
        ++finished_now_;
        where.update({{"event", "failed"}, {"reason", r.reason}});
        const std::string words = swept_text(grid_.cells[r.index].config, swept_);
        std::fprintf(stderr, "%sattnsweep: cell %s%s failed after %d attempt%s: %s (log: %s)\n", tty_ ? "\n" : "",
                     r.id.c_str(), words.empty() ? "" : (" (" + words + ")").c_str(), r.attempt,
                     r.attempt == 1 ? "" : "s", r.reason.c_str(), rd_.log(r.id).c_str());
        break;
      }
      case Decision::requeued: where.update({{"event", "preempted"}, {"reason", r.reason}}); break;
    }
    rd_.append_event(where);
  }

  // A cell's share of the sweep's work: its estimated cost (Cell::est_cost_s), never 0.
  double cost(size_t i) const { return std::max(plan_.cost_s[i], 1e-3); }

  // The running cells with what their children last reported (worker/training/progress.h), and the
  // work left: pending cells' and running cells' steps to go. The steps running cells did
  // in this run count as work done, so the ETA needs no finished cell.
  struct Work {
    double biggest_left = 0;  // the most work left of one cell: the run takes at least that
    json running = json::array();
    double done = 0, left = 0;
  };
  Work work() const {
    Work w;
    w.done = work_done_;
    for (size_t i = 0; i < sched_.size(); ++i) {
      if (sched_.state(i) == CellStatus::pending) {
        w.left += cost(i);
        w.biggest_left = std::max(w.biggest_left, cost(i));
      }
      if (sched_.state(i) != CellStatus::running) continue;
      const std::string& id = grid_.cells[i].id;
      json r = {
          {"cell_id", id}, {"swept", swept_values(grid_.cells[i].config, swept_)}, {"attempt", sched_.attempts(i)}};
      const std::optional<CellProgress> p = read_progress(rd_.progress(id));
      const bool reported = p && p->cell_id == id && p->attempt == sched_.attempts(i);
      if (reported) r.update(to_json(*p));
      if (reported && p->steps > 0) {  // a command cell without `steps` tells no fraction done
        const double steps = static_cast<double>(p->steps);
        const double f = std::clamp(static_cast<double>(p->step) / steps, 0.0, 1.0);
        const double f0 = std::clamp(static_cast<double>(p->first_step) / steps, 0.0, f);
        w.done += cost(i) * (f - f0);
        w.left += cost(i) * (1 - f);
        w.biggest_left = std::max(w.biggest_left, cost(i) * (1 - f));
      } else {
        w.left += cost(i);
        w.biggest_left = std::max(w.biggest_left, cost(i));
      }
      w.running.push_back(r);
    }
    return w;
  }

  // The ETA: plan's cost of the work left (pending cells, running cells' steps to go)
  // spread over the slots, times how long a unit of plan's cost really takes here. That
  // factor starts at plan's own (its fusion discount: cells trained as one cost less than
  // alone) and moves to the measured one (elapsed x slots per unit of cost done) as work
  // is done, weighted like one cell's worth of evidence for plan's: so the first seconds,
  // with almost nothing done, do not swing it. At least the biggest cell left.
  double eta_s(double elapsed) const {
    if (work_.left <= 0) return 0.0;
    const double slots = std::max(1.0, static_cast<double>(plan_.slots) * world_);
    double sum = 0;
    for (size_t i = 0; i < sched_.size(); ++i) sum += cost(i);
    const double prior = sum > 0 && plan_.total_cost_s > 0 ? plan_.total_cost_s / sum : 1.0;
    const double weight = sum / std::max<double>(1.0, static_cast<double>(sched_.size()));  // one cell's cost
    const double k = (elapsed * slots + prior * weight) / (work_.done + weight);
    return k * std::max(work_.left / slots, work_.biggest_left);
  }

  void report(double now, bool final, const char* state = "running") {
    const size_t total = sched_.size();
    const size_t done = sched_.count(CellStatus::complete) + sched_.count(CellStatus::diverged);
    const size_t failed = sched_.count(CellStatus::failed);
    const size_t running = sched_.count(CellStatus::running), pending = sched_.count(CellStatus::pending);
    const double elapsed = now - t0_;
    const double rate = elapsed > 0 ? static_cast<double>(finished_now_) / elapsed : 0.0;
    const bool status_due = final || now - last_status_ >= 1.0;
    if (status_due) work_ = work();  // the progress files are read once a status
    const double eta = eta_s(elapsed);
    if (status_due) {
      last_status_ = now;
      json failed_cells = json::array();
      for (size_t i = 0; i < total; ++i)
        if (sched_.state(i) == CellStatus::failed)
          failed_cells.push_back({{"cell_id", grid_.cells[i].id},
                                  {"swept", swept_values(grid_.cells[i].config, swept_)},
                                  {"reason", sched_.last_error(i)}});
      json st = {{"state", state},
                 {"grid", grid_.name},
                 {"total", total},
                 {"complete", sched_.count(CellStatus::complete)},
                 {"diverged", sched_.count(CellStatus::diverged)},
                 {"failed", failed},
                 {"running", running},
                 {"pending", pending},
                 {"done_before_this_run", resumed_},
                 {"started", started_iso_},
                 {"updated", iso_utc_now()},
                 {"elapsed_s", elapsed},
                 {"elapsed_total_s", prior_elapsed_ + elapsed},
                 {"rate_cells_per_s", rate},
                 {"eta_s", std::isfinite(eta) ? json(eta) : json(nullptr)},
                 {"ranks", world_},
                 {"host", hostname()},
                 {"pid", ::getpid()},
                 {"running_cells", final ? json::array() : work_.running},
                 {"failed_cells", failed_cells},
                 {"lost_ranks", lost_ranks_}};
      try {
        rd_.write_status(st);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "attnsweep: %s\n", e.what());
      }
    }
    char buf[256];
    std::snprintf(buf, sizeof buf, "%zu/%zu done, %zu failed, %zu running, %.2f cells/s, ETA %s", done + failed, total,
                  failed, running, rate, final ? "0:00:00" : fmt_duration(eta).c_str());
    std::string line = buf;
    // Running cells' step and loss, as `status` shows them (two at most on the line).
    if (!final) {
      size_t shown = 0;
      for (const json& r : work_.running) {
        if (!r.contains("step") || !r.contains("steps") || shown == 2) continue;
        char c[128];
        const json& loss = r["loss"];
        std::snprintf(c, sizeof c, " | %.8s step %lld/%lld loss %.4g", r.value("cell_id", std::string("?")).c_str(),
                      static_cast<long long>(r["step"].get<int64_t>()),
                      static_cast<long long>(r["steps"].get<int64_t>()), loss.is_number() ? loss.get<double>() : NAN);
        line += c;
        ++shown;
      }
    }
    if (tty_ && (final || now - last_line_ >= 0.2)) {
      last_line_ = now;
      std::fprintf(stderr, "\r\033[K[attnsweep] %s", line.c_str());
      if (final) std::fprintf(stderr, "\n");
    } else if (!tty_ && !final && now - last_line_ >= opt_.progress_every_s) {
      last_line_ = now;
      std::fprintf(stderr, "attnsweep: %s\n", line.c_str());
    }
    if (final) {
      std::fprintf(
          stderr,
          "attnsweep: %s: %zu cells: %zu complete, %zu diverged, %zu failed, %zu not run; %zu run now in %.1f s "
          "-> %s\n",
          state, total, sched_.count(CellStatus::complete), sched_.count(CellStatus::diverged), failed,
          pending + running, finished_now_, elapsed, rd_.dir().c_str());
    }
  }

  const Grid& grid_;
  const RunOptions& opt_;
  const RunPlan& plan_;             // costs, devices, fusion and group sizes (coordinator/run_plan.h)
  std::vector<std::string> swept_;  // the keys that tell the grid's cells apart (swept_keys)
  RunDir& rd_;
  int world_;
  LocalSlots& local_;
  Scheduler sched_;
  double timeout_s_;
  Liveness live_;
  std::vector<std::string> hosts_;  // per rank
  json lost_ranks_ = json::array();
  Outbox out_;  // rank 0 never waits on a send or a receive (messages.h)
  Inbox in_;
  std::vector<std::vector<FreeSlot>> offers_;  // per rank: its free slots not yet assigned
  std::vector<bool> shutdown_sent_, bye_;
  bool tty_;
  size_t resumed_ = 0, finished_now_ = 0;
  double work_done_ = 0;  // the costs of the cells finished in this run
  Work work_;             // as of the last status
  double t0_ = 0, last_status_ = -1e9, last_line_ = 0;
  double prior_elapsed_ = 0;  // seconds of the earlier runs on this directory
  std::string started_iso_ = iso_utc_now();
};

}  // namespace

bool launched_by_mpi() {
  static constexpr options::ForeignName kSetByMpi[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK",
                                                       "MPI_LOCALNRANKS"};
  for (const options::ForeignName& v : kSetByMpi)
    if (options::launcher_env(v)) return true;
  return false;
}

namespace {

// srun started N tasks but MPI sees fewer: a PMI mismatch would run N independent
// sweeps into one directory. False (and the message) then.
bool srun_sees_every_task(int world) {
  const char* st = options::launcher_env("SLURM_STEP_NUM_TASKS");
  if (st == nullptr) return true;
  const int n = std::atoi(st);
  if (n <= 1 || world == n) return true;
  std::fprintf(stderr,
               "attnsweep run: srun started %d tasks but MPI sees %d rank%s: the MPI library was not started through "
               "srun's PMI (try srun --mpi=pmix; srun --mpi=list shows the choices)\n",
               n, world, world == 1 ? "" : "s");
  return false;
}

// Every rank's host name on rank 0 (which names a lost rank by its host); elsewhere its own.
std::vector<std::string> gather_hosts(bool mpi, int rank, int world) {
  std::vector<std::string> hosts{hostname()};
  if (!mpi) return hosts;
  constexpr int kHostLen = 256;
  char mine[kHostLen] = {};
  std::snprintf(mine, sizeof mine, "%s", hosts[0].c_str());
  std::vector<char> all(rank == 0 ? static_cast<size_t>(world) * kHostLen : 0);
  MPI_Gather(mine, kHostLen, MPI_CHAR, all.data(), kHostLen, MPI_CHAR, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    hosts.clear();
    for (int r = 0; r < world; ++r) hosts.emplace_back(&all[static_cast<size_t>(r) * kHostLen]);
  }
  return hosts;
}

// A rank other than 0: its slots, and its heartbeats to rank 0 (from a thread of their
// own where MPI allows it, else from the main loop).
int serve_rank(LocalSlots& local, int rank, int thread_level, double rank_timeout_s) {
  const double every = heartbeat_interval_s(rank_timeout_s);
  if (thread_level >= MPI_THREAD_MULTIPLE) {
    Heartbeat beat(every);
    return worker_loop(local, rank, 0);
  }
  if (rank == 1)
    std::fprintf(stderr, "attnsweep: MPI gives no MPI_THREAD_MULTIPLE: heartbeats come from the ranks' main loops\n");
  return worker_loop(local, rank, every);
}

// Rank 0's opening lines: what runs where, and the settings that do not apply here.
void print_start(const Grid& grid, const RunOptions& opt, const RankSetup& rs, int cells_per_gpu, size_t done,
                 int world) {
  if (cells_per_gpu > 1 && rs.device == "cpu")
    std::fprintf(stderr, "attnsweep: %s %d is ignored: %s, and CPU slots run one cell each (--workers)\n",
                 opt.cells_per_gpu > 0 ? "--cells-per-gpu" : "resources.cells_per_gpu", cells_per_gpu,
                 opt.device == "cpu" ? "--device cpu" : "no GPU is visible");
  const std::string per_gpu = rs.cells_per_gpu > 1 ? " (" + std::to_string(rs.cells_per_gpu) + " per GPU)" : "";
  std::fprintf(stderr,
               "attnsweep: %s: %zu cells (%zu already done), %d rank%s, %d %s slot%s%s per rank, %d thread%s per "
               "cell\n",
               grid.name.c_str(), grid.cells.size(), done, world, world == 1 ? "" : "s", rs.slots, rs.device.c_str(),
               rs.slots == 1 ? "" : "s", per_gpu.c_str(), rs.threads, rs.threads == 1 ? "" : "s");
}

}  // namespace

int run_sweep(const Grid& grid, const RunOptions& opt) {
  const bool mpi = launched_by_mpi();
  int rank = 0, world = 1, thread_level = MPI_THREAD_SINGLE;
  if (mpi) {
    // A rank whose launcher dies (kill -9 of mpirun) stops like one that is signalled,
    // instead of running on as an orphan beside the rerun.
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    // MULTIPLE: a rank's heartbeat thread sends beside its main loop (heartbeat.h).
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &thread_level);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
  }
  auto finish = [&](int code) {
    if (mpi) MPI_Finalize();
    return code;
  };
  if (!srun_sees_every_task(world)) return finish(2);

  install_signal_handlers();
  RunDir rd(opt.out_dir);
  const int retries = opt.retries >= 0 ? opt.retries : (grid.resources.retries >= 0 ? grid.resources.retries : 2);
  const double timeout_s = opt.timeout_s >= 0 ? opt.timeout_s : grid.resources.timeout_s;
  const double rank_timeout_s = opt.rank_timeout_s > 0              ? opt.rank_timeout_s
                                : grid.resources.rank_timeout_s > 0 ? grid.resources.rank_timeout_s
                                                                    : kDefaultRankTimeoutS;

  // Rank 0 prepares the directory; everyone learns whether to go on.
  std::vector<std::pair<size_t, CellStatus>> finished;
  std::string setup_error;
  // K cells per GPU: the flag, else the grid's (CPU slots ignore it).
  const int cells_per_gpu = opt.cells_per_gpu > 0 ? opt.cells_per_gpu : grid.resources.cells_per_gpu;
  RankSetup rs;
  RunPlan plan;
  try {
    rs = setup_rank(opt, cells_per_gpu);
    // What every rank checks before any cell runs: a cell needing more devices than a rank
    // has would wait for ever, and K cells that may share one GPU must fit in its memory.
    RunPlanInputs in;
    in.device = rs.device, in.slots = rs.slots, in.devices = rs.devices, in.cells_per_gpu = rs.cells_per_gpu;
    in.fuse = opt.fuse, in.check_gpu_fit = rs.device == "cuda";
    if (in.check_gpu_fit) in.gpu_memory_bytes = planned_gpu_memory(grid, &in.gpu_memory_source);
    plan = make_run_plan(grid, in);
    setup_error = plan.problem;
    if (rank == 0 && setup_error.empty()) finished = prepare_dir(grid, opt, rd);
  } catch (const std::exception& e) {  // InputError among them
    setup_error = e.what();
  }
  int setup_code = setup_error.empty() ? 0 : 2;
  if (mpi) MPI_Allreduce(MPI_IN_PLACE, &setup_code, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (setup_code != 0) {
    if (!setup_error.empty()) std::fprintf(stderr, "attnsweep run: %s\n", setup_error.c_str());
    return finish(setup_code);
  }
  // Every rank must see rank 0's DIR, before any cell runs (coordinator/shared_dir.h).
  if (mpi && check_shared_dir(rd.dir(), rank, world) != 0) return finish(2);

  const std::vector<std::string> hosts = gather_hosts(mpi, rank, world);
  LocalSlots local(rd, rs.device_of, rs.gpus, rs.device, rs.threads, rank);
  if (rank != 0) return finish(serve_rank(local, rank, thread_level, rank_timeout_s));

  print_start(grid, opt, rs, cells_per_gpu, finished.size(), world);
  Coordinator coord(grid, opt, rd, world, local, retries, timeout_s, rank_timeout_s, hosts, plan);
  for (const auto& [i, s] : finished) coord.mark_finished(i, s);
  const int code = coord.run();
  if (mpi && coord.lost_a_rank()) {
    // MPI_Finalize would wait for the lost rank for ever. Everything is written: leave
    // without it. Open MPI 4.1's mpirun then ends the job and exits with this code (75);
    // MPI_Abort instead made it crash (exit 139) tearing down a stopped rank
    // (docs/lost-ranks.md).
    std::fflush(nullptr);
    ::_exit(code);
  }
  return finish(code);
}

}  // namespace attnsweep
