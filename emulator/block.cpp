// A thread block of the emulated device: its threads are fibers (Boost.Context's
// fcontext) on the host thread that runs the grid, one block at a time.
// About 1070 lines: the block's schedule, its barriers and collectives, and the checks
// that watch them (synccheck, racecheck, sharedcheck, hostcheck) share the per-thread state; one file keeps that
// state private.
//
// One warp runs at a time, as far as it can: its threads start in lane order on a fiber
// that runs thread after thread until one waits at a collective (only then does the next
// thread get a fiber of its own, so a kernel without collectives costs a function call a
// thread); when its 32 lanes are at the same collective, the collective is computed (ISA
// lane maps) and the warp goes on, until every lane waits at a block barrier or has
// exited; then the next warp runs. When no warp can run, the barrier is released if every
// live thread is at the same __syncthreads. Even blocks run their warps in ascending
// order, odd blocks in descending order: a warp runs ahead of the others as far as the
// barriers let it, so a missing __syncthreads lets it read what the others have not yet
// written, or overwrite what they have not yet read (a wrong result or poison), in both
// directions between warps.
// Anything else is an error naming the kernel and the lines: threads at different
// barriers, a thread that exited while others wait, a lane missing at a collective.
//
// Racecheck of the tensor-core kernels' shared-memory traffic: every cp.async and
// ldmatrix goes through the emulator, which keeps, for each 16-byte chunk of shared
// memory, the last cp.async that wrote it (thread, line, in flight or landed, in which
// barrier interval) and the warps that read it by ldmatrix in the current interval. A read
// of a chunk in flight, a read of a chunk another warp wrote in the same interval, and a
// cp.async over a chunk another warp read or wrote in the same interval are races,
// reported with both lines (compute-sanitizer's racecheck reports the same hazards).
//
// Racecheck and initcheck of every other shared-memory access (sharedcheck): the CUDA
// sources are compiled with GCC's ThreadSanitizer instrumentation, whose calls
// (sharedcheck.cpp) bring each load and store inside the running block's shared memory
// here. Each byte keeps its last write and a read not yet ordered before the present
// (thread, barrier interval, the warp's collectives so far, the line): a read of a byte
// no thread of the block wrote, a read of another thread's write and a write over another
// thread's read or write are errors unless a __syncthreads (or, within a warp, a warp
// collective) lies between them, whatever the values and whatever the order the threads
// ran in.
#include "emulator/emu.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <link.h>
#include <sys/mman.h>
#if !defined(__x86_64__)
#include <boost/context/detail/fcontext.hpp>
#endif

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <unordered_map>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define ATTNSWEEP_EMU_ASAN 1
#endif
#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#define ATTNSWEEP_EMU_TSAN 1
#endif

