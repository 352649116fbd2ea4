// The device scratch the CUDA kernels take from their workspace (AttentionCudaWorkspace),
// and which attention path a shape takes, declared once as host code with no CUDA
// header: each call's pieces are a layout carved from one allocation (a Carver: a sizing
// pass over a null base gives the bytes, the real pass the pointers). The kernels
// (kernels/cuda/) reserve and carve by these; the CUDA backend's declared memory
// (worker/model/device_memory.h) sizes the workspace by the same functions.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#if defined(ATTNSWEEP_CUDA_EMULATED)
// The emulated device's record of a carved piece and the guard after it (emulator/runtime.cpp).
extern "C" void attnsweep_emu_carved(const void* piece, size_t bytes, size_t guard, int first);
#endif

namespace attnsweep {

// Carves 256-byte aligned pieces out of one allocation: first a sizing pass (base ==
// nullptr, every pointer null), then the real one. On the emulated device each piece is
// followed by 256 bytes more, and the device is told where each piece ends: a kernel that
// reaches past its piece into the next (which no allocation's guard would see) then fails
// in a watched block (docs/cuda-emulator.md, "memcheck").
class Carver {
 public:
#if defined(ATTNSWEEP_CUDA_EMULATED)
  static constexpr size_t kGuardBytes = 256;
#else
  static constexpr size_t kGuardBytes = 0;
#endif
  explicit Carver(char* base) : base_(base) {}
  template <class T>
  T* take(size_t count) {
    T* p = base_ ? reinterpret_cast<T*>(base_ + used_) : nullptr;
    const size_t bytes = count * sizeof(T), taken = (bytes + 255) / 256 * 256 + kGuardBytes;
#if defined(ATTNSWEEP_CUDA_EMULATED)
    if (base_) attnsweep_emu_carved(p, bytes, taken - bytes, used_ == 0);
#endif
    used_ += taken;
    return p;
  }
  size_t used() const {
    return used_;
  }

