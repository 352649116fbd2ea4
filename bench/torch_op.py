"""torch.ops.attnsweep.attention against the plain PyTorch composite (matmul, phi, matmul)
on the same torch, machine and threads: forward + backward time and peak memory, at N
1024 and 4096, d 64, B*H 8, for softmax, s^3/sqrt(N) and relu/N (docs/performance.md).

    PYTHONPATH=build/python /usr/bin/python3 bench/torch_op.py [--threads 2] [--reps 3]

Each (implementation, activation, N) runs in a process of its own: its peak memory is the
peak resident set of that process above what it held once the inputs were made (the
composite holds S, phi(S) and their gradients, [B*H, N, N] float32 each; the op holds
none). Time: the median of --reps forward + backward calls after one warm-up."""
import argparse
import json
import math
import os
import resource
import subprocess
import sys
import time

B, H, D = 2, 4, 64
SPECS = {"softmax": ("softmax", 1, "none"), "s3/sqrtN": ("poly", 3, "inv_sqrt_n"), "relu/N": ("relu", 1, "inv_n")}


def rss_mib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def composite(q, k, v, act, degree, scale):
    import torch
    n = k.shape[2]
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if act == "softmax":
        p = torch.softmax(s, dim=-1)
    else:
        c = {"none": 1.0, "inv_sqrt_n": 1 / math.sqrt(n), "inv_n": 1 / n}[scale]
        p = c * (s ** degree if act == "poly" else torch.relu(s))
    return p @ v


def child(impl, name, n, threads, reps):
    import torch
    torch.set_num_threads(threads)
    act, degree, scale = SPECS[name]
    g = torch.Generator().manual_seed(0)
    q, k, v, do = (torch.randn(B, H, n, D, generator=g) for _ in range(4))
    for t in (q, k, v):
        t.requires_grad_(True)
    if impl == "attnsweep":
        import attnsweep_torch
        f = lambda: attnsweep_torch.attention(q, k, v, act, degree=degree, scale=scale)[0]  # noqa: E731
    else:
        f = lambda: composite(q, k, v, act, degree, scale)  # noqa: E731
    base = rss_mib()
    times = []
    for r in range(reps + 1):
        t0 = time.perf_counter()
        f().backward(do)
        times.append(time.perf_counter() - t0)
        q.grad = k.grad = v.grad = None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB -> MiB
    print(json.dumps({"s": sorted(times[1:])[len(times[1:]) // 2], "peak_mib": peak - base}))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--child", nargs=3)
    a = ap.parse_args()
    if a.child:
        return child(a.child[0], a.child[1], int(a.child[2]), a.threads, a.reps)
    import torch
    print(f"torch {torch.__version__}, {a.threads} threads, B*H {B * H}, d {D}, forward + backward, median of "
          f"{a.reps}; {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")
    nn_mib = lambda n: B * H * n * n * 4 / 2**20  # noqa: E731
    print(f"{'phi':<10}{'N':>6}{'composite s':>13}{'attnsweep s':>13}{'time ratio':>12}"
          f"{'composite MiB':>15}{'attnsweep MiB':>15}{'saved MiB':>11}{'N x N MiB':>11}")
    for n in (1024, 4096):
        for name in SPECS:
            r = {}
            for impl in ("composite", "attnsweep"):
                out = subprocess.run([sys.executable, __file__, "--threads", str(a.threads), "--reps", str(a.reps),
                                      "--child", impl, name, str(n)], capture_output=True, text=True,
                                     env=dict(os.environ, OMP_NUM_THREADS=str(a.threads)))
                if out.returncode != 0:
                    sys.exit(f"{impl} {name} N {n}: {out.stderr}")
                r[impl] = json.loads(out.stdout.strip().splitlines()[-1])
            c, o = r["composite"], r["attnsweep"]
            print(f"{name:<10}{n:>6}{c['s']:>13.4f}{o['s']:>13.4f}{c['s'] / o['s']:>12.2f}"
                  f"{c['peak_mib']:>15.0f}{o['peak_mib']:>15.0f}{c['peak_mib'] - o['peak_mib']:>11.0f}"
                  f"{nn_mib(n):>11.0f}", flush=True)


if __name__ == "__main__":
    main()
