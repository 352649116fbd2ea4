"""attnsweep's attention as a PyTorch op (docs/pytorch.md).

    import attnsweep_torch  # PYTHONPATH=<build>/python; registers torch.ops.attnsweep
    out, attn_fro, jac_fro = attnsweep_torch.attention(q, k, v, "poly", degree=3, scale="inv_sqrt_n")

q [B, H, Nq, d], k [B, H, Nk, d], v [B, H, Nk, dv]: contiguous, on one device, float32
(CPU) or float32/bfloat16 (GPU, where the library was built with attnsweep's CUDA kernels);
key_mask [B, Nk] (bool or 0/1 float32, 1 = attend). out is phi(score_scale q k^T) v
[B, H, Nq, dv] (score_scale None: 1/sqrt(d)); attn_fro and jac_fro [B, H] (float64) are
||phi(S)||_F and ||d phi/dS||_F of each batch item and head, without a gradient. The
activations, degrees and scales are the registry's (`attnsweep activations`).
"""
import os

import torch

torch.ops.load_library(os.path.join(os.path.dirname(os.path.abspath(__file__)), "libattnsweep_torch.so"))


def attention(q, k, v, activation, degree=1, scale="none", causal=False, key_mask=None, score_scale=None):
    """torch.ops.attnsweep.attention with keyword arguments: (out, attn_fro, jac_fro)."""
    return torch.ops.attnsweep.attention(q, k, v, activation, degree, str(scale), causal, key_mask, score_scale)


def registry_specs():
    """The registry's test cases as (activation, degree, scale) tuples."""
    out = []
    for s in torch.ops.attnsweep.registry_specs():
        act, degree, scale = s.split(":")
        out.append((act, int(degree), scale))
    return out
