#include "coordinator/wakeup.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <stdexcept>

namespace attnsweep {

namespace {
std::atomic<int> g_signal{0};
int g_wake[2] = {-1, -1};

void wake() {
  if (g_wake[1] >= 0) {
    const char c = 1;
    if (::write(g_wake[1], &c, 1) < 0) { /* pipe full: already awake */
    }
  }
}
void on_stop_signal(int sig) {
  g_signal.store(sig);
  wake();
}
void on_sigchld(int) {
  wake();
}
}  // namespace

int stop_signal() {
  return g_signal.load();
}

void install_signal_handlers() {
  if (g_wake[0] < 0) {
    if (::pipe2(g_wake, O_NONBLOCK | O_CLOEXEC) != 0) throw std::runtime_error("pipe2 failed");
  }
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int sig : {SIGTERM, SIGINT, SIGUSR1}) ::sigaction(sig, &sa, nullptr);
  sa.sa_handler = on_sigchld;
  sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
  ::sigaction(SIGCHLD, &sa, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
}

void wait_for_event(double timeout_s) {
  pollfd p{g_wake[0], POLLIN, 0};
  const int ms = static_cast<int>(std::clamp(timeout_s * 1000.0, 0.0, 1000.0));
  ::poll(&p, 1, ms);
  char buf[64];
  while (::read(g_wake[0], buf, sizeof buf) > 0) {
  }
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string fmt_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  const long t = std::lround(s);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", t / 3600, (t / 60) % 60, t % 60);
  return buf;
}

}  // namespace attnsweep
