"""torch.ops.attnsweep.attention on a GPU (docs/pytorch.md): run by bench/gpu-check.sh's
stage 12 where PyTorch has CUDA and the op was built with its CUDA kernels.

1. For every activation of the registry, plain, masked and causal: the op's forward,
   backward and norms on the GPU against the float64 composite (on the CPU), in float32
   (bound 1e-4, as the CPU op's test) and in bfloat16 (the composite from the same
   bf16-rounded inputs; bound 3e-2: the outputs and gradients are stored in bf16, whose
   unit roundoff is 2^-8 = 3.9e-3, and the kernels round P or dS to bf16 before their
   products on the tensor-core path: a few units of it, and a wrong term gives errors of
   order 1).
2. Forward + backward at N 1024 and 4096, d 64, B*H 8 for softmax, s^3/sqrt(N) and relu/N:
   time (CUDA events) and peak memory against the composite (matmul, phi, matmul) on the
   same GPU; the op's peak must be below the composite's by at least one [B,H,N,N] float32
   matrix. Times are printed, never asserted.

DEVICE=cpu runs both on the CPU op (a rehearsal of the script: part 1 is then the CPU
op's check again, part 2 measures the process's peak RSS growth instead). Exit 0 = passed."""
import os
import resource
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from attention_torch import inputs, reference, rel_err  # noqa: E402 (the float64 composite)

import attnsweep_torch  # noqa: E402

DEV = torch.device(os.environ.get("DEVICE", "cuda"))
CUDA = DEV.type == "cuda"
failures = 0


def report(ok, what):
    global failures
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    failures += not ok


# 1. Correctness on the device, float32 and bfloat16.
rng = np.random.default_rng(3)
specs = attnsweep_torch.registry_specs()
dtypes = [(torch.float32, 1e-4), (torch.bfloat16, 3e-2)] if CUDA else [(torch.float32, 1e-4)]
for dtype, bound in dtypes:
    worst = 0.0
    for B, H, Nq, Nk, d, masked, causal in ((2, 2, 33, 33, 64, False, False), (2, 2, 17, 40, 64, True, False),
                                            (1, 2, 70, 70, 32, False, True)):
        q, k, v, do, mask = inputs(rng, B, H, Nq, Nk, d, d, masked)
        q, k, v, do = (t.to(dtype).float() for t in (q, k, v, do))  # the values the device sees
        for act, degree, scale in specs:
            qg, kg, vg = (t.to(DEV, dtype, copy=True).requires_grad_(True) for t in (q, k, v))
            m = mask.to(DEV) if mask is not None else None
            out, attn, jac = attnsweep_torch.attention(qg, kg, vg, act, degree=degree, scale=scale, causal=causal,
                                                       key_mask=m)
            out.backward(do.to(DEV, dtype))
            ref = reference(act, degree, scale, *(t.double() for t in (q, k, v, do)),
                            mask.double() if mask is not None else None, causal)
            got = {"o": out, "dq": qg.grad, "dk": kg.grad, "dv": vg.grad, "attn_fro": attn, "jac_fro": jac}
            for name, x in got.items():
                e = rel_err(x.detach().double().cpu().numpy(), ref[name])
                worst = max(worst, e)
                if not e <= bound:
                    report(False, f"{dtype} {act}:{degree}:{scale} Nq{Nq} Nk{Nk} mask={masked} causal={causal}: "
                                  f"{name} relative error {e:.3g} > {bound}")
            if out.device != DEV or out.dtype != dtype or attn.dtype != torch.float64:
                report(False, f"{dtype} {act}: out on {out.device} as {out.dtype}, norms {attn.dtype}")
    report(failures == 0, f"{DEV} {dtype}: forward, backward and norms of {len(specs)} specs x 3 shapes equal the "
                          f"float64 composite (worst relative error {worst:.2g}, bound {bound})")


# 2. Time and peak memory against the composite.
def composite(q, k, v, act, degree, scale):
    n = k.shape[2]
    s = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    c = {"inv_sqrt_n": n ** -0.5, "inv_n": 1.0 / n, "none": 1.0}[scale]
    p = torch.softmax(s, -1) if act == "softmax" else (s ** degree * c if act == "poly" else torch.relu(s) * c)
    return p @ v


def measure(fn, q, k, v, do):
    qg, kg, vg = (t.clone().requires_grad_(True) for t in (q, k, v))
    if CUDA:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn(qg, kg, vg).backward(do)
        b.record()
        torch.cuda.synchronize()
        return a.elapsed_time(b), (torch.cuda.max_memory_allocated() - base) / 2**20
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    fn(qg, kg, vg).backward(do)
    return (time.perf_counter() - t0) * 1e3, (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0) / 2**10


sizes = (1024, 4096) if CUDA else (256, 1024)
for n in sizes:
    for act, degree, scale in (("softmax", 1, "none"), ("poly", 3, "inv_sqrt_n"), ("relu", 1, "inv_n")):
        q, k, v, do = (torch.randn(2, 4, n, 64, device=DEV, dtype=torch.float32) for _ in range(4))
        ours = lambda a, b, c: attnsweep_torch.attention(a, b, c, act, degree=degree, scale=scale)[0]  # noqa: E731
        theirs = lambda a, b, c: composite(a, b, c, act, degree, scale)  # noqa: E731
        for f in (ours, theirs):
            measure(f, q, k, v, do)  # warm-up (and, on the CPU, the RSS high-water mark)
        t_op, m_op = measure(ours, q, k, v, do)
        t_c, m_c = measure(theirs, q, k, v, do)
        nn_mib = 2 * 4 * n * n * 4 / 2**20
        print(f"N {n} {act}:{degree}:{scale}: op {t_op:.2f} ms, peak {m_op:.0f} MiB; composite {t_c:.2f} ms, "
              f"peak {m_c:.0f} MiB; time ratio composite/op {t_c / t_op:.2f}; one [B,H,N,N] matrix {nn_mib:.0f} MiB",
              flush=True)
        if CUDA and n == 4096:
            report(m_op <= m_c - nn_mib, f"N 4096 {act}: the op's peak {m_op:.0f} MiB is below the composite's "
                                         f"{m_c:.0f} MiB by at least one N x N matrix ({nn_mib:.0f} MiB)")
sys.exit(1 if failures else 0)
