// The CUDA runtime of the emulated device: devices, memory, streams, events, graphs and
// launches, as the C functions of cuda_runtime_api.h (no CUDA runtime is linked).
//
// Work is queued, not run, until the host must see its effect (a synchronising call, a
// copy into pageable memory, an event synchronised); then only what that effect needs
// runs (drain_token), the most recently queued first: a forgotten event wait reads
// poison or stale memory, and a pinned source reused before its copy ran is copied new.
// Memory from cudaMalloc is host memory filled with 0xff bytes (NaN), registered, and
// every copy's kind and range is checked against it.
// About 1210 lines: the C entry points of one runtime (memory, streams, events, graphs,
// launches) over one queue of operations; each needs the queue's internals, which stay
// private to this file.
#include "emulator/emu.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

struct CUstream_st {};
struct CUevent_st {};
struct CUgraph_st {};
struct CUgraphExec_st {};

namespace attnsweep::emu {
namespace {

std::recursive_mutex g_mutex;
using Lock = std::lock_guard<std::recursive_mutex>;

struct Collective;

struct Op {
  std::function<void()> run;
  std::vector<TokenP> deps;
  TokenP token = std::make_shared<Token>();
  uint64_t seq = 0;
  std::string what;
};

struct Queue {
  std::deque<Op> ops;
  int device = 0;
};

uint64_t g_seq = 0;

// A captured operation: a node of a graph.
struct Node {
  std::function<void()> run;
  std::vector<int> deps;
  std::string what;
};
struct Graph : CUgraph_st {
  std::vector<Node> nodes;
};
struct GraphExec : CUgraphExec_st {
  std::vector<Node> nodes;
  int device = 0;
};

struct Stream : CUstream_st {
  int device = 0;
  bool legacy = false;
  bool blocking = true;
  Queue q;
  TokenP last;  // the last operation queued (legacy-stream ordering)
  // graph capture
  Graph* capture = nullptr;
  Stream* capture_origin = nullptr;
  std::vector<int> tails;
  bool capture_invalid = false;
};

struct Event : CUevent_st {
  TokenP token;  // nullptr: never recorded
  bool timing = true;
  std::chrono::steady_clock::time_point at{};
  bool captured = false;
  Graph* graph = nullptr;
  std::vector<int> tails;
};

struct Alloc {
  size_t bytes;
  int device;
  bool pinned;  // cudaMallocHost: host memory the device reads when the copy runs
};

struct Device {
  std::unique_ptr<Stream> legacy;
  std::set<Stream*> streams;
};

// Never destroyed: a program's own statics (a cached workspace) free device memory at
// exit, after a function-local static made at the first CUDA call would be gone (found by
// a deliberate breakage: cudaFree from a static unique_ptr's destructor crashed in
// drain_device at exit).
std::vector<Device>& devices() {
  static std::vector<Device>& d = *new std::vector<Device>([] {
    std::vector<Device> v(static_cast<size_t>(device_count()));
    for (size_t i = 0; i < v.size(); ++i) {
      v[i].legacy = std::make_unique<Stream>();
      v[i].legacy->device = static_cast<int>(i);
      v[i].legacy->legacy = true;
      v[i].legacy->q.device = static_cast<int>(i);
    }
    return v;
  }());
  return d;
}

std::map<uintptr_t, Alloc> g_allocs;

// The guards between the pieces carved from a workspace (kernels/scratch.h's Carver, which
// in the emulated build leaves 256 bytes more after each piece and names each piece here
// as it cuts it: attnsweep_emu_carved). The bytes after a piece, up to the next one, are
// its guard: in a watched block, an access there is an error, as past the end of an
// allocation (device_reachable). A launch sees the guards as they were when it was
// queued: a later carve of the workspace, for another op, may put a piece where this
// launch's guard was. Begin -> end; each version immutable, shared by the launches
// queued while it was the latest.
using Guards = std::map<uintptr_t, uintptr_t>;
std::shared_ptr<const Guards> g_guards = std::make_shared<const Guards>();
thread_local const Guards* t_guards = nullptr;  // the running launch's

// g_guards without those overlapping [begin, end): a new version only when one goes.
void drop_guards(uintptr_t begin, uintptr_t end) {
  auto first = g_guards->upper_bound(begin);
  if (first != g_guards->begin() && std::prev(first)->second > begin) --first;
  if (first == g_guards->end() || first->first >= end) return;
  auto next = std::make_shared<Guards>(*g_guards);
  next->erase(next->find(first->first), next->lower_bound(end));
  g_guards = std::move(next);
}

// The GPU emulated: an H100 80GB's memory by default (the GPU machine's default kind),
// an H200's with ATTNSWEEP_EMULATED_GPU=h200, as cudaGetDeviceProperties reports them
// (81,559 and 143,771 MiB); ATTNSWEEP_EMULATED_GPU_MEMORY_MIB sets the size itself (tests
// of a cell that does not fit). cudaMalloc past it fails as on a GPU.
struct GpuModel {
  const char* name;
  size_t bytes;
};
const GpuModel& gpu_model() {
  static const GpuModel m = [] {
    GpuModel g{"H100 80GB HBM3", size_t{81559} << 20};
    const char* e = std::getenv("ATTNSWEEP_EMULATED_GPU");
    if (e && std::strcmp(e, "h200") == 0) {
      g = {"H200", size_t{143771} << 20};
    } else if (e && *e && std::strcmp(e, "h100") != 0) {
      std::fprintf(stderr, "attnsweep emulator: ATTNSWEEP_EMULATED_GPU=%s: expected h100 (the default) or h200\n", e);
      std::exit(2);
    }
    if (const char* mib = std::getenv("ATTNSWEEP_EMULATED_GPU_MEMORY_MIB"); mib && *mib) {
      char* end = nullptr;
      const unsigned long long v = std::strtoull(mib, &end, 10);
      if (*end != '\0' || v == 0) {
        std::fprintf(stderr, "attnsweep emulator: ATTNSWEEP_EMULATED_GPU_MEMORY_MIB=%s: expected a positive integer\n",
                     mib);
        std::exit(2);
      }
      g.bytes = static_cast<size_t>(v) << 20;
    }
    return g;
  }();
  return m;
}

// Device memory in use and its peak, per device (cudaMalloc's, not pinned host memory).
// ATTNSWEEP_EMULATED_MEMORY_REPORT=PREFIX: at exit, PREFIX.<pid>.json holds each device's
// peak, for checking an estimate against what a program allocated
// (tests/integration/emulated_gpu_memory.sh).
std::vector<size_t> g_in_use, g_peak;
void write_memory_report() {
  const char* prefix = std::getenv("ATTNSWEEP_EMULATED_MEMORY_REPORT");
  if (!prefix || !*prefix) return;
  const std::string path = std::string(prefix) + "." + std::to_string(::getpid()) + ".json";
  if (FILE* f = std::fopen(path.c_str(), "w")) {
    std::fprintf(f, "{\"gpu\": \"%s\", \"total_bytes\": %zu, \"peak_bytes\": [", gpu_model().name, gpu_model().bytes);
    for (size_t d = 0; d < static_cast<size_t>(device_count()); ++d)
      std::fprintf(f, "%s%zu", d ? ", " : "", d < g_peak.size() ? g_peak[d] : 0);
    std::fprintf(f, "]}\n");
    std::fclose(f);
  }
}
// Registered at load, so that a process that never allocates reports its zeros too.
const bool g_memory_report_registered = [] {
  if (const char* prefix = std::getenv("ATTNSWEEP_EMULATED_MEMORY_REPORT"); prefix && *prefix)
    std::atexit(write_memory_report);
  return true;
}();
// Counts an allocation of `bytes` on `device`: false (nothing counted) when it would pass
// the GPU's memory.
bool count_alloc(int device, size_t bytes) {
  if (g_in_use.empty()) {
    g_in_use.assign(static_cast<size_t>(std::max(device_count(), 1)), 0);
    g_peak = g_in_use;
  }
  size_t& used = g_in_use[static_cast<size_t>(device)];
  if (bytes > gpu_model().bytes - std::min(used, gpu_model().bytes)) return false;
  used += bytes;
  g_peak[static_cast<size_t>(device)] = std::max(g_peak[static_cast<size_t>(device)], used);
  return true;
}
std::string out_of_memory(const char* what, size_t bytes, int device) {
  const size_t used = g_in_use.empty() ? 0 : g_in_use[static_cast<size_t>(device)];
  return std::string(what) + " of " + std::to_string(bytes) + " bytes: out of memory on emulated device " +
         std::to_string(device) + " (" + gpu_model().name + ", " + std::to_string(gpu_model().bytes >> 20) + " MiB, " +
         std::to_string(used >> 20) + " MiB in use)";
}
std::vector<std::unique_ptr<Queue>> g_graph_queues;  // a graph launch's nodes, one queue each
std::map<const void*, int> g_func_max_dyn_smem;
thread_local int t_device = 0;
thread_local cudaError_t t_last_error = cudaSuccess;
cudaError_t g_sticky = cudaSuccess;
std::string g_sticky_msg;
std::string g_last_msg;  // the detail of the last error, for cudaGetErrorString

cudaError_t fail(cudaError_t e, const std::string& msg) {
  g_last_msg = msg;
  if (std::getenv("ATTNSWEEP_EMU_VERBOSE")) std::fprintf(stderr, "attnsweep emulator: %s\n", msg.c_str());
  t_last_error = e;
  return e;
}

// An error inside a kernel: sticky, as on a GPU, until cudaDeviceReset.
void device_fault(const std::string& msg) {
  std::fprintf(stderr, "attnsweep emulator: %s\n", msg.c_str());
  if (g_sticky == cudaSuccess) {
    g_sticky = cudaErrorLaunchFailure;
    g_sticky_msg = "emulated device: " + msg;
  }
  if (std::getenv("ATTNSWEEP_EMU_ABORT")) std::abort();
}

Stream* resolve(cudaStream_t s) {
  if (!s || s == cudaStreamLegacy) return devices()[static_cast<size_t>(t_device)].legacy.get();
  return static_cast<Stream*>(s);
}

bool valid_stream(Stream* s) {
  for (auto& d : devices())
    if (d.legacy.get() == s || d.streams.count(s)) return true;
  return false;
}

std::vector<Queue*> all_queues() {
  std::vector<Queue*> qs;
  for (auto& d : devices()) {
    qs.push_back(&d.legacy->q);
    for (Stream* s : d.streams) qs.push_back(&s->q);
  }
  for (auto& q : g_graph_queues) qs.push_back(q.get());
  return qs;
}

bool ready(const Op& op) {
  for (auto& t : op.deps)
    if (t && !t->done) return false;
  return true;
}

// Runs ready operations that `may_run` allows, the most recently queued first, until
// `until()` holds.
template <class Pred, class Allow>
void drain(Pred until, const char* why, Allow may_run) {
  while (!until()) {
    Queue* best = nullptr;
    for (Queue* q : all_queues()) {
      if (q->ops.empty() || !ready(q->ops.front()) || !may_run(q->ops.front())) continue;
      if (!best || q->ops.front().seq > best->ops.front().seq) best = q;
    }
    if (!best) {
      std::ostringstream s;
      s << "emulated device: " << why << " waits for work that can never run:";
      for (Queue* q : all_queues())
        if (!q->ops.empty()) s << " [" << q->ops.front().what << " on device " << q->device << "]";
      device_fault(s.str());
      return;
    }
    Op op = std::move(best->ops.front());
    best->ops.pop_front();
    if (g_sticky == cudaSuccess) op.run();  // after a fault the device runs nothing more
    op.token->done = true;
    std::erase_if(g_graph_queues, [](const std::unique_ptr<Queue>& q) { return q->ops.empty(); });
  }
}

template <class Pred>
void drain(Pred until, const char* why) {
  drain(until, why, [](const Op&) { return true; });
}

// The operations that must run before `t` is done: its own, those ahead of it in its
// queue, and, for each, what it waits for (events, the legacy stream's order), again.
// Nothing when it waits for a token no queued operation owns (NCCL's arrivals, set by
// other ranks' operations): then any operation may run.
std::optional<std::set<const Token*>> needed_for(const TokenP& t) {
  std::map<const Token*, std::pair<Queue*, size_t>> where;
  for (Queue* q : all_queues())
    for (size_t i = 0; i < q->ops.size(); ++i) where[q->ops[i].token.get()] = {q, i};
  std::set<const Token*> need;
  std::vector<const Token*> todo{t.get()};
  while (!todo.empty()) {
    const Token* x = todo.back();
    todo.pop_back();
    const auto it = where.find(x);
    if (it == where.end()) {
      if (x->done) continue;
      return std::nullopt;
    }
    const auto [q, pos] = it->second;
    for (size_t i = 0; i <= pos; ++i)
      if (need.insert(q->ops[i].token.get()).second)
        for (const TokenP& d : q->ops[i].deps)
          if (d && !d->done) todo.push_back(d.get());
  }
  return need;
}

// Until `t` is done, running only what it needs: the device stays as far behind the host
// as CUDA allows, so a copy on another stream that the host never waited for has not
// run when the host overwrites its pinned source (a missing event synchronisation).
void drain_token(const TokenP& t, const char* why) {
  if (!t || t->done) return;
  const std::optional<std::set<const Token*>> need = needed_for(t);
  drain([&] { return t->done; }, why, [&](const Op& op) { return !need || need->count(op.token.get()) > 0; });
}
void drain_device(int dev, const char* why) {
  auto& d = devices()[static_cast<size_t>(dev)];
  drain(
      [&] {
        if (!d.legacy->q.ops.empty()) return false;
        for (Stream* s : d.streams)
          if (!s->q.ops.empty()) return false;
        for (auto& q : g_graph_queues)
          if (q->device == dev && !q->ops.empty()) return false;
        return true;
      },
      why);
}

bool capturing_anywhere() {
  for (auto& d : devices())
    for (Stream* s : d.streams)
      if (s->capture) return true;
  return false;
}

void invalidate_captures() {
  for (auto& d : devices())
    for (Stream* s : d.streams)
      if (s->capture) s->capture_invalid = true;
}

// Queues `run` on stream s (or adds it to the graph s captures).
cudaError_t push(Stream* s, std::string what, std::function<void()> run) {
  if (s->capture) {
    Graph* g = s->capture;
    g->nodes.push_back(Node{std::move(run), s->tails, std::move(what)});
    s->tails = {static_cast<int>(g->nodes.size()) - 1};
    return cudaSuccess;
  }
  if (s->legacy && capturing_anywhere()) {
    invalidate_captures();
    return fail(cudaErrorStreamCaptureImplicit, "work on the legacy default stream while a stream is capturing");
  }
  Op op;
  op.run = std::move(run);
  op.what = std::move(what);
  op.seq = ++g_seq;
  auto& dev = devices()[static_cast<size_t>(s->device)];
  if (s->legacy) {
    // The legacy stream waits for all work of the device's blocking streams.
    for (Stream* o : dev.streams)
      if (o->blocking && o->last) op.deps.push_back(o->last);
  } else if (s->blocking && dev.legacy->last) {
    op.deps.push_back(dev.legacy->last);
  }
  if (s->last) op.deps.push_back(s->last);
  s->last = op.token;
  s->q.ops.push_back(std::move(op));
  return cudaSuccess;
}

cudaError_t sticky() {
  return g_sticky;
}

const Alloc* find_alloc(const void* p, uintptr_t* base) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  auto it = g_allocs.upper_bound(a);
  if (it == g_allocs.begin()) return nullptr;
  --it;
  if (a >= it->first + std::max<size_t>(it->second.bytes, 1)) return nullptr;
  if (base) *base = it->first;
  return &it->second;
}

// The kind of [p, p + n): 1 device, 2 pinned host, 0 other host memory; -1 a range that
// starts in an allocation and runs past its end.
int kind_of(const void* p, size_t n) {
  uintptr_t base = 0;
  const Alloc* a = find_alloc(p, &base);
  if (!a) return 0;
  if (reinterpret_cast<uintptr_t>(p) + n > base + a->bytes) return -1;
  return a->pinned ? 2 : 1;
}

const char* kind_name(int k) {
  return k == 1 ? "device memory" : k == 2 ? "pinned host memory" : "host memory";
}

cudaError_t check_copy(void* dst, const void* src, size_t n, cudaMemcpyKind kind, int* dk, int* sk) {
  *dk = kind_of(dst, n);
  *sk = kind_of(src, n);
  std::ostringstream s;
  if (*dk < 0 || *sk < 0) {
    s << "cudaMemcpy of " << n << " bytes runs past the end of its " << (*dk < 0 ? "destination" : "source")
      << " allocation";
    return fail(cudaErrorInvalidValue, s.str());
  }
  const bool d_dev = *dk == 1, s_dev = *sk == 1;
  bool ok = true;
  switch (kind) {
    case cudaMemcpyHostToDevice: ok = d_dev && !s_dev; break;
    case cudaMemcpyDeviceToHost: ok = !d_dev && s_dev; break;
    case cudaMemcpyDeviceToDevice: ok = d_dev && s_dev; break;
    case cudaMemcpyHostToHost: ok = !d_dev && !s_dev; break;
    case cudaMemcpyDefault: break;
  }
  if (!ok) {
    s << "cudaMemcpy kind " << static_cast<int>(kind) << " does not match its pointers: destination in "
      << kind_name(*dk) << ", source in " << kind_name(*sk);
    return fail(cudaErrorInvalidValue, s.str());
  }
  return cudaSuccess;
}

cudaError_t memcpy_async(void* dst, const void* src, size_t n, cudaMemcpyKind kind, Stream* s, bool sync) {
  if (sticky()) return sticky();
  if (n == 0) return cudaSuccess;
  int dk = 0, sk = 0;
  if (cudaError_t e = check_copy(dst, src, n, kind, &dk, &sk)) return e;
  std::function<void()> run;
  if (sk == 0) {
    // From pageable memory: staged before the call returns.
    auto staged = std::make_shared<std::vector<char>>(static_cast<const char*>(src), static_cast<const char*>(src) + n);
    run = [dst, staged] { std::memcpy(dst, staged->data(), staged->size()); };
  } else {
    run = [dst, src, n] { std::memmove(dst, src, n); };
  }
  if (cudaError_t e = push(s, "cudaMemcpy", std::move(run))) return e;
  // Into pageable memory (or a synchronous copy): done when the call returns.
  if ((sync || dk == 0) && !s->capture) {
    drain_token(s->last, "cudaMemcpy");
    if (sticky()) return sticky();
  }
  return cudaSuccess;
}

// Poisoned, and ending at a guard page (memcheck.cpp): a kernel reading one element past
// its buffer fails its launch. 16-byte aligned (cudaMalloc's 256 only under ASan).
void* poisoned(size_t bytes) {
  return guarded_alloc(bytes, "a device allocation");
}

// ATTNSWEEP_EMU_LAUNCH_LOG=FILE: each kernel's first run appends "BINARY OFFSET EXPR", so
// tests/emulator/kernel_coverage.py can tell which __global__ functions ran (by nm).
void log_launch(const LaunchSite& site) {
  static const char* path = std::getenv("ATTNSWEEP_EMU_LAUNCH_LOG");
  static std::set<const void*> seen;
  if (!path || !*path || !seen.insert(site.func).second) return;
  Dl_info info{};
  if (!dladdr(site.func, &info)) return;
  std::string binary = info.dli_fname ? info.dli_fname : "";
  if (binary.empty() || binary[0] != '/') {
    char buf[4096];
    const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
    binary.assign(buf, n > 0 ? static_cast<size_t>(n) : 0);
  }
  if (FILE* f = std::fopen(path, "a")) {
    std::fprintf(f, "%s %lx %s\n", binary.c_str(),
                 static_cast<unsigned long>(reinterpret_cast<uintptr_t>(site.func) -
                                            reinterpret_cast<uintptr_t>(info.dli_fbase)),
                 site.name);
    std::fclose(f);
  }
}

}  // namespace

