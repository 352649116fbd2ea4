// The arithmetic of a training cell's GEMMs and attention (the `precision` training key,
// experiments/training_keys.cpp):
//   fp32  float32 everywhere (the default; what every result before the key had).
//   bf16  mixed precision: the inputs of the GEMMs (cuBLAS) and of the attention kernels
//         rounded to bfloat16, products accumulated in float32; master weights, gradients,
//         optimizer state, loss, LayerNorm and the softmax statistics stay float32.
//   tf32  float32 tensors, the GEMMs on TF32 tensor cores (cuBLAS's fast-TF32 compute
//         type: 10-bit mantissa products, float32 accumulation); attention float32.
// The CPU trains in fp32 only: a CPU cell with bf16 or tf32 fails with a message that
// names the key (worker/training/trainer.cpp).
#pragma once

#include <stdexcept>
#include <string>

namespace attnsweep {

enum class Precision : int { fp32 = 0, bf16 = 1, tf32 = 2 };

inline const char* precision_name(Precision p) {
  switch (p) {
    case Precision::bf16: return "bf16";
    case Precision::tf32: return "tf32";
    case Precision::fp32: break;
  }
  return "fp32";
}

// "fp32" | "bf16" | "tf32"; anything else throws std::invalid_argument naming the key.
inline Precision parse_precision(const std::string& s) {
  if (s == "fp32") return Precision::fp32;
  if (s == "bf16") return Precision::bf16;
  if (s == "tf32") return Precision::tf32;
  throw std::invalid_argument("precision: expected fp32, bf16 or tf32, got \"" + s + "\"");
}

}  // namespace attnsweep
