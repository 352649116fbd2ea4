"""PyTorch baseline for bench/attention_cpu.cpp: the same attention forward + backward
(matmul, phi, matmul, autograd backward), B*H = 32, d = dv = 64, same FLOP convention
(12 BH N^2 d). Prints `pytorch<version>[-compiled],<activation>,<N>,,<seconds>,<GFLOP/s>`
lines. Runs with Debian's /usr/bin/python3 (torch 1.13) or a current PyTorch in a venv
(--compile: the attention function through torch.compile, PyTorch >= 2); threads from
--threads (default 2)."""
import argparse
import math
import os
import time

import torch


def phi(name, s, n):
    if name == "softmax":
        return torch.softmax(s, dim=-1)
    if name == "poly3_inv_sqrt_n":
        return s ** 3 / math.sqrt(n)
    if name == "relu_inv_n":
        return torch.relu(s) / n
    raise ValueError(name)


def attention(name, q, k, v, scale, n):
    s = torch.matmul(q, k.transpose(-1, -2)) * scale
    return torch.matmul(phi(name, s, n), v)


def bench(name, n, compiled, bh=32, d=64, min_total=float(os.environ.get("ATTN_BENCH_SECONDS", "3"))):
    g = torch.Generator().manual_seed(2)
    q = torch.randn(bh, n, d, generator=g, requires_grad=True)
    k = torch.randn(bh, n, d, generator=g, requires_grad=True)
    v = torch.randn(bh, n, d, generator=g, requires_grad=True)
    do = torch.randn(bh, n, d, generator=g)
    scale = 1.0 / math.sqrt(d)

    fn = torch.compile(attention) if compiled else attention

    def step():
        q.grad = k.grad = v.grad = None
        fn(name, q, k, v, scale, n).backward(do)

    step()
    step()
    times = []
    start = time.perf_counter()
    while len(times) < 5 or (time.perf_counter() - start < min_total and len(times) < 200):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    t = min(times)  # best of the repetitions, as in attention_cpu.cpp
    label = "pytorch" + torch.__version__.split("+")[0] + ("-compiled" if compiled else "")
    print(f"{label},{name},{n},,{t:.6f},{12.0 * bh * n * n * d / t * 1e-9:.2f}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("N", type=int, nargs="*", default=[64, 256, 1024])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--compile", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    for n in a.N:
        for name in ("softmax", "poly3_inv_sqrt_n", "relu_inv_n"):
            bench(name, n, a.compile)


if __name__ == "__main__":
    main()