 private:
  char* base_;
  size_t used_ = 0;
};

// The workspace at `base` is handed to a new user (AttentionCudaWorkspace::reserve): the
// guards of the layout carved from it last go, since a kernel may take it whole, without
// a Carver (kernels/cuda/reduce.cuh's column sums).
inline void workspace_handed_over([[maybe_unused]] char* base) {
#if defined(ATTNSWEEP_CUDA_EMULATED)
  if (base) attnsweep_emu_carved(base, 0, 0, 1);
#endif
}

// The bytes of a scratch layout S for these arguments (S::carve's sizing pass).
template <class S, class... A>
size_t scratch_bytes(const A&... a) {
  Carver sizing(nullptr);
  S::carve(sizing, a...);
  return sizing.used();
}

// The head widths the fused attention kernels take (attention_cuda_fused_supported: also
// d == dv); other widths run the materialising path, which holds the score matrices.
constexpr bool attention_fused_head_width(int64_t d) {
  return d == 16 || d == 32 || d == 64 || d == 128;
}

// A fused or tensor-core attention forward (forward_args): per query row its two norm
// sums, and the key mask's prefix counts.
struct AttentionFwdScratch {
  double *row_attn, *row_jac;
  int32_t* prefix;
  static AttentionFwdScratch carve(Carver& c, int64_t B, int64_t H, int64_t Nq, int64_t Nk) {
    const auto rows = static_cast<size_t>(B * H * Nq);
    AttentionFwdScratch s;
    s.row_attn = c.take<double>(rows);
    s.row_jac = c.take<double>(rows);
    s.prefix = c.take<int32_t>(static_cast<size_t>(B * Nk));
    return s;
  }
};

// Its backward (backward_args): D_i = dO_i . O_i per query row, and the prefix counts.
struct AttentionBwdScratch {
  float* dsum;
  int32_t* prefix;
  static AttentionBwdScratch carve(Carver& c, int64_t B, int64_t H, int64_t Nq, int64_t Nk) {
    AttentionBwdScratch s;
    s.dsum = c.take<float>(static_cast<size_t>(B * H * Nq));
    s.prefix = c.take<int32_t>(static_cast<size_t>(B * Nk));
    return s;
  }
};

// The materialising forward (attention_forward_cuda_ref): the score matrix, the norm sums
// per row, the prefix counts.
struct AttentionRefFwdScratch {
  float* S;
  double *row_attn, *row_jac;
  int32_t* prefix;
  static AttentionRefFwdScratch carve(Carver& c, int64_t B, int64_t H, int64_t Nq, int64_t Nk) {
    const auto rows = static_cast<size_t>(B * H * Nq);
    AttentionRefFwdScratch s;
    s.S = c.take<float>(rows * static_cast<size_t>(Nk));
    s.row_attn = c.take<double>(rows);
    s.row_jac = c.take<double>(rows);
    s.prefix = c.take<int32_t>(static_cast<size_t>(B * Nk));
    return s;
  }
};

// Its backward: the scores and dP, the prefix counts.
struct AttentionRefBwdScratch {
  float *S, *dP;
  int32_t* prefix;
  static AttentionRefBwdScratch carve(Carver& c, int64_t B, int64_t H, int64_t Nq, int64_t Nk) {
    const auto scores = static_cast<size_t>(B * H * Nq * Nk);
    AttentionRefBwdScratch s;
    s.S = c.take<float>(scores);
    s.dP = c.take<float>(scores);
    s.prefix = c.take<int32_t>(static_cast<size_t>(B * Nk));
    return s;
  }
};

// The workspace of one attention call of B H heads, Nq x Nk, head width d, forward or
// backward: the fused path's where it takes d, else the materialising path's.
inline size_t attention_scratch_bytes(int64_t B, int64_t H, int64_t Nq, int64_t Nk, int64_t d, bool backward) {
  if (attention_fused_head_width(d))
    return backward ? scratch_bytes<AttentionBwdScratch>(B, H, Nq, Nk)
                    : scratch_bytes<AttentionFwdScratch>(B, H, Nq, Nk);
  return backward ? scratch_bytes<AttentionRefBwdScratch>(B, H, Nq, Nk)
                  : scratch_bytes<AttentionRefFwdScratch>(B, H, Nq, Nk);
}

// A float64 sum and a count, the result of a reduction on the device (the losses, the
// global norm; kernels/ops_cuda.h).
struct CudaScalarSum {
  double sum;
  long long count;
};

// Softmax cross-entropy over N rows (softmax_crossentropy_sum_cuda): each row's loss and
// whether its argmax is the target; the forward that returns the mean to the host puts
// its result after them.
struct XentScratch {
  double* row_loss;
  int32_t* row_ok;
  CudaScalarSum* result;
  static XentScratch carve(Carver& c, int64_t N, bool with_result) {
    XentScratch s;
    s.row_loss = c.take<double>(static_cast<size_t>(N));
    s.row_ok = c.take<int32_t>(static_cast<size_t>(N));
    s.result = with_result ? c.take<CudaScalarSum>(1) : nullptr;
    return s;
  }
};

// A sum of squares (mse_forward, global_norm: sum_squares_cuda): one float64 partial per
// block of the fixed partition, at most kMaxSumSquaresBlocks blocks, then (a call that
// returns to the host) its result.
inline constexpr int64_t kMaxSumSquaresBlocks = 1024;
struct SumSquaresScratch {
  double* partial;
  CudaScalarSum* result;
  static SumSquaresScratch carve(Carver& c, int64_t blocks, bool with_result) {
    SumSquaresScratch s;
    s.partial = c.take<double>(static_cast<size_t>(blocks));
    s.result = with_result ? c.take<CudaScalarSum>(1) : nullptr;
    return s;
  }
};

// The read-out head in its own algebra (readout_cuda) for K cells of width C, H heads, on
// B prompts: the prompts' gradient terms (train) and losses, then the K loss sums.
struct ReadoutScratch {
  float* gpart;
  double* lpart;
  CudaScalarSum* sums;
  static ReadoutScratch carve(Carver& c, int64_t B, int64_t C, int64_t H, int64_t K, bool train) {
    const int64_t hd = C / H, R = (2 * hd + 1) * C;
    ReadoutScratch s;
    s.gpart = c.take<float>(static_cast<size_t>(train ? K * B * R : 0));
    s.lpart = c.take<double>(static_cast<size_t>(K * B));
    s.sums = c.take<CudaScalarSum>(static_cast<size_t>(K));
    return s;
  }
};

// A column sum of N rows x C columns into `nout` outputs (launch_colsum, the bias and
// LayerNorm gradients): float64 partials per chunk of rows, combined in chunk order; at
// most 256 chunks of at least 64 rows, and at most 2^22 doubles of partials.
struct ColsumChunks {
  int64_t chunks = 0, chunk_rows = 0;
  int64_t scratch_bytes(int64_t C, int64_t nout) const { return nout * chunks * C * int64_t{8}; }
};
inline ColsumChunks colsum_chunks(int64_t N, int64_t C, int64_t nout) {
  if (N <= 0 || C <= 0) return {};
  const int64_t max_chunks = std::clamp<int64_t>((int64_t{1} << 22) / (C * nout), 1, 256);
  ColsumChunks c;
  c.chunks = std::min<int64_t>((N + 63) / 64, max_chunks);
  c.chunk_rows = (N + c.chunks - 1) / c.chunks;
  c.chunks = (N + c.chunk_rows - 1) / c.chunk_rows;
  return c;
}

}  // namespace attnsweep
