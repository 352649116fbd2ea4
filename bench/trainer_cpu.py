"""PyTorch baseline of bench/trainer_cpu.cpp: the same model (pre-LN ViT, tanh GELU,
10 classes, AdamW + clipping, random inputs, float32) on one of these cells:
  reference: patch 4 -> N = 49 tokens of 16 pixels, mean-pool, dim 64, 4 layers, 4 heads,
             MLP x4, batch 128
  listops:   N = 512 token ids of a 16-symbol vocabulary (embedding table), CLS token,
             same blocks, batch 32 (no padding)
  image16, image196: the reference model at patch 7 (N = 16 of 49 pixels) or patch 2
             (N = 196 of 4)
  large:     patch 2 (N = 196), dim 256, 6 layers, 4 heads, MLP x4, batch 128
  listops2000: LRA's ListOps at N = 2000 as the listops task trains it: token ids (vocab
             16, pad id 0), CLS token, 2 layers, dim 64, 2 heads, MLP x4, batch 32, with
             real padding: sample b has 500 + (b * 7919) % 1501 real tokens (the lengths
             of trainer_cpu.cpp), a key padding mask in every attention (the CLS token is
             always attended) and, without CLS (POOL=mean in the environment), a masked
             mean pool
  paperB1000: paper B's one-layer read-out at L = 1000 prompt tokens (tokens of width
             C = 6, one head, Q/K/V without bias, the query last, prediction = last
             coordinate of the query's output, MSE), plain SGD lr 1e-3, no clipping,
             batch 128
Prints one line per cell:
  pytorch<version>[-compiled],<activation>[-<cell>],<threads>,<samples/s>,<s/step>,<samples per CPU-second>,
  <precision>,<wall ms/step>,<kernel ms/step>,<host ms/step>,<attention>
(the last five appended for bench/gpu-check.sh stage 8; readers of the first six are
unchanged). precision: fp32, or bf16 with --amp bf16. attention: math (softmax of
q k^T, materialised) or sdpa (F.scaled_dot_product_attention, PyTorch >= 2).
usage: trainer_cpu.py [THREADS] [STEPS] [--cell CELL[,CELL...]] [--compile] [--device DEVICE]
                      [--amp bf16] [--attn math|sdpa] [--kernel-time [STEPS]]
With --device cuda (bench/gpu-check.sh): the same model in eager mode on the GPU, FP32
matmuls (TF32 off, as attnsweep's pedantic cuBLAS), timed with a synchronize; prints
pytorch<version>[-compiled]-cuda,softmax[-<cell>],<device>,...
--amp bf16: torch.autocast(dtype=torch.bfloat16) around the forward and the loss, fp32
master weights and optimizer (what a user of mixed precision runs).
--kernel-time [K]: after the timed steps, K more (default 5) under torch.profiler; the
kernel ms is the sum of the GPU activities' durations (kernels, copies, memsets) / K and
host = wall - kernel; without a GPU (or without the flag) both read nan.
Several cells (comma-separated) run one after the other in one process (one import and
CUDA start for all; each line is printed when its cell is done).
For rehearsing bench/gpu-check.sh on a CPU only (REHEARSE=1; the figures then mean
nothing): --warmup N (default: ATTNSWEEP_BENCH_WARMUP, else 3) and ATTNSWEEP_BENCH_BATCH (overrides
the cells' batch).
Runs with any PyTorch: Debian's 1.13 (/usr/bin/python3) or a current one in a venv
(--compile needs torch.compile, --attn sdpa F.scaled_dot_product_attention: PyTorch >= 2;
without it --attn sdpa falls back to math and says so in the last field)."""
import argparse
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

CELLS = ("reference", "listops", "image16", "image196", "large", "listops2000", "paperB1000")
# B, N, P (features per token), C, L, H, K (classes), V (vocab), MLP ratio
SHAPES = {"reference": (128, 49, 16, 64, 4, 4, 10, 0, 4), "listops": (32, 512, 1, 64, 4, 4, 10, 16, 4),
          "image16": (128, 16, 49, 64, 4, 4, 10, 0, 4), "image196": (128, 196, 4, 64, 4, 4, 10, 0, 4),
          "large": (128, 196, 4, 256, 6, 4, 10, 0, 4), "listops2000": (32, 2000, 1, 64, 2, 2, 10, 16, 4),
          "paperB1000": (128, 1001, 6, 6, 1, 1, 0, 0, 0)}
