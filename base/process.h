// Child processes: a worker slot's one `attnsweep train` per attempt, in its own process
// group (so a timeout or a signal reaches everything it started), its stdout and stderr
// appended to the cell's log; and the command task's program (experiments/command.cpp),
// which stays in that group and writes to the same log.
#pragma once

#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

namespace attnsweep {

struct ChildSpec {
  std::vector<std::string> argv;                         // argv[0] is the program path
  std::vector<std::pair<std::string, std::string>> env;  // set in the child
  std::string log_path;                                  // appended to; "": inherit stdout and stderr
  std::string log_header;                                // a line written before exec
  // false: the child stays in the caller's process group, so a signal to the group (a
  // timeout, a stop forwarded by the slot) reaches it too.
  bool own_process_group = true;
  std::string what = "the training child";  // for the message of a failed exec
};

// Throws std::runtime_error when the log cannot be opened or fork fails.
pid_t spawn_child(const ChildSpec& spec);

struct ChildExit {
  pid_t pid = 0;
  bool exited = false;  // exit(code) vs killed by a signal
  int code = 0;         // exit code or signal number
};

// Reaps one finished child (any child, or the one of that pid) without blocking; pid 0
// when none.
ChildExit reap_child(pid_t pid = -1);

// Sends sig to the child's whole process group.
void signal_child(pid_t pid, int sig);

std::string describe_exit(const ChildExit& e);  // "exit code 3", "killed by signal 11 (SIGSEGV)"

// Path of the running executable (/proc/self/exe).
std::string self_executable();

}  // namespace attnsweep
