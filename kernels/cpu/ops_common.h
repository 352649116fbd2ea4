// What the CPU op family files of kernels/ops.h share (kernels/cpu/matmul.cpp,
// layernorm.cpp, elementwise.cpp, pooling.cpp, losses.cpp, embedding.cpp, optimizer.cpp:
// one file per family, each beside the CUDA file of the same name in kernels/cuda/;
// kernels/CMakeLists.txt ATTNSWEEP_CPU_OP_FAMILIES). Internal to kernels/cpu.
// Conventions of every family: row-parallel loops use OpenMP with static schedules; every
// reduction across rows (dweight, dbias, dwte, ...) runs serially in row order, or in
// fixed blocks of rows added in block order (LayerNorm, the fused layer), so that
// results do not depend on the thread count.
// Each family file starts with #pragma GCC optimize("no-trapping-math") before its
// headers (we never read the FP exception flags; GCC then if-converts the clamps of
// cpu::fast_expf, see the GELU in elementwise.cpp), and kernels/CMakeLists.txt compiles
// each with -fno-math-errno (see adamw_span in optimizer.cpp): the flags the one file
// they came from had, so that each loop compiles as it did.
#pragma once

// Row passes compiled for AVX-512 / AVX2 / baseline and picked at load time (the
// project's baseline is x86-64 SSE2), as in kernels/cpu/attention.cpp.
#define OPS_ROW_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
