"""PyTorch 1.13 baseline of bench/trainer_cpu.cpp: the same model (pre-LN ViT, patch 4 ->
N = 49, dim 64, 4 layers, 4 heads, MLP x4, tanh GELU, mean-pool, 10 classes), batch 128,
AdamW + clipping, random inputs, float32. Prints: pytorch,softmax,<threads>,<samples/s>,<s/step>,<samples per CPU-second>
With DEVICE cuda (bench/gpu-check.sh): the same model in eager mode on the GPU, FP32
matmuls (TF32 off, as attnsweep's pedantic cuBLAS), timed with a synchronize; prints
pytorch-cuda,softmax,<device>,...
usage: trainer_cpu.py [THREADS] [STEPS] [DEVICE]"""
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

threads = int(sys.argv[1]) if len(sys.argv) > 1 else 2
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 30
device = sys.argv[3] if len(sys.argv) > 3 else "cpu"
torch.set_num_threads(threads)
if device != "cpu":
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
torch.manual_seed(0)
B, N, P, C, L, H, K = 128, 49, 16, 64, 4, 4, 10


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
        self.embed = nn.Linear(P, C)
        self.pos = nn.Parameter(torch.randn(N, C) * 0.02)
        self.blocks = nn.ModuleList(Block() for _ in range(L))
        self.lnf, self.head = nn.LayerNorm(C), nn.Linear(C, K)

    def forward(self, x):
        h = self.embed(x) + self.pos
        for blk in self.blocks:
            h = blk(h)
        return self.head(self.lnf(h).mean(dim=1))


model = ViT().to(device)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)
x, y = torch.randn(B, N, P, device=device), torch.randint(0, K, (B,), device=device)


def sync():
    if device != "cpu":
        torch.cuda.synchronize()


def step():
    opt.zero_grad(set_to_none=True)
    F.cross_entropy(model(x), y).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()


for _ in range(3):
    step()
sync()
c0, t0 = time.process_time(), time.perf_counter()
for _ in range(steps):
    step()
sync()
s, cpu = time.perf_counter() - t0, time.process_time() - c0
who, where = ("pytorch", threads) if device == "cpu" else ("pytorch-cuda", device)
print(f"{who},softmax,{where},{B * steps / s:.1f},{s / steps:.4f},{B * steps / cpu:.1f}")
