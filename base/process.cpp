#include "base/process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace attnsweep {

pid_t spawn_child(const ChildSpec& spec) {
  const int fd =
      spec.log_path.empty() ? -1 : ::open(spec.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0 && !spec.log_path.empty())
    throw std::runtime_error(spec.log_path + ": cannot open log (" + std::strerror(errno) + ")");
  if (fd >= 0 && !spec.log_header.empty()) {
    const std::string line = spec.log_header + "\n";
    if (::write(fd, line.data(), line.size()) < 0) { /* the log is best effort */
    }
  }
  // Everything the child needs is prepared before fork: after it, only async-signal-safe calls.
  std::vector<char*> argv;
  for (const std::string& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<std::string> envs;
  for (const auto& [k, v] : spec.env) envs.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (std::string& e : envs) envp.push_back(e.data());
  // Inherit the rest of the environment, minus what we override.
  for (char** e = environ; *e; ++e) {
    bool overridden = false;
    for (const auto& kv : spec.env)
      if (std::strncmp(*e, kv.first.c_str(), kv.first.size()) == 0 && (*e)[kv.first.size()] == '=') overridden = true;
    if (!overridden) envp.push_back(*e);
  }
  envp.push_back(nullptr);

  const std::string exec_failed = "attnsweep: exec of " + spec.what + " (" + spec.argv.at(0) + ") failed\n";
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int err = errno;
    if (fd >= 0) ::close(fd);
    throw std::runtime_error(std::string("fork failed (") + std::strerror(err) + ")");
  }
  if (pid == 0) {
    if (spec.own_process_group) ::setpgid(0, 0);
    // If the run dies (kill -9, a lost node's mpirun), its children must not train on as
    // orphans next to the rerun: they get SIGTERM, checkpoint and leave.
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(75);  // the parent died before prctl
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::signal(SIGTERM, SIG_DFL);
    ::signal(SIGUSR1, SIG_DFL);
    ::signal(SIGINT, SIG_DFL);
    ::signal(SIGCHLD, SIG_DFL);
    ::signal(SIGPIPE, SIG_DFL);
    const int null_in = ::open("/dev/null", O_RDONLY);
    if (null_in >= 0) ::dup2(null_in, 0);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
    ::execvpe(argv[0], argv.data(), envp.data());
    if (::write(2, exec_failed.data(), exec_failed.size()) < 0) {
    }
    ::_exit(127);
  }
  if (spec.own_process_group) ::setpgid(pid, pid);  // also from the parent: no race with an early signal
  if (fd >= 0) ::close(fd);
  return pid;
}

ChildExit reap_child(pid_t which) {
  ChildExit e;
  int status = 0;
  const pid_t pid = ::waitpid(which, &status, WNOHANG);
  if (pid <= 0) return e;
  e.pid = pid;
  if (WIFEXITED(status)) {
    e.exited = true;
    e.code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    e.exited = false;
    e.code = WTERMSIG(status);
  }
  return e;
}

void signal_child(pid_t pid, int sig) {
  if (pid > 0) ::kill(-pid, sig);
}

std::string describe_exit(const ChildExit& e) {
  if (e.exited) return "exit code " + std::to_string(e.code);
  const char* name = sigabbrev_np(e.code);
  return "killed by signal " + std::to_string(e.code) + (name ? std::string(" (SIG") + name + ")" : "");
}

std::string self_executable() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) throw std::runtime_error("cannot read /proc/self/exe");
  buf[n] = 0;
  return buf;
}

}  // namespace attnsweep
