"""A small ViT on Fashion-MNIST in PyTorch, with softmax or ReLU/N attention written out,
or (the cell's key attention = "attnsweep") any activation of attnsweep's registry through
its PyTorch op, whose norms ||phi(S)||_F and ||d phi/dS||_F it logs per layer
(docs/pytorch.md): the example of running your own training code as attnsweep cells
(docs/own-code.md; the grids vit_fmnist.json and vit_fmnist_op.json).

Run by attnsweep's command task (examples/own_code/vit_fmnist.json): the cell's values
come as arguments ("--lr={lr}") and in the config file; it logs with attnsweep_cell
(on the PYTHONPATH attnsweep sets), checkpoints and exits 75 on SIGTERM/SIGUSR1, and
resumes from the checkpoint bit-identically: every batch is drawn from (seed, step) alone,
and the model's and optimizer's state are saved whole. CPU, deterministic.

Data: Debian's dataset-fashion-mnist (/usr/share/datasets/fashion-mnist, or
$ATTNSWEEP_FASHION_MNIST_DIR, as experiments/image.cpp reads it).
"""
import argparse
import gzip
import math
import os
import struct

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import attnsweep_cell as cell


def read_idx(path, count, images):
    """The first `count` images [count, 28, 28] or labels [count] of an IDX file."""
    with gzip.open(path, "rb") as f:
        header = f.read(16 if images else 8)
        n = struct.unpack(">I", header[4:8])[0]
        if count > n:
            raise SystemExit(f"{path}: has {n} samples, {count} asked for (n_train, n_test)")
        size = count * (28 * 28 if images else 1)
        data = np.frombuffer(f.read(size), dtype=np.uint8)
    return data.reshape(count, 28, 28) if images else data


def load(split, count):
    d = os.environ.get("ATTNSWEEP_FASHION_MNIST_DIR") or "/usr/share/datasets/fashion-mnist"
    prefix = "train" if split == "train" else "t10k"
    x = read_idx(os.path.join(d, f"{prefix}-images-idx3-ubyte.gz"), count, True)
    y = read_idx(os.path.join(d, f"{prefix}-labels-idx1-ubyte.gz"), count, False)
    return torch.from_numpy(x.astype(np.float32) / 255.0), torch.from_numpy(y.astype(np.int64))


class Attention(nn.Module):
    """Multi-head attention, S = Q K^T / sqrt(d): phi = softmax(S) or relu(S) / N written
    out, or attnsweep's op (`op` = (the op, activation, degree, scale)), which also gives the norms."""

    def __init__(self, dim, heads, activation, op=None):
        super().__init__()
        self.heads, self.activation, self.op = heads, activation, op
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)
        self.norms = None  # the op's (attn_fro, jac_fro) of the last call, means over the batch and heads (tensors)

    def forward(self, x):  # x (B, N, C)
        B, N, C = x.shape
        q, k, v = self.qkv(x).view(B, N, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
        if self.op is not None:
            attention, act, degree, scale = self.op
            o, attn_fro, jac_fro = attention(q.contiguous(), k.contiguous(), v.contiguous(), act, degree=degree,
                                             scale=scale)
            self.norms = (attn_fro.mean(), jac_fro.mean())  # read (.item()) only on the steps that log them
        else:
            s = q @ k.transpose(-2, -1) / math.sqrt(C // self.heads)  # (B, H, N, N)
            p = torch.softmax(s, dim=-1) if self.activation == "softmax" else torch.relu(s) / N
            o = p @ v
        return self.out(o.transpose(1, 2).reshape(B, N, C))


class ViT(nn.Module):
    def __init__(self, patch, dim, heads, layers, activation, op=None):
        super().__init__()
        self.patch = patch
        tokens = (28 // patch) ** 2
        self.embed = nn.Linear(patch * patch, dim)
        self.pos = nn.Parameter(torch.zeros(1, tokens, dim))
        self.blocks = nn.ModuleList()
        for _ in range(layers):
            self.blocks.append(nn.ModuleDict({"ln1": nn.LayerNorm(dim), "attn": Attention(dim, heads, activation, op),
                                              "ln2": nn.LayerNorm(dim),
                                              "mlp": nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(),
                                                                   nn.Linear(2 * dim, dim))}))
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, 10)

    def forward(self, img):  # img (B, 28, 28)
        B, p = img.shape[0], self.patch
        x = img.unfold(1, p, p).unfold(2, p, p).reshape(B, -1, p * p)  # (B, N, p*p)
        x = self.embed(x) + self.pos
        for b in self.blocks:
            x = x + b["attn"](b["ln1"](x))
            x = x + b["mlp"](b["ln2"](x))
        return self.head(self.ln(x).mean(dim=1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--activation", required=True)
    ap.add_argument("--lr", type=float, required=True)
    args = ap.parse_args()
    cfg = cell.config()  # the rest of the cell's keys (the ones not passed as arguments)
    op = None
    if cfg.get("attention", "written") == "attnsweep":
        import attnsweep_torch  # on the PYTHONPATH attnsweep sets where its build has the op
        op = (attnsweep_torch.attention, args.activation, cfg.get("degree", 1), cfg.get("scale", "none"))
    elif args.activation not in ("softmax", "relu"):
        raise SystemExit(f"--activation: expected softmax or relu (attention written out), got {args.activation}")
    torch.set_num_threads(int(os.environ.get("ATTNSWEEP_THREADS", "1")))
    torch.use_deterministic_algorithms(True)
    seed, steps, batch = cfg["seed"], cfg["steps"], cfg["batch"]
    if 28 % cfg["patch"] != 0:
        raise SystemExit(f"{os.environ['ATTNSWEEP_CONFIG']}: patch: expected a divisor of 28, got {cfg['patch']}")

    x_train, y_train = load("train", cfg["n_train"])
    x_test, y_test = load("test", cfg["n_test"])
    torch.manual_seed(seed)
    model = ViT(cfg["patch"], cfg["dim"], cfg["heads"], cfg["layers"], args.activation, op)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    start = 0
    if cell.has_checkpoint():
        state = torch.load(cell.checkpoint_path())
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start = state["step"]
        print(f"resumed from {cell.checkpoint_path()} at step {start}", flush=True)

    for step in range(start, steps):
        g = torch.Generator().manual_seed(seed * 1_000_003 + step)  # the batch depends on (seed, step) only
        idx = torch.randint(cfg["n_train"], (batch,), generator=g)
        logits = model(x_train[idx])
        loss = F.cross_entropy(logits, y_train[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % cfg["log_every"] == 0 or step == steps - 1:
            acc = (logits.argmax(dim=1) == y_train[idx]).float().mean().item()
            norms = {}
            for i, b in enumerate(model.blocks):  # the op's norms of this step's forward, per layer
                if b["attn"].norms is not None:
                    norms[f"layer{i}/attn_fro"], norms[f"layer{i}/jac_fro"] = (t.item() for t in b["attn"].norms)
            cell.log(step, loss=loss.item(), accuracy=acc, lr=args.lr, **norms)
        if cell.stop_requested() and step + 1 < steps:
            cell.save_checkpoint(lambda path: torch.save({"model": model.state_dict(), "opt": opt.state_dict(),
                                                          "step": step + 1}, path))
            print(f"stopped by a signal after step {step}: checkpoint written", flush=True)
            cell.exit_interrupted()

    with torch.no_grad():
        logits = model(x_test)
        test_loss = F.cross_entropy(logits, y_test).item()
        test_acc = (logits.argmax(dim=1) == y_test).float().mean().item()
    cell.final(test_loss=test_loss, test_accuracy=test_acc)


if __name__ == "__main__":
    main()