namespace attnsweep::emu {

thread_local Lane* t_lane __attribute__((tls_model("initial-exec"))) = nullptr;

namespace {

// ---- the context switch ---------------------------------------------------------------
// On x86-64 our own, Boost.Context's fcontext elsewhere (the same interface). Boost's saves
// and restores the x87 and SSE control words at every switch (fnstcw/fldcw/stmxcsr/
// ldmxcsr, which serialise the core): a quarter of the emulated suite's time went there.
// The emulated kernels and the emulator never change the floating-point environment
// (nothing here calls fesetround), so ours keeps only what the SysV ABI has the callee
// keep: rbx, rbp, r12-r15 and the stack pointer.
#if defined(__x86_64__)
namespace fc {
using fcontext_t = void*;
struct transfer_t {
  fcontext_t fctx;
  void* data;
};
extern "C" transfer_t attnsweep_emu_jump(fcontext_t to, void* data);
extern "C" void attnsweep_emu_trampoline();

// A switched-out context is its stack pointer, below six saved registers and the address
// to go on at: [rsp] r12, r13, r14, r15, rbx, rbp, [rsp+48] where to go on.
asm(R"(
  .text
  .p2align 4
  .globl attnsweep_emu_jump
  .hidden attnsweep_emu_jump
  .type attnsweep_emu_jump,@function
attnsweep_emu_jump:
  leaq -0x30(%rsp), %rsp
  movq %r12, 0x00(%rsp)
  movq %r13, 0x08(%rsp)
  movq %r14, 0x10(%rsp)
  movq %r15, 0x18(%rsp)
  movq %rbx, 0x20(%rsp)
  movq %rbp, 0x28(%rsp)
  movq %rsp, %rax
  movq %rdi, %rsp
  movq 0x00(%rsp), %r12
  movq 0x08(%rsp), %r13
  movq 0x10(%rsp), %r14
  movq 0x18(%rsp), %r15
  movq 0x20(%rsp), %rbx
  movq 0x28(%rsp), %rbp
  movq 0x30(%rsp), %r8
  leaq 0x38(%rsp), %rsp
  movq %rsi, %rdx
  movq %rax, %rdi
  jmp *%r8
  .size attnsweep_emu_jump,.-attnsweep_emu_jump

  .p2align 4
  .globl attnsweep_emu_trampoline
  .hidden attnsweep_emu_trampoline
  .type attnsweep_emu_trampoline,@function
attnsweep_emu_trampoline:
  pushq %rbp
  jmpq *%rbx
  .size attnsweep_emu_trampoline,.-attnsweep_emu_trampoline
)");

inline transfer_t jump_fcontext(fcontext_t to, void* data) {
  return attnsweep_emu_jump(to, data);
}

// A fresh context on [.., top): its first jump lands in the trampoline with rbx = fn and
// the transfer (the jumper's context, the data) in rdi/rsi, as fn's argument; the
// trampoline pushes rbp (0: fn never returns) as fn's return address, which leaves the
// stack pointer 8 below a multiple of 16 at fn's entry, as after a call (the jump leaves it
// at sp + 56, the push at sp + 48 = top - 24).
inline fcontext_t make_fcontext(void* top, size_t, void (*fn)(transfer_t)) {
  auto* sp = reinterpret_cast<uintptr_t*>((reinterpret_cast<uintptr_t>(top) & ~uintptr_t{15}) - 72);
  std::memset(sp, 0, 72);
  sp[4] = reinterpret_cast<uintptr_t>(fn);                         // rbx
  sp[6] = reinterpret_cast<uintptr_t>(&attnsweep_emu_trampoline);  // where to go on
  return sp;
}
}  // namespace fc
#else
namespace fc = boost::context::detail;
#endif

// What ends a block early: thrown on the scheduler's stack, never across a fiber.
struct BlockError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A source path by its last two components (cuda/attention_mma.cuh).
std::string short_path(const char* file) {
  std::string f = file;
  if (auto k = f.rfind('/'); k != std::string::npos && k > 0) {
    const auto k2 = f.rfind('/', k - 1);
    if (k2 != std::string::npos) f = f.substr(k2 + 1);
  }
  return f;
}

std::string where(std::source_location loc) {
  return short_path(loc.file_name()) + ":" + std::to_string(loc.line());
}

size_t stack_bytes() {
  static const size_t bytes = [] {
    size_t kib = 256;
#if defined(ATTNSWEEP_EMU_ASAN) || defined(ATTNSWEEP_EMU_TSAN)
    kib = 1024;
#endif
    if (const char* e = std::getenv("ATTNSWEEP_EMU_STACK_KIB"); e && *e) kib = std::strtoul(e, nullptr, 10);
    return kib * 1024;
  }();
  return bytes;
}

// A fiber's stack, with a guard page below it (a kernel overflowing it faults).
struct Stack {
  char* base = nullptr;  // mapping start (guard page)
  size_t size = 0;       // usable bytes above the guard
  Stack() {
    size = stack_bytes();
    const size_t page = 4096;
    void* m = mmap(nullptr, size + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) throw std::runtime_error("emulated device: cannot map a fiber stack");
    base = static_cast<char*>(m);
    mprotect(base, page, PROT_NONE);
  }
  ~Stack() { munmap(base, size + 4096); }
  char* bottom() const { return base + 4096; }
  // Where the fiber starts, below the mapping's end by a colour: the mappings end on page
  // boundaries, so the hot top frames of every fiber would share the same few sets of
  // the L1 cache (which sets a line takes is its address within the page), and each
  // switch would miss; 64 colours of a cache line spread them over all the sets.
  char* top() const { return base + 4096 + size - colour * 64; }
  size_t colour = next_colour();
  static size_t next_colour() {
    static std::atomic<size_t> n{0};
    return (n++ * 37) % 64;
  }
};

enum class State : uint8_t { unstarted, running, ready, at_barrier, at_warp, done };

struct CpAsyncCopy {
  void* dst;
  const void* src;
  int bytes;
  int group;  // -1: not committed yet
};

// The racecheck's record of one 16-byte chunk of shared memory.
struct ChunkAccess {
  int writer = -1;          // the thread of the last cp.async into it (-1: none)
  bool in_flight = false;   // issued, not landed yet
  int write_interval = -1;  // the barrier interval it landed in (or was issued in)
  std::source_location write_at;
  uint32_t reader_warps = 0;  // warps that read it by ldmatrix in read_interval
  int read_interval = -1;
  std::source_location read_at;
};

// The sharedcheck's record of one access to one byte of shared memory.
struct ByteAccess {
  uint32_t block = 0;       // the block run it belongs to (0: none; see Block::run)
  uint32_t interval = 0;    // the block's barrier interval then
  uint32_t warp_epoch = 0;  // collectives its warp had completed then
  int32_t thread = -1;
  const void* pc = nullptr;  // the instruction (nullptr: the emulator, at `loc`)
  std::source_location loc;
};
struct ByteShadow {
  ByteAccess write, read;
};
struct Fiber;

struct Thread {
  Lane lane;
  State state = State::unstarted;
  std::source_location loc;  // where it waits
  WarpOp op{};
  uint32_t mask = 0, arg = 0;
  const void* in = nullptr;
  void* out = nullptr;
  Fiber* fiber = nullptr;
  std::vector<CpAsyncCopy> copies;
  int groups_committed = 0;
  bool in_body = false;  // its arguments are copied: the hostcheck looks at its accesses
};

struct Fiber {
  std::unique_ptr<Stack> stack;
  fc::fcontext_t ctx = nullptr;
  Thread* thread = nullptr;
  bool finished = false;
#ifdef ATTNSWEEP_EMU_TSAN
  void* tsan = nullptr;
#endif
};

struct Block;
thread_local Block* t_block __attribute__((tls_model("initial-exec"))) = nullptr;

struct Block {
  const LaunchSite* site = nullptr;
  const std::function<void()>* body = nullptr;
  std::vector<Thread> threads;
  int warp = 0;                                       // the warp that runs now
  std::vector<int> next_unstarted;                    // per warp: its first thread not started yet
  int interval = 0;                                   // barriers released so far in this block
  std::unordered_map<uintptr_t, ChunkAccess> chunks;  // racecheck, by 16-byte chunk
  uint32_t run = 0;                                   // this block run's number (sharedcheck)
  std::vector<uint32_t> warp_epoch;                   // per warp: collectives completed
  std::vector<ByteShadow> shadow[3];                  // sharedcheck: a byte of t_shared_spans[k] each
  size_t static_written = 0;                          // sharedcheck: static bytes this block run wrote
  std::array<SharedSpan, 4> reachable;                // hostcheck: the reaches found last (a piece each)
  size_t reachable_next = 0;                          // the one replaced next
  uint3 index{};                                      // blockIdx
  std::vector<std::unique_ptr<Fiber>> fibers;         // every fiber made so far (reused across blocks)
  std::vector<Fiber*> free_fibers;
  Fiber* current = nullptr;
  fc::fcontext_t scheduler = nullptr;
  std::string error;  // set by a fiber before it yields for good
  void* dyn = nullptr;
#ifdef ATTNSWEEP_EMU_ASAN
  void* asan_fake = nullptr;
  const void* main_bottom = nullptr;
  size_t main_size = 0;
#endif
#ifdef ATTNSWEEP_EMU_TSAN
  void* tsan_main = nullptr;
#endif

