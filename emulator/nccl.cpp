// NCCL on the emulated devices: ncclCommInitAll's clique, and all-reduce (float32 sum)
// as a rendezvous of the ranks' streams. Each rank's send buffer is read when its stream
// reaches the call; every rank's result is the sum in rank order, written when all
// ranks have arrived, so a rank whose stream never gets there is reported, not a hang.
// NCCL 2's ABI (the declarations kernels/cuda/nccl_lazy.cu checks against nccl.h); it
// finds these symbols in this library before any libnccl.
#include <cuda_runtime_api.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "emulator/emu.h"

namespace {

using attnsweep::emu::Token;
using attnsweep::emu::TokenP;

constexpr int kSuccess = 0, kInvalidArgument = 4, kInvalidUsage = 5;
constexpr int kFloat32 = 7, kSum = 0;

struct Round {  // one all-reduce of every rank
  std::vector<TokenP> arrived;
  std::vector<std::vector<float>> staged;
  std::vector<int> posted;
};

struct Clique {
  int n = 0;
  std::vector<int> devices;
  std::vector<std::shared_ptr<Round>> rounds;  // open rounds, oldest first
  std::vector<size_t> next;                    // per rank: its next round's index in all rounds so far
  size_t base = 0;                             // rounds before rounds[0], all complete
};

struct Comm {
  std::shared_ptr<Clique> clique;
  int rank = 0;
};

thread_local int t_group_depth = 0;

}  // namespace

extern "C" {

int ncclCommInitAll(void** comms, int ndev, const int* devlist) {
  if (ndev <= 0 || ndev > attnsweep::emu::device_count()) return kInvalidArgument;
  auto c = std::make_shared<Clique>();
  c->n = ndev;
  c->next.assign(static_cast<size_t>(ndev), 0);
  for (int r = 0; r < ndev; ++r) {
    c->devices.push_back(devlist ? devlist[r] : r);
    comms[r] = new Comm{c, r};
  }
  return kSuccess;
}
int ncclCommDestroy(void* comm) {
  delete static_cast<Comm*>(comm);
  return kSuccess;
}
int ncclGroupStart() {
  ++t_group_depth;
  return kSuccess;
}
int ncclGroupEnd() {
  if (t_group_depth == 0) return kInvalidUsage;
  --t_group_depth;
  return kSuccess;
}
const char* ncclGetErrorString(int r) {
  switch (r) {
    case kSuccess: return "no error";
    case kInvalidArgument: return "invalid argument (emulated NCCL)";
    case kInvalidUsage:
      return "invalid usage (emulated NCCL: one thread drives several ranks outside ncclGroupStart/End, or a "
             "captured all-reduce)";
    default: return "unhandled error (emulated NCCL)";
  }
}

int ncclAllReduce(const void* send, void* recv, size_t count, int dtype, int op, void* comm, cudaStream_t stream) {
  auto* cm = static_cast<Comm*>(comm);
  if (!cm || dtype != kFloat32 || op != kSum) return kInvalidArgument;
  Clique& c = *cm->clique;
  // One thread posting several ranks' calls must group them, or NCCL deadlocks.
  if (c.n > 1 && t_group_depth == 0) return kInvalidUsage;
  if (attnsweep::emu::is_capturing(stream)) return kInvalidUsage;
  if (!attnsweep::emu::is_device_range(send, count * 4) || !attnsweep::emu::is_device_range(recv, count * 4))
    return kInvalidArgument;
  const size_t idx = c.next[static_cast<size_t>(cm->rank)]++;
  while (c.base + c.rounds.size() <= idx) {
    auto r = std::make_shared<Round>();
    for (int i = 0; i < c.n; ++i) r->arrived.push_back(std::make_shared<Token>());
    r->staged.resize(static_cast<size_t>(c.n));
    c.rounds.push_back(r);
  }
  std::shared_ptr<Round> round = c.rounds[idx - c.base];
  const int rank = cm->rank;
  auto* s = static_cast<const float*>(send);
  auto* d = static_cast<float*>(recv);
  // Arrive: stage this rank's input once its stream's earlier work is done.
  if (attnsweep::emu::enqueue(stream, "ncclAllReduce (arrive)", [round, rank, s, count] {
        round->staged[static_cast<size_t>(rank)].assign(s, s + count);
        round->arrived[static_cast<size_t>(rank)]->done = true;
      }) != cudaSuccess)
    return 1;
  // Leave: when every rank arrived, this rank's sum in rank order.
  if (attnsweep::emu::enqueue(
          stream, "ncclAllReduce (wait for every rank)",
          [round, d, count] {
            for (size_t i = 0; i < count; ++i) {
              float acc = 0.0f;
              for (auto& v : round->staged) acc += v.size() == count ? v[i] : 0.0f;
              d[i] = acc;
            }
          },
          round->arrived) != cudaSuccess)
    return 1;
  // Rounds every rank has posted are no longer looked up.
  while (!c.rounds.empty()) {
    bool all = true;
    for (size_t r = 0; r < c.next.size(); ++r) all = all && c.next[r] > c.base;
    if (!all) break;
    c.rounds.erase(c.rounds.begin());
    ++c.base;
  }
  return kSuccess;
}

}  // extern "C"
