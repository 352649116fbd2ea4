#!/usr/bin/env python3
"""PyTorch baselines for bench/attention_gpu.cpp, same shapes (batch * N = 16k tokens,
H * d = 2048), measured on the GPU machine (PyTorch 2.11, H200):

  sdpa_flash   scaled_dot_product_attention restricted to the FlashAttention-2 backend,
               bf16, forward and forward+backward
  eager        the element-wise formulas materialised: P = phi(Q K^T / sqrt(d)), O = P V
               (poly3 inv_sqrt_n, relu inv_n), bf16 and fp32
  compiled     torch.compile of the eager function (N <= 4096, d = 64: compile time)

FLOPs as in attention_gpu.cpp: forward 4 B H N^2 d, backward 2.5x forward; the
fwd+bwd column is 3.5x forward over the fwd+bwd time. Prints "SKIPPED: ..." and exits 0
without torch or a CUDA device. Usage: attention_gpu_torch.py [--quick] [--no-compile]
[--sdpa-only] (--sdpa-only: the sdpa_flash rows only, bf16 and fp16: the baseline of
attention_gpu --mma, issue #19)
"""
import math
import sys
import time


def main():
    quick = "--quick" in sys.argv
    use_compile = "--no-compile" not in sys.argv
    sdpa_only = "--sdpa-only" in sys.argv
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        print("SKIPPED: no torch")
        return 0
    if not torch.cuda.is_available():
        print("SKIPPED: no CUDA device")
        return 0
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:
        SDPBackend = sdpa_kernel = None

    dev = torch.device("cuda")
    print(f"device: {torch.cuda.get_device_name(0)}, torch {torch.__version__}")

    def timed(fn, budget_s=0.25, max_reps=20):
        fn()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        total, reps = 0.0, 0
        while reps < max_reps and (reps < 2 or total < budget_s * 1e3):
            start.record()
            fn()
            end.record()
            end.synchronize()
            total += start.elapsed_time(end)
            reps += 1
        return total / reps

    def phi(kind, s, n):
        if kind == "poly3_inv_sqrt_n":
            return s * s * s / math.sqrt(n)
        return torch.relu(s) / n  # relu_inv_n

    def eager(kind, q, k, v):
        s = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
        return phi(kind, s, k.shape[-2]) @ v

    compiled = {}
    print(f"{'impl':<10} {'dtype':<5} {'d':>4} {'N':>6} {'B':>3} {'H':>3} {'activation':<18} "
          f"{'fwd_ms':>9} {'fwd_TF':>8} {'fb_ms':>9} {'fb_TF':>8}")

    def report(impl, dtype, d, n, b, h, act, fn_fwd, fn_fb):
        flop = 4.0 * b * h * n * n * d
        try:
            f_ms = timed(fn_fwd)
            fb_ms = timed(fn_fb)
            print(f"{impl:<10} {dtype:<5} {d:>4} {n:>6} {b:>3} {h:>3} {act:<18} "
                  f"{f_ms:9.3f} {flop / (f_ms * 1e9):8.2f} {fb_ms:9.3f} {3.5 * flop / (fb_ms * 1e9):8.2f}",
                  flush=True)
        except Exception as e:  # OOM at large N for the materialising versions, compile errors
            print(f"{impl:<10} {dtype:<5} {d:>4} {n:>6} {b:>3} {h:>3} {act:<18} failed: "
                  f"{type(e).__name__}: {str(e).splitlines()[0][:100]}", flush=True)
        torch.cuda.empty_cache()

    lengths = [1024, 4096] if quick else [1024, 4096, 16384]
    for d in (64, 128):
        for n in lengths:
            b, h = 16384 // n, 2048 // d
            dtypes = ((("bf16", torch.bfloat16), ("fp16", torch.float16)) if sdpa_only else
                      (("bf16", torch.bfloat16), ("fp32", torch.float32)))
            for dtype_name, dtype in dtypes:
                q, k, v, do = (torch.randn(b, h, n, d, device=dev, dtype=dtype, requires_grad=True)
                               for _ in range(4))
                do = do.detach()
                if dtype != torch.float32 and sdpa_kernel is not None:
                    def sdpa():
                        with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
                            return F.scaled_dot_product_attention(q, k, v)

                    def sdpa_fb():
                        q.grad = k.grad = v.grad = None
                        sdpa().backward(do)

                    def sdpa_fwd():
                        with torch.no_grad():
                            return sdpa()

                    report("sdpa_flash", dtype_name, d, n, b, h, "softmax", sdpa_fwd, sdpa_fb)
                for act in (() if sdpa_only else ("poly3_inv_sqrt_n", "relu_inv_n")):
                    def fwd(fn=eager, act=act):
                        with torch.no_grad():
                            return fn(act, q, k, v)

                    def fb(fn=eager, act=act):
                        q.grad = k.grad = v.grad = None
                        fn(act, q, k, v).backward(do)

                    report("eager", dtype_name, d, n, b, h, act, fwd, fb)
                    if use_compile and d == 64 and n <= 4096:
                        if act not in compiled:
                            compiled[act] = torch.compile(eager)
                        report("compiled", dtype_name, d, n, b, h, act,
                               lambda c=compiled[act], act=act: fwd(c, act),
                               lambda c=compiled[act], act=act: fb(c, act))
                del q, k, v, do
                torch.cuda.empty_cache()
    print("fwd_TF, fb_TF: TFLOP/s (fb: forward+backward, 3.5x forward FLOPs)")
    return 0


if __name__ == "__main__":
    t0 = time.time()
    rc = main()
    print(f"elapsed {time.time() - t0:.1f} s")
    sys.exit(rc)