  std::string kernel() const {
    return kernel_name(*site);
  }
};

// ---- switching ----------------------------------------------------------------------

void fiber_main(fc::transfer_t t);
void land(Block& b, const CpAsyncCopy& c);

// Scheduler -> fiber.
void resume(Block& b, Fiber* f) {
  b.current = f;
  t_lane = f->thread ? &f->thread->lane : nullptr;
#ifdef ATTNSWEEP_EMU_ASAN
  __sanitizer_start_switch_fiber(&b.asan_fake, f->stack->bottom(), f->stack->size);
#endif
#ifdef ATTNSWEEP_EMU_TSAN
  __tsan_switch_to_fiber(f->tsan, 0);
#endif
  fc::transfer_t t = fc::jump_fcontext(f->ctx, &b);
#ifdef ATTNSWEEP_EMU_ASAN
  __sanitizer_finish_switch_fiber(b.asan_fake, nullptr, nullptr);
#endif
  f->ctx = t.fctx;
  b.current = nullptr;
  t_lane = nullptr;
}

// Fiber -> scheduler (the thread waits; `last`: the fiber never runs again).
void yield(Block& b, bool last = false) {
  (void)last;  // only ASan is told that a fiber ends
  Fiber* me = b.current;
#ifdef ATTNSWEEP_EMU_ASAN
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(last ? nullptr : &fake, b.main_bottom, b.main_size);
#endif
#ifdef ATTNSWEEP_EMU_TSAN
  __tsan_switch_to_fiber(b.tsan_main, 0);
#endif
  fc::transfer_t t = fc::jump_fcontext(b.scheduler, nullptr);
  b.scheduler = t.fctx;
#ifdef ATTNSWEEP_EMU_ASAN
  __sanitizer_finish_switch_fiber(fake, &b.main_bottom, &b.main_size);
#endif
  t_lane = me->thread ? &me->thread->lane : nullptr;
}

void fiber_main(fc::transfer_t t) {
  Block& b = *static_cast<Block*>(t.data);
  b.scheduler = t.fctx;
#ifdef ATTNSWEEP_EMU_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &b.main_bottom, &b.main_size);
#endif
  Fiber* me = b.current;
  for (;;) {
    const int end = std::min(static_cast<int>(b.threads.size()), 32 * (b.warp + 1));
    if (b.next_unstarted[b.warp] >= end) break;
    Thread& th = b.threads[b.next_unstarted[b.warp]++];
    th.fiber = me;
    th.state = State::running;
    me->thread = &th;
    t_lane = &th.lane;
    (*b.body)();
    // The thread's copies land at its exit at the latest.
    for (auto& c : th.copies) land(b, c);
    th.copies.clear();
    th.state = State::done;
    th.fiber = nullptr;
    me->thread = nullptr;
  }
  me->finished = true;
  yield(b, true);
  std::abort();  // never resumed
}

Fiber* new_fiber(Block& b) {
  Fiber* f;
  if (!b.free_fibers.empty()) {
    f = b.free_fibers.back();
    b.free_fibers.pop_back();
  } else {
    b.fibers.push_back(std::make_unique<Fiber>());
    f = b.fibers.back().get();
    f->stack = std::make_unique<Stack>();
#ifdef ATTNSWEEP_EMU_TSAN
    f->tsan = __tsan_create_fiber(0);
#endif
  }
  f->finished = false;
  f->thread = nullptr;
#ifdef ATTNSWEEP_EMU_ASAN
  // A reused stack, or one mapped where an abandoned fiber's was, keeps the redzones of
  // frames that never returned.
  __asan_unpoison_memory_region(f->stack->bottom(), f->stack->size);
#endif
  f->ctx = fc::make_fcontext(f->stack->top(), f->stack->size, fiber_main);
  return f;
}

// ---- the warp collectives' arithmetic (PTX ISA lane maps) -------------------------------

float half_to_float(uint16_t bits, bool bf16) {
  if (bf16) return std::bit_cast<float>(uint32_t{bits} << 16);
  __half_raw raw;
  raw.x = bits;
  return __half2float(__half(raw));
}

// Element i (0: low half) of a 32-bit register of two 16-bit values.
uint16_t half_of(uint32_t r, int i) {
  return static_cast<uint16_t>(i ? r >> 16 : r & 0xffffu);
}

// ---- racecheck (cp.async writes, ldmatrix reads) -----------------------------------------

std::string thread_name(int linear) {
  return "thread " + std::to_string(linear) + " (warp " + std::to_string(linear / 32) + ")";
}

ChunkAccess& chunk_of(Block& b, const void* p) {
  return b.chunks[reinterpret_cast<uintptr_t>(p) & ~uintptr_t{15}];
}

// A cp.async by thread `t` into `dst`: "" or the race it makes.
std::string race_on_write(Block& b, const Thread& t, const void* dst, std::source_location loc) {
  ChunkAccess& c = chunk_of(b, dst);
  const int warp = t.lane.linear / 32;
  std::string race;
  if (c.read_interval == b.interval && (c.reader_warps & ~(1u << warp)) != 0) {
    int r = 0;
    while (!((c.reader_warps & ~(1u << warp)) >> r & 1u)) ++r;
    race = "racecheck: cp.async at " + where(loc) + " by " + thread_name(t.lane.linear) +
           " overwrites 16 bytes of shared memory that warp " + std::to_string(r) + " read by ldmatrix at " +
           where(c.read_at) + " with no __syncthreads between (write after read)";
  } else if (c.writer >= 0 && c.writer / 32 != warp && (c.in_flight || c.write_interval == b.interval)) {
    race = "racecheck: cp.async at " + where(loc) + " by " + thread_name(t.lane.linear) +
           " writes 16 bytes of shared memory that " + thread_name(c.writer) + " wrote by cp.async at " +
           where(c.write_at) + " with no __syncthreads between (write after write)";
  }
  c.writer = t.lane.linear;
  c.in_flight = true;
  c.write_interval = b.interval;
  c.write_at = loc;
  return race;
}

// An ldmatrix of warp `warp` reading the 16 bytes at `p`: "" or the race it makes.
std::string race_on_read(Block& b, int warp, const void* p, std::source_location loc) {
  ChunkAccess& c = chunk_of(b, p);
  std::string race;
  if (c.in_flight) {
    race = "racecheck: " + std::string("ldmatrix at ") + where(loc) + " (warp " + std::to_string(warp) +
           ") reads 16 bytes of shared memory that the cp.async of " + thread_name(c.writer) + " at " +
           where(c.write_at) + " has in flight (not waited for" +
           (c.writer / 32 == warp ? ")" : ", or no __syncthreads after its wait)");
  } else if (c.writer >= 0 && c.writer / 32 != warp && c.write_interval == b.interval) {
    race = "racecheck: ldmatrix at " + where(loc) + " (warp " + std::to_string(warp) +
           ") reads 16 bytes of shared memory that " + thread_name(c.writer) + " wrote by cp.async at " +
           where(c.write_at) + " with no __syncthreads between (read after write)";
  }
  if (c.read_interval != b.interval) {
    c.read_interval = b.interval;
    c.reader_warps = 0;
  }
  c.reader_warps |= 1u << (warp & 31);
  c.read_at = loc;
  return race;
}

// ---- sharedcheck (every other load and store of shared memory) --------------------------

std::atomic<uint32_t> g_block_runs{0};

// The shadow of the byte at `a` and of the *n - 1 after it in the same span (n clipped to
// the span's end), or nullptr outside the running block's shared memory.
ByteShadow* shadow_of(Block& b, uintptr_t a, size_t* n) {
  for (int k = 0; k < 3; ++k) {
    const SharedSpan& s = t_shared_spans[k];
    if (a - s.begin < s.size) {
      *n = std::min<size_t>(*n, s.size - (a - s.begin));
      return b.shadow[k].data() + (a - s.begin);
    }
  }
  return nullptr;
}

SharedSpan span(char* begin, char* end) {
  if (!begin || end <= begin) return {};
  return {reinterpret_cast<uintptr_t>(begin), static_cast<uintptr_t>(end - begin)};
}

// Whether the sharedcheck watches this launch of `kernel`: one of its first
// kSharedcheckShapes grid shapes of the process, at the first launch of each.
constexpr size_t kSharedcheckShapes = 4;
bool new_grid_shape(const void* kernel, dim3 grid, dim3 block) {
  static std::mutex m;
  static std::map<const void*, std::vector<std::array<unsigned, 6>>> seen;
  const std::lock_guard<std::mutex> lock(m);
  std::vector<std::array<unsigned, 6>>& shapes = seen[kernel];
  const std::array<unsigned, 6> shape{grid.x, grid.y, grid.z, block.x, block.y, block.z};
  if (shapes.size() >= kSharedcheckShapes || std::find(shapes.begin(), shapes.end(), shape) != shapes.end())
    return false;
  shapes.push_back(shape);
  return true;
}

// Whether `a`, in this block run, happened before what thread `t` does now: a barrier was
// released since, or `a` was in t's warp and the warp completed a collective since.
bool ordered_before_now(const Block& b, const ByteAccess& a, int t) {
  if (a.block != b.run || a.interval != static_cast<uint32_t>(b.interval)) return true;
  const int warp = t / 32;
  return a.thread / 32 == warp && a.warp_epoch != b.warp_epoch[static_cast<size_t>(warp)];
}

ByteAccess access_now(const Block& b, int t, const void* pc, std::source_location loc) {
  return {b.run, static_cast<uint32_t>(b.interval), b.warp_epoch[static_cast<size_t>(t / 32)], t, pc, loc};
}

std::string line_of(const ByteAccess& a) {
  return a.pc ? code_line(a.pc) : "the emulator's cp.async at " + where(a.loc);
}

// ---- hostcheck (the other loads and stores of a watched block) ---------------------------

// The loaded binaries' segments (their code, constants, data: a kernel reads its
// __constant__ and __device__ variables there), read again once when an address is in none.
bool in_loaded_image(uintptr_t a) {
  static std::mutex m;
  static std::vector<SharedSpan> images;
  const std::lock_guard<std::mutex> lock(m);
  const auto find = [&] {
    return std::any_of(images.begin(), images.end(), [a](const SharedSpan& s) { return a - s.begin < s.size; });
  };
  if (find()) return true;
  images.clear();
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* out) {
        for (int i = 0; i < info->dlpi_phnum; ++i)
          if (info->dlpi_phdr[i].p_type == PT_LOAD)
            static_cast<std::vector<SharedSpan>*>(out)->push_back(
                {info->dlpi_addr + info->dlpi_phdr[i].p_vaddr, info->dlpi_phdr[i].p_memsz});
        return 0;
      },
      &images);
  return find();
}

