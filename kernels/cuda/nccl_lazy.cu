// NCCL through dlopen (kernels/collective_cuda.h). Only the few entry points we call are
// declared here, with NCCL 2's ABI (stable across 2.x); when nccl.h is on the include
// path the declarations are checked against it at compile time.
#include "base/options.h"
#include "kernels/collective_cuda.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#if __has_include(<nccl.h>)
#include <nccl.h>
#define ATTNSWEEP_CHECK_NCCL_ABI 1
#endif

namespace attnsweep {
namespace {

// NCCL 2 ABI: ncclResult_t, ncclDataType_t and ncclRedOp_t are C enums (int), a
// communicator is an opaque pointer.
using Result = int;
using Comm = void*;
constexpr Result kSuccess = 0;
constexpr int kFloat32 = 7;
constexpr int kSum = 0;
#ifdef ATTNSWEEP_CHECK_NCCL_ABI
static_assert(static_cast<int>(ncclSuccess) == kSuccess && static_cast<int>(ncclFloat32) == kFloat32 &&
                  static_cast<int>(ncclSum) == kSum && sizeof(ncclComm_t) == sizeof(Comm),
              "NCCL ABI differs from the declarations in nccl_lazy.cu");
#endif

struct Api {
  void* lib = nullptr;
  std::string why;  // "" when loaded
  Result (*comm_init_all)(Comm*, int, const int*) = nullptr;
  Result (*comm_destroy)(Comm) = nullptr;
  Result (*all_reduce)(const void*, void*, size_t, int, int, Comm, cudaStream_t) = nullptr;
  Result (*group_start)() = nullptr;
  Result (*group_end)() = nullptr;
  const char* (*error_string)(Result) = nullptr;
};

template <class Fn>
void bind(Api& api, Fn& fn, const char* name) {
  fn = reinterpret_cast<Fn>(dlsym(api.lib, name));
  if (!fn && api.why.empty()) api.why = std::string("symbol ") + name + " missing from the NCCL library";
}

const Api& api() {
  static Api a;
  static std::once_flag once;
  std::call_once(once, [] {
    std::vector<std::string> paths;
    if (std::string p = options::nccl_library(); !p.empty()) paths.push_back(p);
#ifdef ATTNSWEEP_CUDA_EMULATED
    paths.push_back("libattnsweep_cudaemu.so");  // the emulated devices' NCCL (emulator/nccl.cpp)
#else
    paths.push_back("libnccl.so.2");
#endif
    paths.push_back("/usr/local/cuda/lib64/libnccl.so.2");
    std::string tried;
    for (const std::string& p : paths) {
      a.lib = dlopen(p.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (a.lib) break;
      tried += (tried.empty() ? "" : ", ") + p;
    }
    if (!a.lib) {
      a.why = "NCCL not found (tried " + tried + "; set ATTNSWEEP_NCCL_LIBRARY to libnccl.so.2)";
      return;
    }
    bind(a, a.comm_init_all, "ncclCommInitAll");
    bind(a, a.comm_destroy, "ncclCommDestroy");
    bind(a, a.all_reduce, "ncclAllReduce");
    bind(a, a.group_start, "ncclGroupStart");
    bind(a, a.group_end, "ncclGroupEnd");
    bind(a, a.error_string, "ncclGetErrorString");
  });
  return a;
}

const Api& loaded() {
  const Api& a = api();
  if (!a.why.empty()) throw std::runtime_error(a.why);
  return a;
}

void check(Result r, const char* call) {
  if (r != kSuccess)
    throw std::runtime_error(std::string("NCCL error in ") + call + ": " + loaded().error_string(r) + " (code " +
                             std::to_string(r) + ")");
}

}  // namespace

struct NcclComms {
  std::vector<Comm> comms;
};

std::string nccl_unavailable_reason() {
  return api().why;
}

NcclComms* nccl_comms_create(const int* devices, int k) {
  const Api& a = loaded();
  auto* c = new NcclComms;
  c->comms.assign(static_cast<size_t>(k), nullptr);
  const Result r = a.comm_init_all(c->comms.data(), k, devices);
  if (r != kSuccess) {
    delete c;
    check(r, "ncclCommInitAll");
  }
  return c;
}

void nccl_comms_destroy(NcclComms* comms) {
  if (!comms) return;
  const Api& a = api();
  if (a.comm_destroy)
    for (Comm c : comms->comms)
      if (c) a.comm_destroy(c);  // no throw from a destructor path
  delete comms;
}

void nccl_allreduce_sum(NcclComms* comms, float* const* bufs, int64_t n, const cudaStream_t* streams) {
  const Api& a = loaded();
  if (n <= 0) return;
  check(a.group_start(), "ncclGroupStart");
  for (size_t r = 0; r < comms->comms.size(); ++r) {
    const Result res =
        a.all_reduce(bufs[r], bufs[r], static_cast<size_t>(n), kFloat32, kSum, comms->comms[r], streams[r]);
    if (res != kSuccess) {
      a.group_end();  // close the group before reporting
      check(res, "ncclAllReduce");
    }
  }
  check(a.group_end(), "ncclGroupEnd");
}

}  // namespace attnsweep