// ATTNSWEEP_EMULATED_GPUS=K devices (default 1), of which a process sees those that
// CUDA_VISIBLE_DEVICES names (by index), as a child bound to one GPU does.
int device_count() {
  static const int n = [] {
    const char* e = std::getenv("ATTNSWEEP_EMULATED_GPUS");
    const int k = std::clamp(e && *e ? std::atoi(e) : 1, 0, 16);
    const char* v = std::getenv("CUDA_VISIBLE_DEVICES");
    if (!v) return k;
    int seen = 0;
    for (const char* p = v; *p;) {
      char* end = nullptr;
      const long i = std::strtol(p, &end, 10);
      if (end == p) break;  // as CUDA: the list ends at the first entry that is not an index
      if (i < 0 || i >= k) break;
      ++seen;
      p = *end == ',' ? end + 1 : end;
      if (*end != ',') break;
    }
    return seen;
  }();
  return n;
}

bool is_device_range(const void* p, size_t bytes) {
  Lock lock(g_mutex);
  return kind_of(p, bytes) == 1;
}

cudaError_t enqueue(cudaStream_t stream, const char* what, std::function<void()> work, std::vector<TokenP> wait_for) {
  Lock lock(g_mutex);
  if (sticky()) return sticky();
  Stream* s = resolve(stream);
  if (!valid_stream(s)) return fail(cudaErrorInvalidResourceHandle, std::string(what) + ": not a live stream");
  if (!wait_for.empty() && s->capture)
    return fail(cudaErrorStreamCaptureUnsupported, std::string(what) + " in a captured stream (not emulated)");
  const cudaError_t e = push(s, what, std::move(work));
  if (e == cudaSuccess && !s->capture)
    for (auto& t : wait_for) s->q.ops.back().deps.push_back(std::move(t));
  return e;
}

