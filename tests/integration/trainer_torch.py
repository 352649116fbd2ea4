"""The trainer's whole model against PyTorch autograd (float64), for every activation
and every head (classify, also with padding masked; readout; token_regress): the same
weights and batch (written by build/trainer_ref_dump), the same phi formula; compares the loss, every parameter gradient, then 20 AdamW steps of
loss (warm-up + cosine, clipping, decay on weight matrices only) and the final weights.
Fails loudly: exit 1 with every mismatch listed."""
import json
import math
import os
import subprocess
import sys
import tempfile

import h5py
import numpy as np
import torch

torch.set_default_dtype(torch.float64)
DUMP = os.environ["TRAINER_REF_DUMP"]
DECAYED = ["patch_w", "wte", "qkv_w", "attproj_w", "fc_w", "fcproj_w", "head_w"]


def phi(S, cfg, n_keys):  # n_keys: a number, or a tensor broadcasting against S
    act = cfg["activation"]
    scale = cfg.get("scale", "none")
    if scale == "inv_sqrt_n":
        c = 1.0 / n_keys ** 0.5
    elif scale == "inv_n":
        c = 1.0 / n_keys
    else:
        c = 1.0 if scale == "none" else scale
    if act == "softmax":
        return torch.softmax(S, dim=-1)
    if act == "poly":
        return c * S ** cfg.get("degree", 1)
    if act == "relu":
        return c * torch.relu(S)
    if act == "sigmoid":
        return torch.sigmoid(S - torch.log(torch.as_tensor(n_keys, dtype=S.dtype)))
    raise ValueError(act)


def attention(q, k, v, cfg, mask=None):  # q [B,H,Nq,hd], k, v [B,H,Nk,hd], mask [B,Nk] bool
    S = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if mask is None:
        return phi(S, cfg, k.shape[2]) @ v
    # Padded keys: -inf scores for softmax, phi = 0 otherwise; N of the scale and of the
    # sigmoid bias = the keys a row attends (kernels/attention.h).
    m = mask[:, None, None, :]
    n = mask.sum(-1).to(S.dtype)[:, None, None, None]
    if cfg["activation"] == "softmax":
        P = torch.softmax(S.masked_fill(~m, float("-inf")), dim=-1)
    else:
        P = phi(S, cfg, n) * m
    return P @ v


def forward(P, x, y, cfg):
    B, N, _ = x.shape
    C, H = cfg["dim"], cfg["heads"]
    hd = C // H
    if cfg["head"] == "readout":
        qkv = x @ P["qkv_w"][0].T  # [B, N, 3C]
        q, k, v = qkv[:, -1:, :C], qkv[:, :-1, C:2 * C], qkv[:, :-1, 2 * C:]
        sh = lambda t: t.reshape(B, t.shape[1], H, hd).transpose(1, 2)
        o = attention(sh(q), sh(k), sh(v), cfg).transpose(1, 2).reshape(B, C)
        return ((o[:, -1] - y) ** 2).mean()
    F = torch.nn.functional
    mask = None
    if "wte" in P:  # token ids (stored as floats) through the embedding table
        ids = x[..., 0].long()
        h = P["wte"][ids]
        if cfg.get("pad_id", -1) >= 0:
            mask = ids != cfg["pad_id"]
    else:
        h = x @ P["patch_w"].T + P["patch_b"]
    if cfg["cls"]:
        h = torch.cat([P["cls"].expand(B, 1, C), h], dim=1)
        if mask is not None:
            mask = torch.cat([torch.ones(B, 1, dtype=torch.bool), mask], dim=1)
    h = h + P["wpe"]
    T = h.shape[1]
    for l in range(cfg["layers"]):
        a = F.layer_norm(h, (C,), P["ln1_w"][l], P["ln1_b"][l], 1e-5)
        qkv = a @ P["qkv_w"][l].T + P["qkv_b"][l]
        q, k, v = (qkv[..., i * C:(i + 1) * C].reshape(B, T, H, hd).transpose(1, 2) for i in range(3))
        o = attention(q, k, v, cfg, mask).transpose(1, 2).reshape(B, T, C)
        h = h + o @ P["attproj_w"][l].T + P["attproj_b"][l]
        a = F.layer_norm(h, (C,), P["ln2_w"][l], P["ln2_b"][l], 1e-5)
        m = F.gelu(a @ P["fc_w"][l].T + P["fc_b"][l], approximate="tanh")
        h = h + m @ P["fcproj_w"][l].T + P["fcproj_b"][l]
    h = F.layer_norm(h, (C,), P["lnf_w"], P["lnf_b"], 1e-5)
    if cfg["head"] == "token_regress":  # one value per token, MSE over all of them
        pred = (h @ P["head_w"].T + P["head_b"])[..., 0]
        return ((pred - y) ** 2).mean()
    if cfg["cls"]:
        pooled = h[:, 0]
    elif mask is not None:  # mean over the real tokens
        pooled = (h * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
    else:
        pooled = h.mean(dim=1)
    logits = pooled @ P["head_w"].T + P["head_b"]
    return F.cross_entropy(logits, y)


def lr_at(cfg, t):
    lr, w, s = cfg["lr"], cfg["warmup_steps"], cfg["steps"]
    if t < w:
        return lr * (t + 1) / w
    return lr * 0.5 * (1 + math.cos(math.pi * (t - w) / (s - w))) if s > w else lr


def rel_err(a, b):
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-12))


