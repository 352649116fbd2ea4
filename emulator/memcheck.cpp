// The emulated device's memcheck without a sanitizer: device memory and dynamic shared
// memory end at a guard page, and a fault there (or in a fiber stack's guard) while a
// kernel thread runs becomes that launch's error, as compute-sanitizer's memcheck reports
// an invalid global or shared read. Under ASan the allocations are plain heap memory of
// exactly the size asked, and ASan reports the overflow itself.
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include "emulator/emu.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define ATTNSWEEP_EMU_SANITIZER 1
#endif

namespace attnsweep::emu {

namespace {

constexpr size_t kPage = 4096;

struct Guarded {
  size_t bytes;  // asked for
  char* map;     // the mapping: [map, map + map_len), its last page the guard
  size_t map_len;
  const char* what;  // "cudaMalloc", "dynamic shared memory"
};

// By the user pointer. Its own mutex, held only to insert, erase and look up (never while
// a kernel runs), so the fault handler can take it.
std::mutex g_mutex;
std::map<uintptr_t, Guarded>& regions() {
  static auto& m = *new std::map<uintptr_t, Guarded>;  // never destroyed: statics free device memory at exit
  return m;
}

struct sigaction g_previous {};

// The region whose guard page holds `addr`, or nullptr.
const Guarded* guard_hit(uintptr_t addr, uintptr_t& user) {
  auto& m = regions();
  auto it = m.upper_bound(addr);
  if (it == m.begin()) return nullptr;
  --it;
  const Guarded& g = it->second;
  const auto guard = reinterpret_cast<uintptr_t>(g.map + g.map_len - kPage);
  if (addr < guard || addr >= guard + kPage) return nullptr;
  user = it->first;
  return &g;
}

void on_fault(int sig, siginfo_t* info, void* context) {
  const auto addr = reinterpret_cast<uintptr_t>(info->si_addr);
  std::string what;
  {
    std::lock_guard lock(g_mutex);
    uintptr_t user = 0;
    if (const Guarded* g = guard_hit(addr, user))
      what = "memcheck: an access at byte " + std::to_string(addr - user) + " of " + g->what + " of " +
             std::to_string(g->bytes) + " bytes, past its end";
  }
  const std::string who = running_thread();
  if (what.empty() && !who.empty())
    what = "memcheck: an illegal address " + std::to_string(addr) +
           " (outside every allocation, or a fiber's stack "
           "overflowed: ATTNSWEEP_EMU_STACK_KIB)";
  if (!what.empty() && !who.empty()) kernel_fault(what + ", by " + who);  // never returns: the launch fails with it
  if (!what.empty()) std::fprintf(stderr, "attnsweep emulator: %s, outside a kernel\n", what.c_str());
  // Not a kernel's: whoever handled it before (or the default action) takes it.
  sigaction(sig, &g_previous, nullptr);
  (void)context;
}

void install_handler() {
#ifndef ATTNSWEEP_EMU_SANITIZER
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa {};
    sa.sa_sigaction = on_fault;
    sigemptyset(&sa.sa_mask);
    // SA_NODEFER: the handler leaves by switching to the block scheduler, never returning,
    // so SIGSEGV must not stay blocked after it.
    sa.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
    sigaction(SIGSEGV, &sa, &g_previous);
  });
  // A stack for the handler itself, on every host thread that runs kernels (a fiber whose
  // stack overflowed has none left).
  thread_local bool has_stack = [] {
    stack_t ss{};
    ss.ss_size = 64 * 1024;
    ss.ss_sp = std::malloc(ss.ss_size);
    return ss.ss_sp && sigaltstack(&ss, nullptr) == 0;
  }();
  (void)has_stack;
#endif
}

}  // namespace

void* guarded_alloc(size_t bytes, const char* what) {
#ifdef ATTNSWEEP_EMU_SANITIZER
  (void)what;
  void* p = nullptr;
  if (posix_memalign(&p, 256, std::max<size_t>(bytes, 1)) != 0) return nullptr;
  std::memset(p, 0xff, std::max<size_t>(bytes, 1));
  return p;
#else
  install_handler();
  const size_t used = (std::max<size_t>(bytes, 1) + 15) / 16 * 16;
  const size_t len = (used + kPage - 1) / kPage * kPage + kPage;
  void* m = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) return nullptr;
  char* map = static_cast<char*>(m);
  if (mprotect(map + len - kPage, kPage, PROT_NONE) != 0) {
    munmap(m, len);
    return nullptr;
  }
  char* p = map + len - kPage - used;
  std::memset(p, 0xff, used);  // poisoned: NaN in every float type (initcheck)
  std::lock_guard lock(g_mutex);
  regions()[reinterpret_cast<uintptr_t>(p)] = Guarded{bytes, map, len, what};
  return p;
#endif
}

void guarded_free(void* p) {
  if (!p) return;
#ifdef ATTNSWEEP_EMU_SANITIZER
  std::free(p);
#else
  Guarded g{};
  {
    std::lock_guard lock(g_mutex);
    auto it = regions().find(reinterpret_cast<uintptr_t>(p));
    if (it == regions().end()) {
      std::fprintf(stderr, "attnsweep emulator: guarded_free of a pointer it did not allocate\n");
      std::abort();
    }
    g = it->second;
    regions().erase(it);
  }
  munmap(g.map, g.map_len);
#endif
}

}  // namespace attnsweep::emu
