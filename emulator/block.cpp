// A thread block of the emulated device: its threads are fibers (Boost.Context's
// fcontext) on the host thread that runs the grid, one block at a time.
//
// Threads start in order of their linear index on a fiber that runs thread after thread
// until one waits at a collective; only then does the next thread get a fiber of its own,
// so a kernel without collectives costs a function call a thread. A waiting thread
// stays suspended on its fiber until every thread that can run has run; then the warp
// collectives whose 32 lanes have all arrived are computed (ISA lane maps), or, when none
// is, the block barrier is released if every live thread is at the same __syncthreads.
// Anything else is an error naming the kernel and the lines: threads at different
// barriers, a thread that exited while others wait, a lane missing at a collective.
#include "emulator/emu.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <sys/mman.h>
#include <boost/context/detail/fcontext.hpp>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <sstream>
#include <stdexcept>
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

namespace fc = boost::context::detail;

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
  char* top() const { return base + 4096 + size; }
};

enum class State : uint8_t { unstarted, running, ready, at_barrier, at_warp, done };

struct CpAsyncCopy {
  void* dst;
  const void* src;
  int bytes;
  int group;  // -1: not committed yet
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
thread_local Block* t_block = nullptr;

struct Block {
  const LaunchSite* site = nullptr;
  const std::function<void()>* body = nullptr;
  std::vector<Thread> threads;
  int next_unstarted = 0;
  std::vector<std::unique_ptr<Fiber>> fibers;  // every fiber made so far (reused across blocks)
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
    return std::string(site->name) + " (launched at " + short_path(site->file) + ":" + std::to_string(site->line) + ")";
  }
};

// ---- switching ----------------------------------------------------------------------