bool in_dynamic(const Block& b, uintptr_t a) {
  return b.dyn && a - reinterpret_cast<uintptr_t>(b.dyn) < t_shared_spans[2].size;
}

// Byte `a`'s write in this block run, counted once if it is static shared memory.
void note_write(Block& b, ByteShadow& s, uintptr_t a, const ByteAccess& now) {
  b.static_written += s.write.block != b.run && !in_dynamic(b, a);
  s.write = now;
}

// A block's shared memory on sm_90: static and dynamic together at most 227 KiB, the static
// at most 48 KiB (nvcc refuses more). The static is counted as the bytes a watched block
// wrote (a read of one never written already fails), so it may be less than the kernel's.
constexpr size_t kMaxSmem = 232448, kMaxStaticSmem = 48 * 1024;
std::string shared_size_check(const Block& b, size_t dynamic_smem) {
  if (b.static_written <= kMaxStaticSmem && b.static_written + dynamic_smem <= kMaxSmem) return "";
  return "sharedcheck: the block wrote " + std::to_string(b.static_written) +
         " bytes of static __shared__ memory, and the launch gave it " + std::to_string(dynamic_smem) +
         " bytes of dynamic shared memory: above sm_90's limits (static at most " + std::to_string(kMaxStaticSmem) +
         ", both together at most " + std::to_string(kMaxSmem) + ")";
}

