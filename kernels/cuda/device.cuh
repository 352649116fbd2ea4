// The seam between the kernels and the device they run on: a launch and a block's
// dynamic shared memory are written through these two macros, so the same kernels build
// with nvcc for a GPU and as host C++ for the emulated device (emulator/, the build's
// -DATTNSWEEP_CUDA=EMULATE; docs/cuda-emulator.md). The inline PTX is the other seam:
// kernels/cuda/ptx.cuh.
#pragma once

#ifdef ATTNSWEEP_CUDA_EMULATED
// kernel<<<grid, block, smem, stream>>>(args) on the emulated device: the arguments are
// converted and copied at the launch; the launch site names the kernel in its errors.
#define ATTN_LAUNCH(grid, block, smem, stream, ...) \
  ::attnsweep::emu::make_launcher(__VA_ARGS__, grid, block, smem, stream, #__VA_ARGS__, __FILE__, __LINE__)
// The block's dynamic shared memory, exactly the launch's bytes (a read past them is caught).
#define ATTN_DYNAMIC_SHARED(type, name) type* const name = static_cast<type*>(::attnsweep::emu::dynamic_shared())
#else
#define ATTN_LAUNCH(grid, block, smem, stream, ...) __VA_ARGS__<<<grid, block, smem, stream>>>
#define ATTN_DYNAMIC_SHARED(type, name) extern __shared__ __align__(16) type name[]
#endif