void fiber_main(fc::transfer_t t);

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
    if (b.next_unstarted >= static_cast<int>(b.threads.size())) break;
    Thread& th = b.threads[b.next_unstarted++];
    th.fiber = me;
    th.state = State::running;
    me->thread = &th;
    t_lane = &th.lane;
    (*b.body)();
    // The thread's copies land at its exit at the latest.
    for (auto& c : th.copies) {
      std::memcpy(c.dst, c.src, static_cast<size_t>(c.bytes));
      std::memset(static_cast<char*>(c.dst) + c.bytes, 0, 16 - static_cast<size_t>(c.bytes));
    }
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
      // The product of two 16-bit values is exact in float (at most 22 significant bits);
      // the 16 products and C are summed in float64 (four partial sums, an order the
      // compiler can vectorise) and rounded once to float32. The hardware's order inside
      // the mma is unspecified: the tests compare with tolerances.
      for (int l = 0; l < 32; ++l) {
        const int g = l >> 2, tig = l & 3;
        float* out = static_cast<float*>(lanes[l]->out);
        for (int i = 0; i < 4; ++i) {
          const int row = g + (i >= 2 ? 8 : 0), col = 2 * tig + (i & 1);
          double part[4] = {0, 0, 0, 0};
          for (int k = 0; k < 16; k += 4)
            for (int j = 0; j < 4; ++j) part[j] += static_cast<double>(A[row][k + j] * Bt[col][k + j]);
          out[i] = static_cast<float>(static_cast<double>(C[row][col]) + ((part[0] + part[1]) + (part[2] + part[3])));
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

// Every thread that can run has run: complete the warps whose lanes all arrived, else
// release the barrier. False when the block is finished.
bool resolve(Block& b) {
  const int n = static_cast<int>(b.threads.size());
  bool any_live = false, progressed = false;
  for (int w = 0; w * 32 < n; ++w) {
    const int lo = 32 * w, hi = std::min(n, lo + 32);
    Thread* first = nullptr;
    for (int i = lo; i < hi; ++i)
      if (b.threads[i].state == State::at_warp) {
        first = &b.threads[i];
        break;
      }
    if (!first) continue;
    if (hi - lo != 32)
      throw BlockError("warp " + std::to_string(w) + " has " + std::to_string(hi - lo) + " threads, and " +
                       describe(*first) + " with the full mask");
    Thread* lanes[32];
    for (int i = lo; i < hi; ++i) {
      Thread& t = b.threads[i];
      const bool same = t.state == State::at_warp && t.op == first->op && same_place(t.loc, first->loc);
      if (!same)
        throw BlockError("a lane is missing at a warp collective: " + describe(*first) + ", but " + describe(t));
      if (t.mask != 0xffffffffu)
        throw BlockError(describe(t) + " with the mask " + std::to_string(t.mask) + ": only the full mask is emulated");
      lanes[i - lo] = &t;
    }
    compute_warp(b, lanes);
    if (!b.error.empty()) throw BlockError(b.error + " at " + where(first->loc));
    for (Thread* t : lanes) t->state = State::ready;
    progressed = true;
  }
  if (progressed) return true;
  Thread* at_bar = nullptr;
  const Thread* exited = nullptr;
  for (Thread& t : b.threads) {
    if (t.state == State::done) {
      if (!exited) exited = &t;
      continue;
    }
    any_live = true;
    if (t.state != State::at_barrier)
      throw BlockError("deadlock: " + describe(t));  // cannot happen: a running thread was not run
    if (!at_bar) {
      at_bar = &t;
    } else if (!same_place(t.loc, at_bar->loc)) {
      throw BlockError("threads at different barriers: " + describe(*at_bar) + ", " + describe(t));
    }
  }
  if (!any_live) return false;
  if (exited)
    throw BlockError("a thread exited while others wait at a barrier: " + describe(*exited) + ", " + describe(*at_bar));
  for (Thread& t : b.threads) t.state = State::ready;
  return true;
}

void run_block(Block& b) {
  const int n = static_cast<int>(b.threads.size());
  b.next_unstarted = 0;
  for (;;) {
    // Run every thread that can: the woken ones in order, then the ones not started yet.
    bool ran = true;
    while (ran) {
      ran = false;
      for (int i = 0; i < n; ++i) {
        Thread& t = b.threads[i];
        if (t.state != State::ready) continue;
        t.state = State::running;
        resume(b, t.fiber);
        ran = true;
        if (!b.error.empty()) throw BlockError(b.error);
      }
      while (b.next_unstarted < n) {
        Fiber* f = new_fiber(b);
        resume(b, f);
        ran = true;
        if (!b.error.empty()) throw BlockError(b.error);
        if (f->finished) b.free_fibers.push_back(f);
      }
    }
    if (!resolve(b)) break;
  }
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

void* dynamic_shared() {
  return block().dyn;
}

void device_error(const std::string& what, std::source_location loc) {
  Block& b = block();
  b.error = what + " at " + where(loc);
  me(b).state = State::done;
  yield(b, false);
  std::abort();  // the scheduler never resumes a fiber after an error
}

void cp_async16(void* dst, const void* src, int src_bytes, std::source_location loc) {
  Block& b = block();
  if (reinterpret_cast<uintptr_t>(dst) % 16 || reinterpret_cast<uintptr_t>(src) % 16)
    device_error("cp.async.cg 16: an address not 16-byte aligned", loc);
  if (src_bytes < 0 || src_bytes > 16) device_error("cp.async.cg 16: src-size outside 0..16", loc);
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
  Thread& t = me(block());
  // Every committed group but the `pending_allowed` most recent lands now.
  const int land_below = t.groups_committed - pending_allowed;
  std::vector<CpAsyncCopy> keep;
  for (auto& c : t.copies) {
    if (c.group >= 0 && c.group < land_below) {
      std::memcpy(c.dst, c.src, static_cast<size_t>(c.bytes));
      std::memset(static_cast<char*>(c.dst) + c.bytes, 0, 16 - static_cast<size_t>(c.bytes));
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
  std::string result;
  for (unsigned bz = 0; bz < grid.z && result.empty(); ++bz)
    for (unsigned by = 0; by < grid.y && result.empty(); ++by)
      for (unsigned bx = 0; bx < grid.x && result.empty(); ++bx) {
        for (Thread& t : b.threads) {
          t.state = State::unstarted;
          t.fiber = nullptr;
          t.copies.clear();
          t.groups_committed = 0;
          t.lane.block_idx = uint3{bx, by, bz};
        }
        b.dyn = nullptr;
        if (dynamic_smem) {
          b.dyn = std::aligned_alloc(16, (dynamic_smem + 15) / 16 * 16);
          std::memset(b.dyn, 0xff, (dynamic_smem + 15) / 16 * 16);
#ifdef ATTNSWEEP_EMU_ASAN
          // Exactly the launch's bytes are addressable: a read past them is reported.
          ASAN_POISON_MEMORY_REGION(static_cast<char*>(b.dyn) + dynamic_smem,
                                    (dynamic_smem + 15) / 16 * 16 - dynamic_smem);
#endif
        }
        try {
          run_block(b);
        } catch (const BlockError& e) {
          std::ostringstream s;
          s << "kernel " << b.kernel() << ", block (" << bx << "," << by << "," << bz << "): " << e.what();
          result = s.str();
          // The fibers of the abandoned threads are made anew.
          b.fibers.clear();
          b.free_fibers.clear();
        }
        if (b.dyn) {
#ifdef ATTNSWEEP_EMU_ASAN
          ASAN_UNPOISON_MEMORY_REGION(b.dyn, (dynamic_smem + 15) / 16 * 16);
#endif
          std::free(b.dyn);
          b.dyn = nullptr;
        }
      }
  t_block = saved;
  return result;
}

}  // namespace attnsweep::emu