std::string shared_place(const Block& b, uintptr_t a) {
  const auto dyn = reinterpret_cast<uintptr_t>(b.dyn);
  if (b.dyn && a >= dyn) return "dynamic shared memory at byte " + std::to_string(a - dyn);
  return "static __shared__ memory";
}

// Records thread t's access to the `bytes` bytes at `a`: "" or the hazard it makes.
std::string shared_hazard(Block& b, int t, uintptr_t a, size_t bytes, bool write, const ByteAccess& now) {
  ByteShadow* shadow = shadow_of(b, a, &bytes);
  if (!shadow) return "";
  for (size_t i = 0; i < bytes; ++i) {
    ByteShadow& s = shadow[i];
    const auto who = [&] {  // only for a report: it runs addr2line
      return thread_name(t) + (write ? " writes " : " reads ") + std::to_string(bytes) + " bytes of " +
             shared_place(b, a) + " at " + line_of(now);
    };
    if (!write && s.write.block != b.run) {
      const auto c = b.chunks.find((a + i) & ~uintptr_t{15});
      if (c != b.chunks.end() && c->second.in_flight)
        return "initcheck: " + who() + ", which the cp.async of " + thread_name(c->second.writer) + " at " +
               where(c->second.write_at) + " has in flight (not waited for)";
      return "initcheck: " + who() + ", which no thread of this block has written";
    }
    if (s.write.block == b.run && s.write.thread != t && !ordered_before_now(b, s.write, t))
      return "racecheck: " + who() + ", which " + thread_name(s.write.thread) + " wrote at " + line_of(s.write) +
             " with no __syncthreads between (" + (write ? "write after write)" : "read after write)");
    if (write && s.read.block == b.run && s.read.thread != t && !ordered_before_now(b, s.read, t))
      return "racecheck: " + who() + ", which " + thread_name(s.read.thread) + " read at " + line_of(s.read) +
             " with no __syncthreads between (write after read)";
    if (write) {
      note_write(b, s, a + i, now);
    } else if (s.read.block != b.run || s.read.thread == t || ordered_before_now(b, s.read, t)) {
      s.read = now;  // an unordered read of another thread stays: a later write must see it
    }
  }
  return "";
}

void land(Block& b, const CpAsyncCopy& c) {
  std::memcpy(c.dst, c.src, static_cast<size_t>(c.bytes));
  std::memset(static_cast<char*>(c.dst) + c.bytes, 0, 16 - static_cast<size_t>(c.bytes));
  ChunkAccess& a = chunk_of(b, c.dst);
  a.in_flight = false;
  a.write_interval = b.interval;
  if (sharedcheck_on()) {  // the plain loads after it see the bytes written by its thread
    const int t = a.writer;
    size_t n = 16;
    if (ByteShadow* shadow = shadow_of(b, reinterpret_cast<uintptr_t>(c.dst), &n))
      for (size_t i = 0; i < n; ++i)
        note_write(b, shadow[i], reinterpret_cast<uintptr_t>(c.dst) + i, access_now(b, t, nullptr, a.write_at));
  }
}

void check_ldmatrix_address(Block& b, const Thread& t, const void* p) {
  if (reinterpret_cast<uintptr_t>(p) % 16 != 0) {
    std::ostringstream s;
    s << "ldmatrix: lane " << t.lane.linear % 32 << " gave the row address " << p << ", not 16-byte aligned";
    b.error = s.str();
  }
}

void compute_warp(Block& b, Thread* lanes[32]) {
  const WarpOp op = lanes[0]->op;
  switch (op) {
    case WarpOp::shfl_xor: {
      // Within groups of `width` lanes; a source in a later group gives the lane its own value.
      const uint32_t lane_mask = lanes[0]->arg & 31u, bytes = (lanes[0]->arg >> 8) & 0xffu, width = lanes[0]->arg >> 16;
      for (uint32_t l = 0; l < 32; ++l) {
        uint32_t src = l ^ lane_mask;
        if (src >= (l & ~(width - 1)) + width) src = l;
        std::memcpy(lanes[l]->out, lanes[src]->in, bytes);
      }
      break;
    }
    case WarpOp::ldmatrix_x4:
    case WarpOp::ldmatrix_x4_trans: {
      // Threads 8i..8i+7 give the row addresses of matrix i; register r_i of thread t:
      // matrix i, row t/4, columns 2(t%4) and 2(t%4)+1 (.trans: [2(t%4)+j][t/4]).
      const uint16_t* rows[32];
      for (int l = 0; l < 32; ++l) {
        rows[l] = *static_cast<const uint16_t* const*>(lanes[l]->in);
        check_ldmatrix_address(b, *lanes[l], rows[l]);
      }
      if (!b.error.empty()) return;
      const int warp = lanes[0]->lane.linear / 32;
      for (int l = 0; l < 32; ++l) {
        if (std::string race = race_on_read(b, warp, rows[l], lanes[l]->loc); !race.empty()) throw BlockError(race);
      }
      for (int t = 0; t < 32; ++t) {
        uint32_t* r = static_cast<uint32_t*>(lanes[t]->out);
        for (int i = 0; i < 4; ++i) {
          uint16_t e[2];
          for (int j = 0; j < 2; ++j) {
            const int row = op == WarpOp::ldmatrix_x4 ? t / 4 : 2 * (t % 4) + j;
            const int col = op == WarpOp::ldmatrix_x4 ? 2 * (t % 4) + j : t / 4;
            e[j] = rows[8 * i + row][col];
          }
          r[i] = uint32_t{e[0]} | uint32_t{e[1]} << 16;
        }
      }
      break;
    }
    case WarpOp::mma_bf16:
    case WarpOp::mma_f16: {
      // A (16x16, row): a_i at row groupID (+8 for i in {2,3,6,7}), column 2 tig + (i&1)
      // (+8 for i >= 4); B (16x8, col): b_i at row 2 tig + (i&1) (+8 for i >= 2), column
      // groupID; C/D: c_i at row groupID (+8 for i >= 2), column 2 tig + (i&1).
      const bool bf16 = op == WarpOp::mma_bf16;
      // B is kept transposed (Bt[col][k]) so each output is a dot product of two rows.
      float A[16][16], Bt[8][16], C[16][8];
      for (int l = 0; l < 32; ++l) {
        const auto* in = static_cast<const uint32_t*>(lanes[l]->in);  // a[4], b[2], c[4] (floats)
        const int g = l >> 2, tig = l & 3;
        for (int i = 0; i < 8; ++i) {
          const int row = g + ((i & 2) ? 8 : 0), col = 2 * tig + (i & 1) + (i >= 4 ? 8 : 0);
          A[row][col] = half_to_float(half_of(in[i / 2], i & 1), bf16);
        }
        for (int i = 0; i < 4; ++i) {
          const int row = 2 * tig + (i & 1) + (i >= 2 ? 8 : 0);
          Bt[g][row] = half_to_float(half_of(in[4 + i / 2], i & 1), bf16);
        }
        for (int i = 0; i < 4; ++i) std::memcpy(&C[g + (i >= 2 ? 8 : 0)][2 * tig + (i & 1)], &in[6 + i], 4);
      }
      for (int l = 0; l < 32; ++l) {
        const int g = l >> 2, tig = l & 3;
        float* out = static_cast<float*>(lanes[l]->out);
        for (int i = 0; i < 4; ++i) {
          const int row = g + (i >= 2 ? 8 : 0), col = 2 * tig + (i & 1);
          out[i] = mma_dot16(A[row], Bt[col], C[row][col]);  // numerics.cpp: its two modes
        }
      }
      break;
    }
  }
}

