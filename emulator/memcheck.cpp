// The emulated device's memcheck without a sanitizer: device memory and dynamic shared
// memory end at a guard page and start after one, and a fault there (or in a fiber
// stack's guard) while a kernel thread runs becomes that launch's error, as
// compute-sanitizer's memcheck reports an invalid global or shared read. The bytes
// between the front guard and the allocation's start hold a canary: a write there (an
// index one below 0) is found after the launch that made it, and when it is freed. Under ASan the allocations are plain
// heap memory of exactly the size asked, and ASan reports the overflow itself.
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
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
constexpr unsigned char kCanary = 0xa5;
constexpr size_t kCanaryChecked = 64;  // the bytes just before an allocation, checked after every launch

struct Guarded {
  size_t bytes;  // asked for
  char* map;     // the mapping: [map, map + map_len), its first and last pages the guards
  size_t map_len;
  const char* what;  // "cudaMalloc", "dynamic shared memory"
};

#ifndef ATTNSWEEP_EMU_SANITIZER  // under ASan the memory is plain heap memory: no guard pages, no handler
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

// The region whose front guard holds `addr` (it lies below the region's user pointer).
const Guarded* front_guard_hit(uintptr_t addr, uintptr_t& user) {
  auto it = regions().upper_bound(addr);
  if (it == regions().end()) return nullptr;
  const auto front = reinterpret_cast<uintptr_t>(it->second.map);
  if (addr < front || addr >= front + kPage) return nullptr;
  user = it->first;
  return &it->second;
}

// The canary's first changed byte in [from, user), as "a write at byte -k of ...", or "".
std::string canary_broken(uintptr_t user, const Guarded& g, size_t bytes_checked) {
  const char* start = g.map + kPage;
  const char* p = reinterpret_cast<const char*>(user);
  const char* from = p - std::min<size_t>(bytes_checked, static_cast<size_t>(p - start));
  for (const char* c = from; c < p; ++c)
    if (static_cast<unsigned char>(*c) != kCanary)
      return "memcheck: a write at byte -" + std::to_string(p - c) + " of " + g.what + " of " +
             std::to_string(g.bytes) + " bytes, before its start";
  return "";
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
    else if (const Guarded* f = front_guard_hit(addr, user))
      what = "memcheck: an access at byte -" + std::to_string(user - addr) + " of " + f->what + " of " +
             std::to_string(f->bytes) + " bytes, before its start";
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
}
#endif  // ATTNSWEEP_EMU_SANITIZER

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
  const size_t len = (used + kPage - 1) / kPage * kPage + 2 * kPage;
  void* m = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) return nullptr;
  char* map = static_cast<char*>(m);
  if (mprotect(map + len - kPage, kPage, PROT_NONE) != 0 || mprotect(map, kPage, PROT_NONE) != 0) {
    munmap(m, len);
    return nullptr;
  }
  char* p = map + len - kPage - used;
  std::memset(map + kPage, kCanary, static_cast<size_t>(p - (map + kPage)));  // the canary before the start
  std::memset(p, 0xff, used);  // poisoned: NaN in every float type (initcheck)
  std::lock_guard lock(g_mutex);
  regions()[reinterpret_cast<uintptr_t>(p)] = Guarded{bytes, map, len, what};
  return p;
#endif
}

std::string guarded_free(void* p) {
  if (!p) return "";
#ifdef ATTNSWEEP_EMU_SANITIZER
  std::free(p);
  return "";
#else
  Guarded g{};
  std::string broken;
  {
    std::lock_guard lock(g_mutex);
    auto it = regions().find(reinterpret_cast<uintptr_t>(p));
    if (it == regions().end()) {
      std::fprintf(stderr, "attnsweep emulator: guarded_free of a pointer it did not allocate\n");
      std::abort();
    }
    g = it->second;
    broken = canary_broken(it->first, g, kPage);
    regions().erase(it);
  }
  munmap(g.map, g.map_len);
  return broken.empty() ? "" : broken + " (found when it was freed)";
#endif
}

std::string writes_before_allocations() {
#ifdef ATTNSWEEP_EMU_SANITIZER
  return "";
#else
  std::lock_guard lock(g_mutex);
  for (const auto& [user, g] : regions())
    if (std::string b = canary_broken(user, g, kCanaryChecked); !b.empty()) {
      // Reported once: the canary is made whole again for the launches after this one.
      char* start = g.map + kPage;
      std::memset(start, kCanary, user - reinterpret_cast<uintptr_t>(start));
      return b;
    }
  return "";
#endif
}

}  // namespace attnsweep::emu
