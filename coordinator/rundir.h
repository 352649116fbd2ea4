// The results directory's bookkeeping (docs/results-schema.md, the run directory): manifest,
// lock, status.json, events.jsonl, and the cell files handed to the children.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdio>
#include <string>

#include "base/atomic_file.h"  // atomic_write_text, for the run directory's files
#include "base/text_file.h"    // read_text, for them too

namespace attnsweep {

using json = nlohmann::json;

void make_dirs(const std::string& path);  // throws std::runtime_error naming the path

class RunDir {
 public:
  explicit RunDir(std::string dir);
  ~RunDir();
  RunDir(const RunDir&) = delete;
  RunDir& operator=(const RunDir&) = delete;

  const std::string& dir() const { return dir_; }
  std::string runs(const std::string& id) const { return dir_ + "/runs/" + id + ".h5"; }
  std::string cell_file(const std::string& id) const { return dir_ + "/cells/" + id + ".json"; }
  std::string log(const std::string& id) const { return dir_ + "/logs/" + id + ".log"; }
  std::string checkpoint(const std::string& id) const { return dir_ + "/checkpoints/" + id + ".ckpt"; }
  // A running cell's step, loss and rate (worker/training/progress.h), removed when its result is written.
  std::string progress(const std::string& id) const { return dir_ + "/progress/" + id + ".json"; }

  // Creates the folders and takes the run lock (flock on DIR/run.lock, released by the
  // kernel when this process dies, so a killed run never leaves a stale lock).
  // Throws std::runtime_error naming the pid and host of the run holding it.
  void open_and_lock();
  void append_event(json event);  // adds "time"; one line, flushed
  void write_status(const json& status);

 private:
  std::string dir_;
  int lock_fd_ = -1;
  std::FILE* events_ = nullptr;
};

std::string hostname();

// Removes the temporary files ("NAME.tmp.PID") a killed writer left in `folder`, only
// those whose name starts with `prefix` when one is given. Returns how many.
int remove_stale_temporaries(const std::string& folder, const std::string& prefix = "");

}  // namespace attnsweep