const char* op_name(WarpOp op) {
  switch (op) {
    case WarpOp::shfl_xor: return "__shfl_xor_sync";
    case WarpOp::ldmatrix_x4: return "ldmatrix.x4";
    case WarpOp::ldmatrix_x4_trans: return "ldmatrix.x4.trans";
    case WarpOp::mma_bf16: return "mma.m16n8k16.bf16";
    case WarpOp::mma_f16: return "mma.m16n8k16.f16";
  }
  return "?";
}

std::string describe(const Thread& t) {
  std::ostringstream s;
  s << "thread " << t.lane.linear << " (warp " << t.lane.linear / 32 << ", lane " << t.lane.linear % 32 << ")";
  switch (t.state) {
    case State::done: s << " has exited"; break;
    case State::at_barrier: s << " waits at __syncthreads at " << where(t.loc); break;
    case State::at_warp: s << " waits at " << op_name(t.op) << " at " << where(t.loc); break;
    default: s << " is running";
  }
  return s.str();
}

bool same_place(const std::source_location& a, const std::source_location& b) {
  return a.line() == b.line() && (a.file_name() == b.file_name() || std::strcmp(a.file_name(), b.file_name()) == 0);
}

// Warp w's lanes have run as far as they can: computes its collective when all 32 lanes
// wait at the same one (true: they can run again), else false (every lane is at a barrier
// or has exited); a warp split between a collective and anything else is an error.
bool resolve_warp(Block& b, int w) {
  const int n = static_cast<int>(b.threads.size());
  const int lo = 32 * w, hi = std::min(n, lo + 32);
  Thread* first = nullptr;
  for (int i = lo; i < hi; ++i)
    if (b.threads[i].state == State::at_warp) {
      first = &b.threads[i];
      break;
    }
  if (!first) return false;
  if (hi - lo != 32)
    throw BlockError("warp " + std::to_string(w) + " has " + std::to_string(hi - lo) + " threads, and " +
                     describe(*first) + " with the full mask");
  Thread* lanes[32];
  for (int i = lo; i < hi; ++i) {
    Thread& t = b.threads[i];
    const bool same = t.state == State::at_warp && t.op == first->op && same_place(t.loc, first->loc);
    if (!same) throw BlockError("a lane is missing at a warp collective: " + describe(*first) + ", but " + describe(t));
    if (t.mask != 0xffffffffu)
      throw BlockError(describe(t) + " with the mask " + std::to_string(t.mask) + ": only the full mask is emulated");
    lanes[i - lo] = &t;
  }
  compute_warp(b, lanes);
  if (!b.error.empty()) throw BlockError(b.error + " at " + where(first->loc));
  ++b.warp_epoch[static_cast<size_t>(w)];  // orders its lanes' shared-memory accesses
  for (Thread* t : lanes) t->state = State::ready;
  return true;
}

// Runs warp w until each of its lanes waits at a barrier or has exited.
void run_warp(Block& b, int w) {
  const int n = static_cast<int>(b.threads.size());
  const int lo = 32 * w, hi = std::min(n, lo + 32);
  b.warp = w;
  do {
    for (int i = lo; i < hi; ++i) {
      Thread& t = b.threads[i];
      if (t.state != State::ready) continue;
      t.state = State::running;
      resume(b, t.fiber);
      if (!b.error.empty()) throw BlockError(b.error);
    }
    while (b.next_unstarted[w] < hi) {
      Fiber* f = new_fiber(b);
      resume(b, f);
      if (!b.error.empty()) throw BlockError(b.error);
      if (f->finished) b.free_fibers.push_back(f);
    }
  } while (resolve_warp(b, w));
}

// Every warp waits at a barrier or has exited: releases the barrier (false: the block is
// finished), or throws what is wrong.
bool release_barrier(Block& b) {
  Thread* at_bar = nullptr;
  const Thread* exited = nullptr;
  for (Thread& t : b.threads) {
    if (t.state == State::done) {
      if (!exited) exited = &t;
      continue;
    }
    if (t.state != State::at_barrier)
      throw BlockError("deadlock: " + describe(t));  // cannot happen: a running thread was not run
    if (!at_bar) {
      at_bar = &t;
    } else if (!same_place(t.loc, at_bar->loc)) {
      throw BlockError("threads at different barriers: " + describe(*at_bar) + ", " + describe(t));
    }
  }
  if (!at_bar) return false;
  if (exited)
    throw BlockError("a thread exited while others wait at a barrier: " + describe(*exited) + ", " + describe(*at_bar));
  for (Thread& t : b.threads) t.state = State::ready;
  ++b.interval;
  return true;
}