def check(name, cfg, problems):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "ref.h5")
        subprocess.run([DUMP, json.dumps(cfg), path], check=True)
        f = h5py.File(path, "r")
        cfg = json.loads(f.attrs["config"])
        P = {k: torch.tensor(f["params"][k][()].astype(np.float64), requires_grad=True) for k in f["params"]}
        X = torch.tensor(f["batch/x"][()].astype(np.float64))
        if cfg["head"] == "classify":
            Y = torch.tensor(f["batch/y_class"][()])
        else:
            Y = torch.tensor(f["batch/y_value"][()].astype(np.float64))
        ours_loss = f["loss"][()]
        ours_grads = {k: f["grads"][k][()] for k in f["grads"]}
        ours_final = {k: f["final"][k][()] for k in f["final"]}
        ours_lr = f["lr"][()]

    worst = {}
    loss = forward(P, X[0], Y[0], cfg)
    loss.backward()
    e = abs(ours_loss[0] - loss.item()) / max(abs(loss.item()), 1e-12)
    worst["loss"] = e
    if e > 1e-5:
        problems.append(f"{name}: loss {ours_loss[0]} vs torch {loss.item()} (rel {e:.2e})")
    for k, p in P.items():
        e = rel_err(ours_grads[k], p.grad.numpy())
        worst["grad " + k] = e
        if e > 1e-4:
            problems.append(f"{name}: gradient of {k} differs: rel max err {e:.2e}")

    # The optimizer: torch.optim.AdamW / SGD with the same groups, schedule and clipping.
    params = {k: torch.tensor(f_.detach().numpy(), requires_grad=True) for k, f_ in P.items()}
    groups = [{"params": [params[k] for k in params if k in DECAYED], "weight_decay": cfg["weight_decay"]},
              {"params": [params[k] for k in params if k not in DECAYED], "weight_decay": 0.0}]
    groups = [g for g in groups if g["params"]]
    if cfg["optimizer"] == "adamw":
        opt = torch.optim.AdamW(groups, lr=cfg["lr"], betas=(0.9, 0.999), eps=1e-8)
    else:
        opt = torch.optim.SGD(groups, lr=cfg["lr"])
    torch_losses = []
    for t in range(cfg["steps"]):
        for g in opt.param_groups:
            g["lr"] = lr_at(cfg, t)
        if abs(ours_lr[t] - lr_at(cfg, t)) > 1e-12 * max(1.0, cfg["lr"]):
            problems.append(f"{name}: lr of step {t}: {ours_lr[t]} vs {lr_at(cfg, t)}")
        opt.zero_grad()
        l = forward(params, X[t], Y[t], cfg)
        l.backward()
        if cfg["clip"] > 0:
            torch.nn.utils.clip_grad_norm_(list(params.values()), cfg["clip"])
        opt.step()
        torch_losses.append(l.item())
    torch_losses = np.array(torch_losses)
    e = float(np.max(np.abs(ours_loss - torch_losses) / np.maximum(np.abs(torch_losses), 1e-12)))
    worst["20-step loss"] = e
    if e > 2e-3:
        problems.append(f"{name}: {cfg['steps']}-step losses differ (rel max {e:.2e}):\n  ours  {ours_loss}\n  torch {torch_losses}")
    for k in params:
        ours, ref = ours_final[k], params[k].detach().numpy()
        if k == "qkv_b" and cfg["activation"] == "softmax":
            # Softmax is shift-invariant along a score row, so the key bias has an exactly
            # zero gradient: both sides hold rounding noise there, and AdamW turns noise
            # into +-lr steps of either sign. Compare the Q and V biases only.
            C = cfg["dim"]
            keep = np.r_[0:C, 2 * C:3 * C]
            ours, ref = ours[:, keep], ref[:, keep]
        e = rel_err(ours, ref)
        worst["final " + k] = e
        if e > 5e-3:
            problems.append(f"{name}: weights {k} after {cfg['steps']} steps differ: rel max err {e:.2e}")
    top = max((v, k) for k, v in worst.items() if k.startswith("grad"))
    print(f"{name:42s} loss rel {worst['loss']:.1e}  worst grad {top[1][5:]} {top[0]:.1e}  "
          f"20-step loss {worst['20-step loss']:.1e}")