bool is_capturing(cudaStream_t stream) {
  Lock lock(g_mutex);
  return resolve(stream)->capture != nullptr;
}

// A kernel's __launch_bounds__ maximum, 0 where it has none: the count of one-byte nops
// (0x90) it begins with, after an endbr64 where the build has one (cuda_emu.h).
int launch_bound(const void* func) {
  const auto* code = static_cast<const unsigned char*>(func);
  static constexpr unsigned char endbr64[] = {0xf3, 0x0f, 0x1e, 0xfa};
  if (std::memcmp(code, endbr64, sizeof endbr64) == 0) code += sizeof endbr64;
  int n = 0;
  while (n <= 1024 && code[n] == 0x90) ++n;
  return n;
}

constexpr const char* kHostMemory = "host memory (neither a device allocation nor pinned host memory)";

const char* allocation_name(const Alloc& a) {
  return a.pinned ? "a pinned host allocation" : "a device allocation";
}

std::string device_reachable(const void* p, size_t n, SharedSpan* span) {
  Lock lock(g_mutex);
  uintptr_t base = 0;
  const auto a = reinterpret_cast<uintptr_t>(p);
  std::ostringstream m;
  if (const Alloc* al = find_alloc(p, &base)) {
    if (a + n <= base + al->bytes) {
      uintptr_t lo = base, hi = base + al->bytes;  // the reach between the guards around it
      if (t_guards && !t_guards->empty()) {
        auto next = t_guards->upper_bound(a + n - 1);
        if (next != t_guards->begin()) {
          const auto& [begin, end] = *std::prev(next);
          if (end > a) {
            m << "byte " << a - begin << " of the " << end - begin << "-byte guard after a piece carved from "
              << allocation_name(*al) << " of " << al->bytes << " bytes (its byte " << a - base
              << "; kernels/scratch.h's Carver), past the end of the piece";
            return m.str();
          }
          lo = std::max(lo, end);
        }
        if (next != t_guards->end()) hi = std::min(hi, next->first);
      }
      *span = {lo, hi - lo};
      return "";
    }
  }
  // Past the end of the allocation below it (in its last 16-byte granule, before the
  // guard page), or into the canary before one.
  auto below = g_allocs.upper_bound(a);
  if (below != g_allocs.begin()) {
    --below;
    const uintptr_t end = below->first + below->second.bytes;
    if (a + n > end && a < end + 4096) {
      m << "byte " << a - below->first << " of " << allocation_name(below->second) << " of " << below->second.bytes
        << " bytes, past its end";
      return m.str();
    }
  }
  if (auto above = g_allocs.upper_bound(a); above != g_allocs.end() && above->first - a <= 4096) {
    m << "byte -" << above->first - a << " of " << allocation_name(above->second) << " of " << above->second.bytes
      << " bytes, before its start";
    return m.str();
  }
  m << p << ", " << kHostMemory;
  return m.str();
}

