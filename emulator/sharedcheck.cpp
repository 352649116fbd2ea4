// The entry points of GCC's ThreadSanitizer instrumentation, taken by the emulated device
// instead of ThreadSanitizer's runtime: the CUDA sources of the emulated build call them
// at every load and store (emu.h, "sharedcheck"). An access in a block not watched returns
// after one test; in a watched block, one inside its shared memory goes to shared_access
// and any other to host_access (block.cpp). Atomics and the rest of the runtime's interface are not
// needed: the kernels use no atomics, and the instrumentation is asked for no function
// entries (--param=tsan-instrument-func-entry-exit=0).
#include "emulator/emu.h"

#include <dlfcn.h>

#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace attnsweep::emu {

thread_local SharedSpan t_shared_spans[3] __attribute__((tls_model("initial-exec")));
thread_local bool t_watched __attribute__((tls_model("initial-exec"))) = false;

namespace {

bool g_instrumented = false;  // set by the instrumented modules' constructors (__tsan_init)

inline void check_access(const volatile void* p, size_t bytes, bool write, const void* pc) {
  // Most blocks are not watched (their spans are empty): one test, then back. The calls
  // come at every load and store of the kernels, a third of the emulated suite's time.
  if (__builtin_expect(!t_watched, 1)) return;
  const auto a = reinterpret_cast<uintptr_t>(p);
  for (const SharedSpan& s : t_shared_spans)
    if (a - s.begin < s.size) {
      shared_access(const_cast<const void*>(p), bytes, write, pc);
      return;
    }
  host_access(const_cast<const void*>(p), bytes, write, pc);
}

std::string hex(uintptr_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%lx", static_cast<unsigned long>(v));
  return buf;
}

}  // namespace

// ATTNSWEEP_EMU_SHAREDCHECK: 0 (off), all (every block) or anything else (a few blocks a
// grid: block.cpp's run_grid); read once, at load.
const char* const g_variable = std::getenv("ATTNSWEEP_EMU_SHAREDCHECK");
std::atomic<bool> g_enabled{!(g_variable && std::strcmp(g_variable, "0") == 0)};
const bool g_every_block = g_variable && std::strcmp(g_variable, "all") == 0;

bool sharedcheck_on() {
  return g_instrumented && g_enabled.load(std::memory_order_relaxed);
}

bool sharedcheck_every_block() {
  return g_every_block;
}

void set_sharedcheck(bool on) {
  g_enabled = on;
}

// addr2line's first line for the instruction before `pc` (with `flags`), or "" and *where
// set to the binary and offset.
std::string addr2line(const void* pc, const char* flags, std::string* where) {
  Dl_info info{};
  if (!dladdr(pc, &info) || !info.dli_fbase) {
    *where = hex(reinterpret_cast<uintptr_t>(pc));
    return "";
  }
  const std::string binary = info.dli_fname && *info.dli_fname ? info.dli_fname : "/proc/self/exe";
  const uintptr_t offset = reinterpret_cast<uintptr_t>(pc) - 1 - reinterpret_cast<uintptr_t>(info.dli_fbase);
  *where = binary + "+" + hex(offset);
  const std::string cmd = std::string("addr2line ") + flags + " -e '" + binary + "' " + hex(offset) + " 2>/dev/null";
  FILE* f = popen(cmd.c_str(), "r");
  if (!f) return "";
  std::array<char, 4096> line{};
  const bool got = std::fgets(line.data(), static_cast<int>(line.size()), f) != nullptr;
  pclose(f);
  std::string s = got ? std::string(line.data()) : "";
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s.empty() || s[0] == '?' ? "" : s;
}

std::string code_line(const void* pc) {
  // Over the line table (-g1): the innermost inlined function's line comes first.
  std::string where;
  std::string s = addr2line(pc, "-i", &where);
  if (s.empty()) return where;
  if (auto k = s.find(" (discriminator"); k != std::string::npos) s.resize(k);
  // By its last two components, as every other line the emulator names.
  if (auto k = s.rfind('/'); k != std::string::npos && k > 0)
    if (auto k2 = s.rfind('/', k - 1); k2 != std::string::npos) s = s.substr(k2 + 1);
  return s;
}

std::string code_function(const void* pc) {
  std::string where;
  return addr2line(pc, "-f -C -i", &where);
}

}  // namespace attnsweep::emu

// Under a sanitizer the compiler declares these entry points itself (and nothing calls
// them: the sanitizer builds have no sharedcheck).
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
using attnsweep::emu::check_access;

extern "C" {

// One load or store of 1, 2, 4, 8 or 16 bytes, aligned or not.
#define ATTNSWEEP_TSAN_ACCESS(n)                            \
  void __tsan_read##n(void* p) {                            \
    check_access(p, n, false, __builtin_return_address(0)); \
  }                                                         \
  void __tsan_write##n(void* p) {                           \
    check_access(p, n, true, __builtin_return_address(0));  \
  }                                                         \
  void __tsan_unaligned_read##n(void* p) {                  \
    check_access(p, n, false, __builtin_return_address(0)); \
  }                                                         \
  void __tsan_unaligned_write##n(void* p) {                 \
    check_access(p, n, true, __builtin_return_address(0));  \
  }
ATTNSWEEP_TSAN_ACCESS(1)
ATTNSWEEP_TSAN_ACCESS(2)
ATTNSWEEP_TSAN_ACCESS(4)
ATTNSWEEP_TSAN_ACCESS(8)
ATTNSWEEP_TSAN_ACCESS(16)
#undef ATTNSWEEP_TSAN_ACCESS

// An aggregate's copy or a memset/memcpy the compiler inlined.
void __tsan_read_range(void* p, unsigned long bytes) {
  check_access(p, bytes, false, __builtin_return_address(0));
}
void __tsan_write_range(void* p, unsigned long bytes) {
  check_access(p, bytes, true, __builtin_return_address(0));
}

// Host code of the same sources (a function-local std::atomic<bool>): a plain atomic load.
uint8_t __tsan_atomic8_load(const volatile uint8_t* a, int) {
  return __atomic_load_n(a, __ATOMIC_SEQ_CST);
}

// Virtual-table pointers (the tests' own classes): never in shared memory.
void __tsan_vptr_update(void**, void*) {}
void __tsan_vptr_read(void**) {}

void __tsan_init() {
  attnsweep::emu::g_instrumented = true;
}

}  // extern "C"
#endif