void run_block(Block& b) {
  const int n = static_cast<int>(b.threads.size());
  const int warps = (n + 31) / 32;
  b.next_unstarted.resize(static_cast<size_t>(warps));
  for (int w = 0; w < warps; ++w) b.next_unstarted[static_cast<size_t>(w)] = 32 * w;
  b.interval = 0;
  b.chunks.clear();
  b.run = g_block_runs.fetch_add(1) + 1;  // 0 means none (a wrap after 2^32 runs: harmless)
  b.static_written = 0;
  b.reachable = {};
  b.reachable_next = 0;
  b.warp_epoch.assign(static_cast<size_t>(warps), 0);
  const dim3 g = b.threads.front().lane.grid_dim;
  const bool descending = (b.index.x + g.x * (b.index.y + g.y * b.index.z)) % 2 == 1;
  do {
    for (int k = 0; k < warps; ++k) run_warp(b, descending ? warps - 1 - k : k);
  } while (release_barrier(b));
  // Fibers whose thread ended after waiting finished too: all of them are free again.
  b.free_fibers.clear();
  for (auto& f : b.fibers) b.free_fibers.push_back(f.get());
}

Block& block() {
  if (!t_block || !t_block->current || !t_lane) {
    std::fprintf(stderr, "attnsweep emulator: a device function was called outside a kernel\n");
    std::abort();
  }
  return *t_block;
}

Thread& me(Block& b) {
  return *b.current->thread;
}

}  // namespace

void syncthreads(std::source_location loc) {
  Block& b = block();
  Thread& t = me(b);
  t.state = State::at_barrier;
  t.loc = loc;
  yield(b);  // until the scheduler wakes it
}

void warp_collective(WarpOp op, uint32_t mask, uint32_t arg, const void* in, void* out, std::source_location loc) {
  Block& b = block();
  Thread& t = me(b);
  t.state = State::at_warp;
  t.op = op;
  t.mask = mask;
  t.arg = arg;
  t.in = in;
  t.out = out;
  t.loc = loc;
  yield(b);  // until the scheduler wakes it
}

void shared_access(const void* p, size_t bytes, bool write, const void* pc) {
  Block* b = t_block;
  if (!b || !b->current || !b->current->thread || !sharedcheck_on()) return;
  const int t = b->current->thread->lane.linear;
  const std::string hazard =
      shared_hazard(*b, t, reinterpret_cast<uintptr_t>(p), bytes, write, access_now(*b, t, pc, {}));
  if (!hazard.empty()) kernel_fault(hazard);
}

void kernel_body_starts() {
  if (Block* b = t_block; b && b->current && b->current->thread) b->current->thread->in_body = true;
}

// Set while host_access works: the C++ library's templates it runs (strings, vectors) may be
// the instrumented copies of the kernels' binary, which call it again.
thread_local bool t_hostcheck_busy __attribute__((tls_model("initial-exec"))) = false;

// Instructions that are not the kernels' own: the C++ library's templates and the
// emulator's inline functions, instrumented where a CUDA source instantiated them and
// run by the emulator for a kernel thread (its errors, its bookkeeping). Named by
// addr2line the first time one reaches host memory, then remembered.
bool not_kernel_code(const void* pc) {
  static std::mutex m;
  static std::unordered_map<const void*, bool> known;
  const std::lock_guard<std::mutex> lock(m);
  auto it = known.find(pc);
  if (it == known.end()) {
    // Its qualified name, after the return type addr2line prints for a template.
    std::string f = code_function(pc);
    f = " " + f.substr(0, std::min(f.find('<'), f.find('(')));
    bool library = false;
    for (const char* space : {" std::", " __gnu_cxx::", " attnsweep::emu::", " operator new", " operator delete"})
      library = library || f.find(space) != std::string::npos;
    it = known.emplace(pc, library).first;
  }
  return it->second;
}

void host_access(const void* p, size_t bytes, bool write, const void* pc) {
  Block* b = t_block;
  if (t_hostcheck_busy || !b || !b->current || !b->current->thread || !b->current->thread->in_body) return;
  const auto a = reinterpret_cast<uintptr_t>(p);
  const Stack& stack = *b->current->stack;  // the thread's locals
  if (a - reinterpret_cast<uintptr_t>(stack.bottom()) < stack.size) return;
  const auto lanes = reinterpret_cast<uintptr_t>(b->threads.data());  // threadIdx and co.
  if (a - lanes < b->threads.size() * sizeof(Thread)) return;
  if (a - reinterpret_cast<uintptr_t>(&t_lane) < sizeof t_lane) return;
  // The reaches found last (a device allocation, or the piece of one between two carved
  // guards: kernels often read two or three pieces in turn).
  for (const SharedSpan& r : b->reachable)
    if (a - r.begin < r.size && a - r.begin + bytes <= r.size) return;
  t_hostcheck_busy = true;
  std::string what;
  if (!in_loaded_image(a)) {  // not a __device__ variable, a literal
    SharedSpan found;
    what = device_reachable(p, bytes, &found);
    if (what.empty()) b->reachable[b->reachable_next++ % b->reachable.size()] = found;
  }
  if (!what.empty() && !not_kernel_code(pc)) {
    const int t = b->current->thread->lane.linear;
    kernel_fault("hostcheck: " + thread_name(t) + (write ? " writes " : " reads ") + std::to_string(bytes) +
                 " bytes at " + code_line(pc) + " (" + code_function(pc) + ") at " + what);  // never returns
  }
  t_hostcheck_busy = false;
}

void* dynamic_shared() {
  return block().dyn;
}

void device_error(const std::string& what, std::source_location loc) {
  kernel_fault(what + " at " + where(loc));
}

void kernel_fault(const std::string& what) {
  Block& b = block();
  b.error = what;
  me(b).state = State::done;
  yield(b, false);
  std::abort();  // the scheduler never resumes a fiber after an error
}

std::string running_thread() {
  if (!t_block || !t_block->current || !t_block->current->thread || !t_lane) return "";
  return thread_name(t_lane->linear);
}