// "" or why a pointer parameter of a kernel is not memory the device reaches (a host
// pointer: on a GPU, the kernel's first access through it faults). One past the end of
// an allocation is a pointer into it.
std::string host_pointer_argument(const PointerArgs& pointers) {
  for (const auto& [index, p] : pointers) {
    if (!p || find_alloc(p, nullptr) || find_alloc(static_cast<const char*>(p) - 1, nullptr)) continue;
    std::ostringstream m;
    m << "memcheck: its parameter " << index << " is " << p << ", " << kHostMemory
      << ": a GPU faults at its first access";
    return m.str();
  }
  return "";
}

cudaError_t launch(const LaunchSite& site, dim3 grid, dim3 block, size_t dyn, cudaStream_t stream,
                   std::function<void()> thread, PointerArgs pointers) {
  Lock lock(g_mutex);
  if (sticky()) return t_last_error = sticky();
  Stream* s = resolve(stream);
  std::ostringstream m;
  m << "launch of " << site.name << " at " << site.file << ":" << site.line << ": ";
  if (!valid_stream(s)) return fail(cudaErrorInvalidResourceHandle, m.str() + "not a live stream");
  if (s->device != t_device)
    return fail(cudaErrorInvalidResourceHandle, m.str() + "the stream belongs to device " + std::to_string(s->device) +
                                                    ", the current device is " + std::to_string(t_device));
  const uint64_t threads = uint64_t{block.x} * block.y * block.z;
  if (threads == 0 || threads > 1024 || block.z > 64)
    return fail(cudaErrorInvalidConfiguration, m.str() + std::to_string(threads) + " threads a block (1..1024)");
  // As on a GPU, a launch with more threads than the kernel was compiled for fails.
  if (const int bound = launch_bound(site.func); bound > 0 && threads > static_cast<uint64_t>(bound))
    return fail(cudaErrorLaunchOutOfResources, m.str() + std::to_string(threads) +
                                                   " threads a block, above the kernel's __launch_bounds__ of " +
                                                   std::to_string(bound));
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.y > 65535 || grid.z > 65535 || grid.x > 2147483647u)
    return fail(cudaErrorInvalidConfiguration, m.str() + "grid dimensions out of range");
  int limit = 48 * 1024;
  if (auto it = g_func_max_dyn_smem.find(site.func); it != g_func_max_dyn_smem.end()) limit = it->second;
  if (dyn > static_cast<size_t>(limit))
    return fail(cudaErrorInvalidValue, m.str() + std::to_string(dyn) + " bytes of dynamic shared memory, above the " +
                                           std::to_string(limit) +
                                           " bytes allowed (cudaFuncAttributeMaxDynamicSharedMemorySize)");
  LaunchSite copy = site;
  auto body = std::make_shared<std::function<void()>>(std::move(thread));
  std::string what = std::string("kernel ") + site.name;
  return push(s, what, [copy, grid, block, dyn, body, pointers = std::move(pointers), guards = g_guards] {
    log_launch(copy);
    std::string err = host_pointer_argument(pointers);
    if (!err.empty()) err = "kernel " + kernel_name(copy) + ": " + err;
    t_guards = guards.get();
    if (err.empty()) err = run_grid(copy, grid, block, dyn, *body);
    t_guards = nullptr;
    if (!err.empty()) device_fault(err);
  });
}

}  // namespace attnsweep::emu

