#include "coordinator/rundir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "base/utc_time.h"

namespace attnsweep {

namespace fs = std::filesystem;

namespace {
std::string errno_text() {
  return std::strerror(errno);
}

}  // namespace

int remove_stale_temporaries(const std::string& folder, const std::string& prefix) {
  int removed = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(folder, ec)) {
    const std::string name = e.path().filename().string();
    if (name.find(".tmp.") == std::string::npos || name.rfind(prefix, 0) != 0) continue;
    if (fs::remove(e.path(), ec)) ++removed;
  }
  return removed;
}

std::string hostname() {
  char buf[256] = {0};
  ::gethostname(buf, sizeof buf - 1);
  return buf;
}

void make_dirs(const std::string& path) {
  std::error_code ec;
  fs::create_directories(path, ec);
  if (ec) throw std::runtime_error(path + ": cannot create directory (" + ec.message() + ")");
  if (!fs::is_directory(path)) throw std::runtime_error(path + ": exists and is not a directory");
}

RunDir::RunDir(std::string dir) : dir_(std::move(dir)) {
  while (dir_.size() > 1 && dir_.back() == '/') dir_.pop_back();
}

RunDir::~RunDir() {
  if (events_) std::fclose(events_);
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

void RunDir::open_and_lock() {
  make_dirs(dir_);
  const std::string lock = dir_ + "/run.lock";
  lock_fd_ = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd_ < 0) throw std::runtime_error(lock + ": cannot open (" + errno_text() + ")");
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    std::string holder;
    try {
      holder = read_text(lock);
    } catch (...) {
    }
    while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
    ::close(lock_fd_);
    lock_fd_ = -1;
    throw std::runtime_error(dir_ + ": another attnsweep run is using this directory (" +
                             (holder.empty() ? std::string("holder unknown") : holder) + ")");
  }
  const std::string me = "pid " + std::to_string(::getpid()) + " on host " + hostname() + "\n";
  if (::ftruncate(lock_fd_, 0) != 0 || ::pwrite(lock_fd_, me.data(), me.size(), 0) < 0) {
    // The lock itself is what matters; the text only helps a person.
  }
  for (const char* sub : {"runs", "logs", "cells", "checkpoints", "progress"}) make_dirs(dir_ + "/" + sub);
  const std::string events_path = dir_ + "/events.jsonl";
  events_ = std::fopen(events_path.c_str(), "a+");
  if (!events_) throw std::runtime_error(events_path + ": cannot open (" + errno_text() + ")");
  // A run that died mid-line (a full disk, kill -9) leaves a torn last line: end it, so
  // the next event starts a line of its own and readers skip only the torn one.
  if (std::fseek(events_, -1, SEEK_END) == 0 && std::fgetc(events_) != '\n') std::fputc('\n', events_);
  std::fflush(events_);
}

void RunDir::append_event(json event) {
  if (!events_) return;
  json line = {{"time", iso_utc_now()}};
  line.update(event);
  const std::string text = line.dump() + "\n";
  std::fwrite(text.data(), 1, text.size(), events_);
  std::fflush(events_);
}

void RunDir::write_status(const json& status) {
  atomic_write_text(dir_ + "/status.json", status.dump(2) + "\n", /*durable=*/false);
}

}  // namespace attnsweep