PAD_ID = 0  # experiments/listops.h kListOpsPad


def listops2000_length(b):
    return 500 + (b * 7919) % 1501


ap = argparse.ArgumentParser()
ap.add_argument("threads", type=int, nargs="?", default=2)
ap.add_argument("steps", type=int, nargs="?", default=30)
ap.add_argument("--cell", default="reference", help="one of " + ", ".join(CELLS) + "; or several, comma-separated")
ap.add_argument("--compile", action="store_true")
ap.add_argument("--device", default="cpu")
ap.add_argument("--amp", choices=("bf16",), default=None)
ap.add_argument("--attn", choices=("math", "sdpa"), default="math")
ap.add_argument("--kernel-time", type=int, nargs="?", const=5, default=0)
ap.add_argument("--warmup", type=int, default=int(os.environ.get("ATTNSWEEP_BENCH_WARMUP") or 3))
a = ap.parse_args()
cells = a.cell.split(",")
for c in cells:
    if c not in CELLS:
        ap.error(f"--cell: expected one of {', '.join(CELLS)}, got {c}")
if a.compile and not hasattr(torch, "compile"):
    sys.exit(f"trainer_cpu.py: --compile needs torch.compile (PyTorch >= 2), this is {torch.__version__}")
device = a.device
dev_type = torch.device(device).type
torch.set_num_threads(a.threads)
if dev_type != "cpu":
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
have_sdpa = hasattr(F, "scaled_dot_product_attention")
attn_impl = "sdpa" if a.attn == "sdpa" and have_sdpa else "math"


def attention(q, k, v, mask):
    """softmax(q k^T / sqrt(d)) v; mask (B, 1, 1, Nk) bool, True = attend, or None."""
    if attn_impl == "sdpa":
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    return torch.softmax(s, dim=-1) @ v