void cp_async16(void* dst, const void* src, int src_bytes, std::source_location loc) {
  Block& b = block();
  if (reinterpret_cast<uintptr_t>(dst) % 16 || reinterpret_cast<uintptr_t>(src) % 16)
    device_error("cp.async.cg 16: an address not 16-byte aligned", loc);
  if (src_bytes < 0 || src_bytes > 16) device_error("cp.async.cg 16: src-size outside 0..16", loc);
  if (std::string race = race_on_write(b, me(b), dst, loc); !race.empty()) kernel_fault(race);
  std::memset(dst, 0xff, 16);  // poisoned until its wait_group
  me(b).copies.push_back({dst, src, src_bytes, -1});
}

void cp_async_commit() {
  Thread& t = me(block());
  for (auto& c : t.copies)
    if (c.group < 0) c.group = t.groups_committed;
  ++t.groups_committed;
}

void cp_async_wait(int pending_allowed, std::source_location) {
  Block& b = block();
  Thread& t = me(b);
  // Every committed group but the `pending_allowed` most recent lands now.
  const int land_below = t.groups_committed - pending_allowed;
  std::vector<CpAsyncCopy> keep;
  for (auto& c : t.copies) {
    if (c.group >= 0 && c.group < land_below) {
      land(b, c);
    } else {
      keep.push_back(c);
    }
  }
  t.copies.swap(keep);
}

std::string run_grid(const LaunchSite& site, dim3 grid, dim3 block_dim, size_t dynamic_smem,
                     const std::function<void()>& thread) {
  static thread_local std::unique_ptr<Block> pool;
  if (!pool) pool = std::make_unique<Block>();
  Block& b = *pool;
  b.site = &site;
  b.body = &thread;
  b.error.clear();
  const int n = static_cast<int>(block_dim.x * block_dim.y * block_dim.z);
  b.threads.assign(static_cast<size_t>(n), Thread{});
  for (int i = 0; i < n; ++i) {
    Lane& l = b.threads[static_cast<size_t>(i)].lane;
    l.linear = i;
    l.thread_idx = uint3{static_cast<unsigned>(i) % block_dim.x, static_cast<unsigned>(i) / block_dim.x % block_dim.y,
                         static_cast<unsigned>(i) / (block_dim.x * block_dim.y)};
    l.block_dim = block_dim;
    l.grid_dim = grid;
  }
  Block* saved = t_block;
  t_block = &b;
#ifdef ATTNSWEEP_EMU_TSAN
  b.tsan_main = __tsan_get_current_fiber();
#endif
  // Static shared memory: poisoned once a launch (0xff bytes: NaN in every float type).
  if (site.shared_begin && site.shared_end > site.shared_begin)
    std::memset(site.shared_begin, 0xff, static_cast<size_t>(site.shared_end - site.shared_begin));
  // Dynamic shared memory: one guarded buffer for the launch, poisoned for each block.
  b.dyn = dynamic_smem ? guarded_alloc(dynamic_smem, "the launch's dynamic shared memory") : nullptr;
  const bool check = sharedcheck_on();
  const SharedSpan spans[3] = {span(site.shared_begin, site.shared_end), span(site.bss_begin, site.bss_end),
                               span(static_cast<char*>(b.dyn), static_cast<char*>(b.dyn) + dynamic_smem)};
  if (check)
    for (int k = 0; k < 3; ++k)  // grown, never shrunk: a record of an earlier block run is no record
      if (b.shadow[k].size() < spans[k].size) b.shadow[k].resize(spans[k].size);
  // The blocks it watches (all with ATTNSWEEP_EMU_SHAREDCHECK=all): in the first grid
  // shapes of each kernel, the first two blocks (one runs its warps in ascending order, one
  // in descending), the last of the first row (a partial tile in x) and the last.
  const bool every = sharedcheck_every_block();
  const bool this_grid = check && (every || new_grid_shape(site.func, grid, block_dim));
  const uint64_t blocks = uint64_t{grid.x} * grid.y * grid.z;
  auto watched = [&](uint64_t linear) {
    return this_grid && (every || linear < 2 || linear + 1 == grid.x || linear + 1 == blocks);
  };
  std::string result;
  for (unsigned bz = 0; bz < grid.z && result.empty(); ++bz)
    for (unsigned by = 0; by < grid.y && result.empty(); ++by)
      for (unsigned bx = 0; bx < grid.x && result.empty(); ++bx) {
        for (Thread& t : b.threads) {
          t.state = State::unstarted;
          t.fiber = nullptr;
          t.copies.clear();
          t.groups_committed = 0;
          t.in_body = false;
          t.lane.block_idx = uint3{bx, by, bz};
        }
        b.index = uint3{bx, by, bz};
        if (b.dyn) std::memset(b.dyn, 0xff, dynamic_smem);
        const bool watch = watched(bx + uint64_t{grid.x} * (by + uint64_t{grid.y} * bz));
        for (int k = 0; k < 3; ++k) t_shared_spans[k] = watch ? spans[k] : SharedSpan{};
        t_watched = watch;
        t_hostcheck_busy = false;
        try {
          run_block(b);
          if (watch)
            if (std::string e = shared_size_check(b, dynamic_smem); !e.empty()) throw BlockError(e);
        } catch (const BlockError& e) {
          std::ostringstream s;
          s << "kernel " << b.kernel() << ", block (" << bx << "," << by << "," << bz << "): " << e.what();
          result = s.str();
          // The fibers of the abandoned threads are made anew.
          b.fibers.clear();
          b.free_fibers.clear();
        }
      }
  for (SharedSpan& s : t_shared_spans) s = {};
  t_watched = false;
  if (std::string before = guarded_free(b.dyn); !before.empty() && result.empty())
    result = "kernel " + b.kernel() + ": " + before;
  if (result.empty())  // the bytes just before every allocation, still as they were
    if (std::string before = writes_before_allocations(); !before.empty())
      result = "kernel " + b.kernel() + ": " + before;
  b.dyn = nullptr;
  t_block = saved;
  return result;
}

std::string kernel_name(const LaunchSite& site) {
  return std::string(site.name) + " (launched at " + short_path(site.file) + ":" + std::to_string(site.line) + ")";
}

}  // namespace attnsweep::emu