using namespace attnsweep::emu;

extern "C" {

// ---- the guards of carved pieces (g_guards) ------------------------------------------------

// kernels/scratch.h's Carver cut the piece [piece, piece + bytes) and left the `guard`
// bytes after it free; `first`: the first piece of a new layout of the workspace, whose
// old guards from here to the allocation's end go (bytes and guard 0: the workspace is
// handed to a new user, who may not carve it). Memory that is no device allocation (a
// host buffer carved alike) has none.
void attnsweep_emu_carved(const void* piece, size_t bytes, size_t guard, int first) {
  Lock lock(g_mutex);
  uintptr_t base = 0;
  const Alloc* al = find_alloc(piece, &base);
  if (!al || al->pinned) return;
  const auto p = reinterpret_cast<uintptr_t>(piece);
  const uintptr_t end = base + al->bytes;
  drop_guards(p, first ? end : std::min(end, p + bytes + guard));
  if (guard == 0 || p + bytes >= end) return;
  auto next = std::make_shared<Guards>(*g_guards);
  (*next)[p + bytes] = std::min(end, p + bytes + guard);
  g_guards = std::move(next);
}

// ---- errors and devices ----------------------------------------------------------------

cudaError_t cudaGetLastError(void) {
  Lock lock(g_mutex);
  const cudaError_t e = t_last_error != cudaSuccess ? t_last_error : g_sticky;
  t_last_error = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError(void) {
  Lock lock(g_mutex);
  return t_last_error != cudaSuccess ? t_last_error : g_sticky;
}
const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorStreamCaptureUnsupported: return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated: return "cudaErrorStreamCaptureInvalidated";
    case cudaErrorStreamCaptureUnjoined: return "cudaErrorStreamCaptureUnjoined";
    case cudaErrorStreamCaptureImplicit: return "cudaErrorStreamCaptureImplicit";
    case cudaErrorIllegalState: return "cudaErrorIllegalState";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    default: return "cudaError (emulated device)";
  }
}
const char* cudaGetErrorString(cudaError_t e) {
  static thread_local std::string s;
  Lock lock(g_mutex);
  if (e == cudaSuccess) return "no error";
  if (e == g_sticky && !g_sticky_msg.empty()) {
    s = g_sticky_msg;
  } else {
    s = std::string(cudaGetErrorName(e)) + (g_last_msg.empty() ? "" : ": " + g_last_msg);
  }
  return s.c_str();
}

cudaError_t cudaGetDeviceCount(int* count) {
  *count = device_count();
  if (*count == 0) return fail(cudaErrorNoDevice, "ATTNSWEEP_EMULATED_GPUS=0");
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) {
  if (device < 0 || device >= device_count())
    return fail(cudaErrorInvalidDevice, "cudaSetDevice(" + std::to_string(device) + ") of " +
                                            std::to_string(device_count()) + " emulated devices");
  t_device = device;
  return sticky();
}
cudaError_t cudaGetDevice(int* device) {
  *device = t_device;
  return cudaSuccess;
}