class Block(nn.Module):
    def __init__(self, C, H, R):
        super().__init__()
        self.C, self.H = C, H
        self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.qkv, self.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.fc, self.fcproj = nn.Linear(C, R * C), nn.Linear(R * C, C)

    def forward(self, h, mask):
        b, t, _ = h.shape
        C, H = self.C, self.H
        q, k, v = self.qkv(self.ln1(h)).reshape(b, t, 3, H, C // H).permute(2, 0, 3, 1, 4)
        o = attention(q, k, v, mask)
        h = h + self.proj(o.transpose(1, 2).reshape(b, t, C))
        return h + self.fcproj(F.gelu(self.fc(self.ln2(h)), approximate="tanh"))


class ViT(nn.Module):
    def __init__(self, cell):
        super().__init__()
        _, N, P, C, L, H, K, V, R = SHAPES[cell]
        self.ids = V > 0
        self.padded = cell == "listops2000"
        self.use_cls = self.ids and os.environ.get("POOL", "cls") != "mean"
        self.C = C
        self.embed = nn.Embedding(V, C) if self.ids else nn.Linear(P, C)
        self.cls = nn.Parameter(torch.randn(1, 1, C) * 0.02) if self.use_cls else None
        self.pos = nn.Parameter(torch.randn(N + (1 if self.use_cls else 0), C) * 0.02)
        self.blocks = nn.ModuleList(Block(C, H, R) for _ in range(L))
        self.lnf, self.head = nn.LayerNorm(C), nn.Linear(C, K)

    def forward(self, x):
        h = self.embed(x)
        real = (x != PAD_ID) if self.padded else None  # (B, N) bool
        if self.use_cls:
            h = torch.cat([self.cls.expand(h.shape[0], 1, self.C), h], dim=1)
            if real is not None:
                real = torch.cat([torch.ones_like(real[:, :1]), real], dim=1)
        h = h + self.pos
        mask = real[:, None, None, :] if real is not None else None
        for blk in self.blocks:
            h = blk(h, mask)
        h = self.lnf(h)
        if self.use_cls:
            pooled = h[:, 0]
        elif real is not None:  # masked mean over the real tokens
            m = real.unsqueeze(-1).to(h.dtype)
            pooled = (h * m).sum(dim=1) / m.sum(dim=1)
        else:
            pooled = h.mean(dim=1)
        return self.head(pooled)


class Readout(nn.Module):
    """Paper B's read-out (worker/model/model.h Head::readout): one attention layer on the raw
    tokens, one head of width C, no bias; prediction = last coordinate of the query's
    output."""

    def __init__(self, C):
        super().__init__()
        self.C = C
        self.qkv = nn.Linear(C, 3 * C, bias=False)

    def forward(self, x):
        C = self.C
        qkv = self.qkv(x)  # every token's, as ours (the unused parts are cheap)
        q = qkv[:, -1:, :C].unsqueeze(1)  # (B, 1, 1, C)
        k = qkv[:, :-1, C:2 * C].unsqueeze(1)
        v = qkv[:, :-1, 2 * C:].unsqueeze(1)
        return attention(q, k, v, None)[:, 0, 0, -1]


def sync():
    if dev_type == "cuda":
        torch.cuda.synchronize()


def gpu_ms(prof):
    """Summed duration of the profiled GPU activities (kernels, copies, memsets), ms."""
    total = 0.0
    for e in prof.events():
        if str(e.device_type).endswith("CUDA"):  # DeviceType.CUDA, whichever module exports the enum
            total += e.time_range.elapsed_us()
    return total / 1e3


def run_cell(cell):
    torch.manual_seed(0)
    B, N, P, C, L, H, K, V, R = SHAPES[cell]
    B = int(os.environ.get("ATTNSWEEP_BENCH_BATCH") or B)
    readout = cell == "paperB1000"
    model = (Readout(C) if readout else ViT(cell)).to(device)
    if readout:  # paper B: plain SGD, constant lr, no clipping, no decay
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)
    if V > 0:
        x = torch.randint(1 if cell == "listops2000" else 0, V, (B, N))
        if cell == "listops2000":
            for b in range(B):
                x[b, listops2000_length(b):] = PAD_ID
    else:
        x = torch.randn(B, N, P)
    x = x.to(device)
    y = (torch.randn(B) if readout else torch.randint(0, K, (B,))).to(device)
    fwd = torch.compile(model) if a.compile else model
    loss_fn = F.mse_loss if readout else F.cross_entropy

    def step():
        opt.zero_grad(set_to_none=True)
        if a.amp:
            with torch.autocast(device_type=dev_type, dtype=torch.bfloat16):
                out = fwd(x)
            loss = loss_fn(out.float(), y)
        else:
            loss = loss_fn(fwd(x), y)
        loss.backward()
        if not readout:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    for _ in range(a.warmup):  # warm-up (and, with --compile, the compilation)
        step()
    sync()
    c0, t0 = time.process_time(), time.perf_counter()
    for _ in range(a.steps):
        step()
    sync()
    s, cpu = time.perf_counter() - t0, time.process_time() - c0
    wall_ms = 1e3 * s / a.steps
    kernel_ms = float("nan")
    if a.kernel_time > 0 and dev_type == "cuda":
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(a.kernel_time):
                step()
            sync()
        kernel_ms = gpu_ms(prof) / a.kernel_time
    label = "pytorch" + torch.__version__.split("+")[0] + ("-compiled" if a.compile else "")
    label, where = (label, a.threads) if device == "cpu" else (label + "-cuda", device)
    suffix = "" if cell == "reference" else "-" + cell
    print(f"{label},softmax{suffix},{where},{B * a.steps / s:.1f},{s / a.steps:.4f},{B * a.steps / cpu:.1f},"
          f"{a.amp or 'fp32'},{wall_ms:.4f},{kernel_ms:.4f},{wall_ms - kernel_ms:.4f},{attn_impl}", flush=True)
    del model, opt, fwd, x, y
    if dev_type == "cuda":
        torch.cuda.empty_cache()


for c in cells:
    run_cell(c)
