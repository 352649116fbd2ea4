// The sweep's loops sleep until something happens: a stop signal (TERM, INT, USR1: the
// flag below), a child's exit (SIGCHLD) or a timeout, through a self-pipe the handlers
// write to. Also the clock and the duration format of the progress lines.
#pragma once

#include <string>

namespace attnsweep {

// Installs the handlers of SIGTERM, SIGINT, SIGUSR1 (stop), SIGCHLD (wake) and ignores
// SIGPIPE; creates the self-pipe on first use. Throws std::runtime_error if it cannot.
void install_signal_handlers();

// The stop signal received so far, 0 if none.
int stop_signal();

// Sleeps until a signal or child event or `timeout_s` (at most 1 s), whichever is first.
void wait_for_event(double timeout_s);

// Seconds on a monotonic clock.
double now_s();

// "h:mm:ss", "?" for a negative or non-finite duration.
std::string fmt_duration(double s);

}  // namespace attnsweep