// An sm_90 device with an H100's sizes (its memory: gpu_model()).
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int device) {
  if (device < 0 || device >= device_count()) return fail(cudaErrorInvalidDevice, "cudaGetDeviceProperties");
  std::memset(p, 0, sizeof(*p));
  std::snprintf(p->name, sizeof(p->name), "attnsweep emulated %s (sm_90) device %d", gpu_model().name, device);
  p->totalGlobalMem = gpu_model().bytes;
  p->sharedMemPerBlock = 48 * 1024;
  p->sharedMemPerBlockOptin = 232448;
  p->sharedMemPerMultiprocessor = 233472;
  p->regsPerBlock = 65536;
  p->regsPerMultiprocessor = 65536;
  p->warpSize = 32;
  p->maxThreadsPerBlock = 1024;
  p->maxThreadsPerMultiProcessor = 2048;
  p->maxThreadsDim[0] = 1024;
  p->maxThreadsDim[1] = 1024;
  p->maxThreadsDim[2] = 64;
  p->maxGridSize[0] = 2147483647;
  p->maxGridSize[1] = 65535;
  p->maxGridSize[2] = 65535;
  p->major = 9;
  p->minor = 0;
  p->multiProcessorCount = 132;
  p->l2CacheSize = 50 * 1024 * 1024;
  p->memoryBusWidth = 6144;
  p->totalConstMem = 65536;
  p->pciDeviceID = device;
  p->concurrentKernels = 1;
  p->asyncEngineCount = 2;
  p->unifiedAddressing = 1;
  return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (device < 0 || device >= device_count()) return fail(cudaErrorInvalidDevice, "cudaDeviceGetAttribute");
  switch (attr) {
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = 232448; return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerBlock: *value = 48 * 1024; return cudaSuccess;
    case cudaDevAttrMultiProcessorCount: *value = 132; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMajor: *value = 9; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMinor: *value = 0; return cudaSuccess;
    case cudaDevAttrWarpSize: *value = 32; return cudaSuccess;
    case cudaDevAttrMaxThreadsPerBlock: *value = 1024; return cudaSuccess;
    default:
      return fail(cudaErrorInvalidValue,
                  "cudaDeviceGetAttribute: attribute " + std::to_string(static_cast<int>(attr)) + " is not emulated");
  }
}
cudaError_t cudaDeviceSynchronize(void) {
  Lock lock(g_mutex);
  if (capturing_anywhere()) {
    invalidate_captures();
    return fail(cudaErrorStreamCaptureUnsupported, "cudaDeviceSynchronize while a stream is capturing");
  }
  drain_device(t_device, "cudaDeviceSynchronize");
  return sticky();
}
// Clears a fault (and the device's queues): what tests of the emulator's checks need.
cudaError_t cudaDeviceReset(void) {
  Lock lock(g_mutex);
  for (Queue* q : all_queues())
    if (q->device == t_device) q->ops.clear();
  std::erase_if(g_graph_queues, [](const std::unique_ptr<Queue>& q) { return q->ops.empty(); });
  for (auto& d : devices()) {
    d.legacy->last = nullptr;
    for (Stream* s : d.streams) s->last = nullptr;
  }
  g_sticky = cudaSuccess;
  g_sticky_msg.clear();
  t_last_error = cudaSuccess;
  return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total) {
  Lock lock(g_mutex);
  *total = gpu_model().bytes;
  const size_t used = g_in_use.empty() ? 0 : g_in_use[static_cast<size_t>(t_device)];
  *free_bytes = *total - std::min(used, *total);
  return cudaSuccess;
}

// ---- memory -----------------------------------------------------------------------------

cudaError_t cudaMalloc(void** p, size_t bytes) {
  Lock lock(g_mutex);
  if (sticky()) return sticky();
  if (capturing_anywhere()) {
    invalidate_captures();
    return fail(cudaErrorStreamCaptureUnsupported, "cudaMalloc while a stream is capturing");
  }
  if (!count_alloc(t_device, bytes)) {
    *p = nullptr;
    return fail(cudaErrorMemoryAllocation, out_of_memory("cudaMalloc", bytes, t_device));
  }
  *p = poisoned(bytes);
  if (!*p) {
    g_in_use[static_cast<size_t>(t_device)] -= bytes;
    return fail(cudaErrorMemoryAllocation, "cudaMalloc of " + std::to_string(bytes) + " bytes");
  }
  g_allocs[reinterpret_cast<uintptr_t>(*p)] = Alloc{bytes, t_device, false};
  return cudaSuccess;
}
cudaError_t cudaMallocAsync(void** p, size_t bytes, cudaStream_t stream) {
  Lock lock(g_mutex);
  if (sticky()) return sticky();
  Stream* s = resolve(stream);
  if (!valid_stream(s)) return fail(cudaErrorInvalidResourceHandle, "cudaMallocAsync: not a live stream");
  if (!count_alloc(s->device, bytes)) {
    *p = nullptr;
    return fail(cudaErrorMemoryAllocation, out_of_memory("cudaMallocAsync", bytes, s->device));
  }
  *p = poisoned(bytes);
  if (!*p) {
    g_in_use[static_cast<size_t>(s->device)] -= bytes;
    return fail(cudaErrorMemoryAllocation, "cudaMallocAsync of " + std::to_string(bytes) + " bytes");
  }
  g_allocs[reinterpret_cast<uintptr_t>(*p)] = Alloc{bytes, s->device, false};
  return cudaSuccess;
}
static cudaError_t free_now(void* p, bool pinned, const char* what) {
  if (!p) return cudaSuccess;
  auto it = g_allocs.find(reinterpret_cast<uintptr_t>(p));
  if (it == g_allocs.end() || it->second.pinned != pinned)
    return fail(cudaErrorInvalidValue, std::string(what) + " of a pointer it did not allocate");
  if (!pinned) g_in_use[static_cast<size_t>(it->second.device)] -= it->second.bytes;
  drop_guards(it->first, it->first + it->second.bytes);  // a later allocation there starts without them
  g_allocs.erase(it);
  if (const std::string before = guarded_free(p); !before.empty()) {
    device_fault(std::string(what) + ": " + before);
    return g_sticky;
  }
  return cudaSuccess;
}
cudaError_t cudaFree(void* p) {
  Lock lock(g_mutex);
  if (capturing_anywhere()) {
    invalidate_captures();
    return fail(cudaErrorStreamCaptureUnsupported, "cudaFree while a stream is capturing");
  }
  // cudaFree waits for the device's work first, as on a GPU.
  for (int d = 0; d < device_count(); ++d) drain_device(d, "cudaFree");
  return free_now(p, false, "cudaFree");
}
cudaError_t cudaFreeAsync(void* p, cudaStream_t stream) {
  Lock lock(g_mutex);
  Stream* s = resolve(stream);
  if (!valid_stream(s)) return fail(cudaErrorInvalidResourceHandle, "cudaFreeAsync: not a live stream");
  auto it = g_allocs.find(reinterpret_cast<uintptr_t>(p));
  if (it == g_allocs.end() || it->second.pinned)
    return fail(cudaErrorInvalidValue, "cudaFreeAsync of a pointer cudaMalloc did not return");
  if (s->capture) return fail(cudaErrorStreamCaptureUnsupported, "cudaFreeAsync in a captured stream (not emulated)");
  return push(s, "cudaFreeAsync", [p] { free_now(p, false, "cudaFreeAsync"); });
}
cudaError_t cudaHostAlloc(void** p, size_t bytes, unsigned int) {
  Lock lock(g_mutex);
  *p = poisoned(bytes);
  if (!*p) return fail(cudaErrorMemoryAllocation, "cudaHostAlloc");
  g_allocs[reinterpret_cast<uintptr_t>(*p)] = Alloc{bytes, -1, true};
  return cudaSuccess;
}
cudaError_t cudaMallocHost(void** p, size_t bytes) {
  return cudaHostAlloc(p, bytes, 0);
}
cudaError_t cudaFreeHost(void* p) {
  Lock lock(g_mutex);
  for (int d = 0; d < device_count(); ++d) drain_device(d, "cudaFreeHost");
  return free_now(p, true, "cudaFreeHost");
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t n, cudaMemcpyKind kind) {
  Lock lock(g_mutex);
  if (capturing_anywhere()) {
    invalidate_captures();
    return fail(cudaErrorStreamCaptureImplicit, "cudaMemcpy while a stream is capturing");
  }
  return memcpy_async(dst, src, n, kind, resolve(nullptr), true);
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t n, cudaMemcpyKind kind, cudaStream_t stream) {
  Lock lock(g_mutex);
  Stream* s = resolve(stream);
  if (!valid_stream(s)) return fail(cudaErrorInvalidResourceHandle, "cudaMemcpyAsync: not a live stream");
  return memcpy_async(dst, src, n, kind, s, false);
}
static cudaError_t memset_on(Stream* s, void* p, int value, size_t n) {
  if (sticky()) return sticky();
  if (n == 0) return cudaSuccess;
  if (kind_of(p, n) != 1) return fail(cudaErrorInvalidValue, "cudaMemset outside a device allocation");
  return push(s, "cudaMemset", [p, value, n] { std::memset(p, value, n); });
}
cudaError_t cudaMemset(void* p, int value, size_t n) {
  Lock lock(g_mutex);
  return memset_on(resolve(nullptr), p, value, n);
}
cudaError_t cudaMemsetAsync(void* p, int value, size_t n, cudaStream_t stream) {
  Lock lock(g_mutex);
  Stream* s = resolve(stream);
  if (!valid_stream(s)) return fail(cudaErrorInvalidResourceHandle, "cudaMemsetAsync: not a live stream");
  return memset_on(s, p, value, n);
}

cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
  Lock lock(g_mutex);
  if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
    if (value < 0 || value > 232448)
      return fail(cudaErrorInvalidValue, "cudaFuncAttributeMaxDynamicSharedMemorySize " + std::to_string(value) +
                                             " above sm_90's 232448 bytes");
    g_func_max_dyn_smem[func] = value;
  }
  return cudaSuccess;
}

// ---- streams and events ----------------------------------------------------------------

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags) {
  Lock lock(g_mutex);
  auto* s = new Stream();
  s->device = t_device;
  s->q.device = t_device;
  s->blocking = !(flags & cudaStreamNonBlocking);
  devices()[static_cast<size_t>(t_device)].streams.insert(s);
  *stream = s;
  return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t* stream) {
  return cudaStreamCreateWithFlags(stream, cudaStreamDefault);
}
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  Lock lock(g_mutex);
  Stream* s = static_cast<Stream*>(stream);
  if (!s || s->legacy || !valid_stream(s)) return fail(cudaErrorInvalidResourceHandle, "cudaStreamDestroy");
  // Work already queued still runs (as CUDA promises), before the stream goes.
  drain([&] { return s->q.ops.empty(); }, "cudaStreamDestroy");
  devices()[static_cast<size_t>(s->device)].streams.erase(s);
  delete s;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  Lock lock(g_mutex);
  Stream* s = resolve(stream);
  if (!valid_stream(s)) return fail(cudaErrorInvalidResourceHandle, "cudaStreamSynchronize: not a live stream");
  if (s->capture) {
    s->capture_invalid = true;
    return fail(cudaErrorStreamCaptureUnsupported, "cudaStreamSynchronize of a capturing stream");
  }
  drain_token(s->last, "cudaStreamSynchronize");
  return sticky();
}
cudaError_t cudaStreamQuery(cudaStream_t stream) {
  Lock lock(g_mutex);
  Stream* s = resolve(stream);
  return s->q.ops.empty() ? sticky() : cudaErrorNotReady;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  auto* e = new Event();
  e->timing = !(flags & cudaEventDisableTiming);
  *event = e;
  return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t* event) {
  return cudaEventCreateWithFlags(event, cudaEventDefault);
}
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  delete static_cast<Event*>(event);
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  Lock lock(g_mutex);
  Event* e = static_cast<Event*>(event);
  Stream* s = resolve(stream);
  if (!e || !valid_stream(s)) return fail(cudaErrorInvalidResourceHandle, "cudaEventRecord");
  if (s->capture) {
    e->captured = true;
    e->graph = s->capture;
    e->tails = s->tails;
    return cudaSuccess;
  }
  e->captured = false;
  const cudaError_t r = push(s, "cudaEventRecord", [e] { e->at = std::chrono::steady_clock::now(); });
  e->token = s->last;
  return r;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int) {
  Lock lock(g_mutex);
  Event* e = static_cast<Event*>(event);
  Stream* s = resolve(stream);
  if (!e || !valid_stream(s)) return fail(cudaErrorInvalidResourceHandle, "cudaStreamWaitEvent");
  if (e->captured) {
    // The stream joins the capture of the event's stream (fork), or adds the event's
    // nodes to what its next node waits for (join).
    if (!s->capture) {
      if (s->legacy) return fail(cudaErrorStreamCaptureImplicit, "the legacy stream waits on a captured event");
      s->capture = e->graph;
      s->tails = e->tails;
    } else if (s->capture != e->graph) {
      return fail(cudaErrorStreamCaptureIsolation, "cudaStreamWaitEvent across two captures");
    } else {
      for (int t : e->tails)
        if (std::find(s->tails.begin(), s->tails.end(), t) == s->tails.end()) s->tails.push_back(t);
    }
    return cudaSuccess;
  }
  if (!e->token) return cudaSuccess;  // never recorded: nothing to wait for
  TokenP t = e->token;
  if (s->capture) {
    // A captured stream waiting on uncaptured work: the work must be done at replay.
    return cudaSuccess;
  }
  const cudaError_t r = push(s, "cudaStreamWaitEvent", [] {});
  s->q.ops.back().deps.push_back(t);
  return r;
}
cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  Lock lock(g_mutex);
  Event* e = static_cast<Event*>(event);
  if (!e) return fail(cudaErrorInvalidResourceHandle, "cudaEventSynchronize");
  if (e->captured) return fail(cudaErrorStreamCaptureUnsupported, "cudaEventSynchronize of a captured event");
  drain_token(e->token, "cudaEventSynchronize");
  return sticky();
}
cudaError_t cudaEventQuery(cudaEvent_t event) {
  Lock lock(g_mutex);
  Event* e = static_cast<Event*>(event);
  return !e->token || e->token->done ? sticky() : cudaErrorNotReady;
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  Lock lock(g_mutex);
  Event* a = static_cast<Event*>(start);
  Event* b = static_cast<Event*>(end);
  if (!a || !b || !a->token || !b->token || !a->timing || !b->timing)
    return fail(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime");
  if (!a->token->done || !b->token->done) return cudaErrorNotReady;
  *ms = std::chrono::duration<float, std::milli>(b->at - a->at).count();
  return cudaSuccess;
}

// ---- graphs -----------------------------------------------------------------------------

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode) {
  Lock lock(g_mutex);
  Stream* s = resolve(stream);
  if (!valid_stream(s) || s->legacy)
    return fail(cudaErrorStreamCaptureUnsupported, "cudaStreamBeginCapture on the legacy stream");
  if (s->capture) return fail(cudaErrorIllegalState, "cudaStreamBeginCapture of a stream already capturing");
  s->capture = new Graph();
  s->capture_origin = s;
  s->tails.clear();
  s->capture_invalid = false;
  return cudaSuccess;
}
cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status) {
  Lock lock(g_mutex);
  Stream* s = resolve(stream);
  *status = s->capture ? (s->capture_invalid ? cudaStreamCaptureStatusInvalidated : cudaStreamCaptureStatusActive)
                       : cudaStreamCaptureStatusNone;
  return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  Lock lock(g_mutex);
  Stream* s = resolve(stream);
  if (!valid_stream(s) || !s->capture || s->capture_origin != s)
    return fail(cudaErrorIllegalState, "cudaStreamEndCapture of a stream that did not begin a capture");
  Graph* g = s->capture;
  // Every stream forked into the capture must have been joined back into this one.
  std::set<int> reach;
  std::vector<int> stack = s->tails;
  while (!stack.empty()) {
    const int n = stack.back();
    stack.pop_back();
    if (!reach.insert(n).second) continue;
    for (int d : g->nodes[static_cast<size_t>(n)].deps) stack.push_back(d);
  }
  bool unjoined = false, invalid = s->capture_invalid;
  for (auto& d : devices())
    for (Stream* o : d.streams) {
      if (o->capture != g) continue;
      invalid = invalid || o->capture_invalid;
      if (o != s)
        for (int t : o->tails)
          if (!reach.count(t)) unjoined = true;
      o->capture = nullptr;
      o->capture_origin = nullptr;
      o->tails.clear();
      o->capture_invalid = false;
    }
  *graph = nullptr;
  if (unjoined) {
    delete g;
    return fail(cudaErrorStreamCaptureUnjoined, "cudaStreamEndCapture: a forked stream was not joined back");
  }
  if (invalid) {
    delete g;
    return fail(cudaErrorStreamCaptureInvalidated, "cudaStreamEndCapture: the capture was invalidated");
  }
  *graph = g;
  return cudaSuccess;
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long) {
  Lock lock(g_mutex);
  auto* x = new GraphExec();
  x->nodes = static_cast<Graph*>(graph)->nodes;
  x->device = t_device;
  *exec = x;
  return cudaSuccess;
}
cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long flags) {
  return cudaGraphInstantiate(exec, graph, flags);
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  Lock lock(g_mutex);
  if (sticky()) return sticky();
  auto* x = static_cast<GraphExec*>(exec);
  Stream* s = resolve(stream);
  if (!x || !valid_stream(s)) return fail(cudaErrorInvalidResourceHandle, "cudaGraphLaunch");
  if (s->capture) return fail(cudaErrorStreamCaptureUnsupported, "cudaGraphLaunch into a capturing stream");
  // Each node on a queue of its own, ordered only by the graph's edges (and after the
  // stream's earlier work): a dependency the capture missed shows at replay too.
  push(s, "cudaGraphLaunch (start)", [] {});
  const TokenP before = s->last;
  std::vector<TokenP> tokens(x->nodes.size());
  std::vector<bool> has_child(x->nodes.size(), false);
  for (size_t i = 0; i < x->nodes.size(); ++i) {
    const Node& n = x->nodes[i];
    auto q = std::make_unique<Queue>();
    q->device = s->device;
    Op op;
    op.run = n.run;
    op.what = "graph node: " + n.what;
    op.seq = ++g_seq;
    op.deps.push_back(before);
    for (int d : n.deps) {
      op.deps.push_back(tokens[static_cast<size_t>(d)]);
      has_child[static_cast<size_t>(d)] = true;
    }
    tokens[i] = op.token;
    q->ops.push_back(std::move(op));
    g_graph_queues.push_back(std::move(q));
  }
  push(s, "cudaGraphLaunch (end)", [] {});
  for (size_t i = 0; i < tokens.size(); ++i)
    if (!has_child[i]) s->q.ops.back().deps.push_back(tokens[i]);
  return cudaSuccess;
}
cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  delete static_cast<Graph*>(graph);
  return cudaSuccess;
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  delete static_cast<GraphExec*>(exec);
  return cudaSuccess;
}

}  // extern "C"
