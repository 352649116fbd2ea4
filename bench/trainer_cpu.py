"""PyTorch baseline of bench/trainer_cpu.cpp: the same model (pre-LN ViT, tanh GELU,
10 classes, AdamW + clipping, random inputs, float32) on one of two cells:
  reference: patch 4 -> N = 49 tokens of 16 pixels, mean-pool, dim 64, 4 layers, 4 heads,
             MLP x4, batch 128
  listops:   N = 512 token ids of a 16-symbol vocabulary (embedding table), CLS token,
             same blocks, batch 32
  image16, image196: the reference model at patch 7 (N = 16 of 49 pixels) or patch 2
             (N = 196 of 4)
  large:     patch 2 (N = 196), dim 256, 6 layers, 4 heads, MLP x4, batch 128
Prints: pytorch<version>[-compiled],<activation>[-listops],<threads>,<samples/s>,<s/step>,<samples per CPU-second>
usage: trainer_cpu.py [THREADS] [STEPS] [--cell reference|listops|image16|image196|large] [--compile] [--device DEVICE]
With --device cuda (bench/gpu-check.sh): the same model in eager mode on the GPU, FP32
matmuls (TF32 off, as attnsweep's pedantic cuBLAS), timed with a synchronize; prints
pytorch<version>[-compiled]-cuda,softmax[-<cell>],<device>,...
Runs with any PyTorch: Debian's 1.13 (/usr/bin/python3) or a current one in a venv
(--compile needs torch.compile, PyTorch >= 2)."""
import argparse
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

ap = argparse.ArgumentParser()
ap.add_argument("threads", type=int, nargs="?", default=2)
ap.add_argument("steps", type=int, nargs="?", default=30)
ap.add_argument("--cell", choices=("reference", "listops", "image16", "image196", "large"), default="reference")
ap.add_argument("--compile", action="store_true")
ap.add_argument("--device", default="cpu")
a = ap.parse_args()
device = a.device
torch.set_num_threads(a.threads)
if device != "cpu":
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
torch.manual_seed(0)
listops = a.cell == "listops"
B, N, P, C, L, H, K, V = {"reference": (128, 49, 16, 64, 4, 4, 10, 0), "listops": (32, 512, 1, 64, 4, 4, 10, 16),
                          "image16": (128, 16, 49, 64, 4, 4, 10, 0), "image196": (128, 196, 4, 64, 4, 4, 10, 0),
                          "large": (128, 196, 4, 256, 6, 4, 10, 0)}[a.cell]


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.qkv, self.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.fc, self.fcproj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def forward(self, h):
        b, t, _ = h.shape
        q, k, v = self.qkv(self.ln1(h)).reshape(b, t, 3, H, C // H).permute(2, 0, 3, 1, 4)
        a = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(C // H), dim=-1) @ v
        h = h + self.proj(a.transpose(1, 2).reshape(b, t, C))
        return h + self.fcproj(F.gelu(self.fc(self.ln2(h)), approximate="tanh"))


class ViT(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(V, C) if listops else nn.Linear(P, C)
        self.cls = nn.Parameter(torch.randn(1, 1, C) * 0.02) if listops else None
        self.pos = nn.Parameter(torch.randn(N + (1 if listops else 0), C) * 0.02)
        self.blocks = nn.ModuleList(Block() for _ in range(L))
        self.lnf, self.head = nn.LayerNorm(C), nn.Linear(C, K)

    def forward(self, x):
        h = self.embed(x)
        if listops:
            h = torch.cat([self.cls.expand(h.shape[0], 1, C), h], dim=1)
        h = h + self.pos
        for blk in self.blocks:
            h = blk(h)
        h = self.lnf(h)
        return self.head(h[:, 0] if listops else h.mean(dim=1))


model = ViT().to(device)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)
x = (torch.randint(0, V, (B, N)) if listops else torch.randn(B, N, P)).to(device)
y = torch.randint(0, K, (B,)).to(device)
fwd = torch.compile(model) if a.compile else model


def sync():
    if device != "cpu":
        torch.cuda.synchronize()


def step():
    opt.zero_grad(set_to_none=True)
    F.cross_entropy(fwd(x), y).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()


for _ in range(3):  # warm-up (and, with --compile, the compilation)
    step()
sync()
c0, t0 = time.process_time(), time.perf_counter()
for _ in range(a.steps):
    step()
sync()
s, cpu = time.perf_counter() - t0, time.process_time() - c0
label = "pytorch" + torch.__version__.split("+")[0] + ("-compiled" if a.compile else "")
label, where = (label, a.threads) if device == "cpu" else (label + "-cuda", device)
suffix = "" if a.cell == "reference" else "-" + a.cell
print(f"{label},softmax{suffix},{where},{B * a.steps / s:.1f},{s / a.steps:.4f},{B * a.steps / cpu:.1f}")