ACTS = {
    "softmax": {"activation": "softmax"},
    "poly1_inv_n": {"activation": "poly", "degree": 1, "scale": "inv_n"},
    "poly3_inv_sqrt_n": {"activation": "poly", "degree": 3, "scale": "inv_sqrt_n"},
    "relu_inv_n": {"activation": "relu", "scale": "inv_n"},
    "sigmoid": {"activation": "sigmoid"},
}

problems = []
for an, a in ACTS.items():
    check(f"classify {an}", {**a, "head": "classify"}, problems)
    check(f"readout {an}", {**a, "head": "readout", "dim": 6, "heads": 1, "layers": 1, "tokens": 9,
                            "lr": 1e-2}, problems)
check("classify softmax cls", {"activation": "softmax", "cls": True}, problems)
check("classify relu tokens (vocab 7)", {"activation": "relu", "scale": "inv_n", "vocab": 7}, problems)
check("classify poly3 sgd", {"activation": "poly", "degree": 3, "scale": "inv_sqrt_n", "optimizer": "sgd",
                             "lr": 0.1}, problems)
# Head width 16 without padding: the CPU's packed attention path (kernels/attention.h;
# the default shapes above have head width 8 and take the split-heads path).
for an in ["softmax", "poly3_inv_sqrt_n", "sigmoid"]:
    check(f"classify {an} head width 16", {**ACTS[an], "dim": 32, "heads": 2}, problems)
check("token_regress softmax head width 16", {**ACTS["softmax"], "head": "token_regress", "in_dim": 3, "tokens": 8,
                                              "dim": 32, "heads": 2}, problems)
# Padding masked (the listops task): CLS or the mean over real tokens; each row keeps
# 2..N of its N = 9 tokens. The activations whose phi depends on the row's key count.
for an in ["softmax", "poly3_inv_sqrt_n", "sigmoid"]:
    check(f"classify {an} padded cls", {**ACTS[an], "vocab": 7, "pad_id": 0, "tokens": 9, "cls": True}, problems)
check("classify relu_inv_n padded mean pool", {**ACTS["relu_inv_n"], "vocab": 7, "pad_id": 0, "tokens": 9}, problems)
# One value per token (the pde task).
for an in ["softmax", "poly3_inv_sqrt_n"]:
    check(f"token_regress {an}", {**ACTS[an], "head": "token_regress", "in_dim": 3, "tokens": 8}, problems)
if problems:
    print("FAILED:\n" + "\n".join(problems))
    sys.exit(1)
print("trainer_torch: all checks passed")
