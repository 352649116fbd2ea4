"""`attnsweep attention` against PyTorch autograd (float64), for every activation.

The activations, their test cases and each phi as a PyTorch expression come from the
registry (`attnsweep activations --json`, kernels/activation.h); torch's autograd gives
the derivatives, independently of our phi'.

Writes random q, k, v, do (+ key_mask) to HDF5, runs the binary ($ATTNSWEEP), and
compares o, dq, dk, dv, attn_fro, jac_fro with torch's forward and autograd backward.
Then checks that bad inputs exit 2 with a message naming the file and dataset.
Run with Debian's /usr/bin/python3 (torch 1.13, h5py). Exit 0 = all passed."""
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
BIN = os.environ.get("ATTNSWEEP", "attnsweep")
DEVICE = os.environ.get("ATTNSWEEP_DEVICE", "cpu")

REGISTRY = json.loads(subprocess.run([BIN, "activations", "--json"], capture_output=True, text=True,
                                     check=True).stdout)
PHI = {a["name"]: a for a in REGISTRY["activations"]}
ACTIVATIONS = [(t["activation"], t["degree"], str(t["scale"])) for t in REGISTRY["test_specs"]]
assert set(a for a, _, _ in ACTIVATIONS) == set(PHI), "every registry activation has a test case"

# (B, H, Nq, Nk, d, dv, with key_mask, causal, file dtype)
SHAPES = [
    (2, 3, 17, 17, 16, 16, False, False, np.float32),
    (2, 2, 9, 23, 8, 12, True, False, np.float64),
    (2, 1, 70, 40, 32, 32, True, True, np.float32),  # Nq > Nk causal: empty leading rows
]


def reference(act, degree, scale, q, k, v, do, mask, causal):
    """Torch float64 forward + autograd backward with attention.h's mask convention."""
    B, H, Nq, d = q.shape
    Nk = k.shape[2]
    q, k, v = (t.clone().requires_grad_(True) for t in (q, k, v))
    s = q @ k.transpose(-1, -2) / math.sqrt(d)
    vis = torch.ones(B, 1, Nq, Nk, dtype=torch.bool)
    if mask is not None:
        vis = vis & (mask[:, None, None, :] != 0)
    if causal:
        i = torch.arange(Nq)[:, None]
        j = torch.arange(Nk)[None, :]
        vis = vis & (j <= i + Nk - Nq)
    vis = vis.expand(B, H, Nq, Nk)
    n = vis.sum(-1, keepdim=True).to(torch.float64)  # keys each row attends
    n_safe = n.clamp(min=1)
    empty = n == 0
    c = {"none": torch.ones_like(n_safe), "inv_sqrt_n": 1 / n_safe.sqrt(), "inv_n": 1 / n_safe}.get(scale)
    if c is None:
        c = torch.full_like(n_safe, float(scale))
    info = PHI[act]
    env = {"torch": torch, "p": degree, "c": c if info["takes_scale"] else torch.ones_like(n_safe),
           "b": -torch.log(n_safe) if info["bias_log_n"] else torch.zeros_like(n_safe)}
    phi = lambda x: eval(info["torch"], env, {"s": x})  # noqa: E731 (the registry's expression)
    if not info["elementwise"]:  # row-wise (softmax): masked keys take no part
        p = phi(s.masked_fill(~vis, -math.inf))
        p = torch.where(empty, torch.zeros_like(p), p)
    else:
        p = torch.where(vis, phi(s), torch.zeros_like(s))
    o = p @ v
    o.backward(do)
    attn = (p.detach() ** 2).sum((-1, -2)).sqrt()
    if not info["elementwise"]:
        # The row's Jacobian by autograd, one query row at a time: ||J||_F^2 = sum_k ||d p_k / d s||^2.
        sd = s.detach().masked_fill(~vis, -math.inf)
        jac2 = torch.zeros(B, H, dtype=torch.float64)
        for k_ in range(Nk):
            x = sd.clone().requires_grad_(True)
            pk = torch.where(empty, torch.zeros_like(x), phi(x))[..., k_]
            (g,) = torch.autograd.grad(pk.sum(), x)
            jac2 += (torch.where(vis, g, torch.zeros_like(g)) ** 2).sum((-1, -2))
        jac = jac2.sqrt()
    else:
        sd = s.detach().clone().requires_grad_(True)
        (g,) = torch.autograd.grad(phi(sd).sum(), sd)  # element-wise: the diagonal Jacobian
        jac = (torch.where(vis, g, torch.zeros_like(g)) ** 2).sum((-1, -2)).sqrt()
    return {"o": o.detach(), "dq": q.grad, "dk": k.grad, "dv": v.grad, "attn_fro": attn, "jac_fro": jac}


def inputs(rng, B, H, Nq, Nk, d, dv, masked):
    """Normal q, k, v and dO in float32 (torch tensors), and with `masked` a key mask [B,Nk]
    that keeps about 70 % of the keys, always the first, and pads the last batch item's
    second half: the op tests' inputs (torch_op.py, torch_op_cuda.py)."""
    q, k, v, do = (torch.from_numpy(rng.standard_normal(s).astype(np.float32))
                   for s in ((B, H, Nq, d), (B, H, Nk, d), (B, H, Nk, dv), (B, H, Nq, dv)))
    mask = None
    if masked:
        mask = torch.from_numpy((rng.random((B, Nk)) < 0.7).astype(np.float32))
        mask[:, 0] = 1
        mask[-1, Nk // 2:] = 0
    return q, k, v, do, mask


def rel_err(got, ref):
    got = torch.as_tensor(np.asarray(got, dtype=np.float64))
    num, den = (got - ref).norm().item(), ref.norm().item()
    if den == 0:
        return 0.0 if num == 0 else math.inf
    return max(num / den, (got - ref).abs().max().item() / ref.abs().max().item())


def run(args, **kw):
    return subprocess.run([BIN, "attention", *args], capture_output=True, text=True, **kw)


def main():
    failures = 0
    checks = 0
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        for si, (B, H, Nq, Nk, d, dv, with_mask, causal, dtype) in enumerate(SHAPES):
            q = rng.standard_normal((B, H, Nq, d)).astype(dtype)
            k = rng.standard_normal((B, H, Nk, d)).astype(dtype)
            v = rng.standard_normal((B, H, Nk, dv)).astype(dtype)
            do = rng.standard_normal((B, H, Nq, dv)).astype(dtype)
            mask = None
            if with_mask:
                mask = (rng.random((B, Nk)) < 0.7).astype(dtype)
                mask[:, 0] = 1
                mask[-1, Nk // 2:] = 0  # the last batch item is padded
            inp = os.path.join(tmp, f"in{si}.h5")
            with h5py.File(inp, "w") as f:
                for name, x in (("q", q), ("k", k), ("v", v), ("do", do), ("key_mask", mask)):
                    if x is not None:
                        f[name] = x
            # Inputs are compared in the file's precision: float32 values, exact in float64.
            tq, tk, tv, tdo = (torch.from_numpy(x.astype(np.float64)) for x in (q, k, v, do))
            tm = torch.from_numpy(mask.astype(np.float64)) if mask is not None else None
            # float32 kernel vs float64 torch: the errors observed in the unit tests are
            # ~1e-6 relative at these sizes; 1e-4 leaves margin and catches any real bug.
            tol = 1e-4
            for act, degree, scale in ACTIVATIONS:
                out = os.path.join(tmp, f"out{si}.h5")
                args = [inp, "--out", out, "--activation", act, "--degree", str(degree), "--scale", scale,
                        "--device", DEVICE] + (["--causal"] if causal else [])
                r = run(args)
                label = f"{act} degree={degree} scale={scale} shape=B{B},H{H},Nq{Nq},Nk{Nk},d{d},dv{dv} " \
                        f"mask={with_mask} causal={causal} file={np.dtype(dtype).name}"
                if r.returncode != 0:
                    print(f"FAIL {label}: exit {r.returncode}: {r.stderr.strip()}")
                    failures += 1
                    continue
                ref = reference(act, degree, scale, tq, tk, tv, tdo, tm, causal)
                with h5py.File(out, "r") as f:
                    for name in ("o", "dq", "dk", "dv", "attn_fro", "jac_fro"):
                        checks += 1
                        got = f[name][()]
                        if got.dtype != np.float32 or tuple(got.shape) != tuple(ref[name].shape):
                            print(f"FAIL {label}: {name}: dtype {got.dtype} shape {got.shape}, "
                                  f"expected float32 {tuple(ref[name].shape)}")
                            failures += 1
                            continue
                        e = rel_err(got, ref[name])
                        if not e <= tol:
                            print(f"FAIL {label}: {name}: relative error {e:.3g} > {tol}")
                            failures += 1
        print(f"attention vs torch autograd: {checks - failures} of {checks} comparisons passed")

        # Bad inputs: exit 2, a message naming the file and the dataset, no output file.
        bad = [
            ("shape mismatch", {"q": np.zeros((1, 1, 3, 4), np.float32), "k": np.zeros((1, 1, 5, 3), np.float32),
                                "v": np.zeros((1, 1, 5, 2), np.float32)}, "/k"),
            ("missing dataset", {"q": np.zeros((1, 1, 3, 4), np.float32), "k": np.zeros((1, 1, 5, 4), np.float32)},
             "/v"),
            ("NaN input", {"q": np.full((1, 1, 3, 4), np.nan, np.float32), "k": np.zeros((1, 1, 5, 4), np.float32),
                           "v": np.zeros((1, 1, 5, 2), np.float32)}, "/q"),
            ("bad mask", {"q": np.zeros((1, 1, 3, 4)), "k": np.zeros((1, 1, 5, 4)), "v": np.zeros((1, 1, 5, 2)),
                          "key_mask": np.full((1, 5), 0.5)}, "/key_mask"),
            ("integer data", {"q": np.zeros((1, 1, 3, 4), np.int32), "k": np.zeros((1, 1, 5, 4)),
                              "v": np.zeros((1, 1, 5, 2))}, "/q"),
        ]
        for what, data, dataset in bad:
            inp = os.path.join(tmp, "bad.h5")
            out = os.path.join(tmp, "bad_out.h5")
            with h5py.File(inp, "w") as f:
                for name, x in data.items():
                    f[name] = x
            r = run([inp, "--out", out, "--activation", "softmax"])
            ok = r.returncode == 2 and inp in r.stderr and dataset in r.stderr and not os.path.exists(out)
            print(f"{'ok  ' if ok else 'FAIL'} bad input ({what}): exit {r.returncode}: {r.stderr.strip()}")
            failures += not ok
        r = run([os.path.join(tmp, "in0.h5"), "--out", os.path.join(tmp, "x.h5"), "--activation", "tanh"])
        ok = r.returncode == 2 and "--activation" in r.stderr
        print(f"{'ok  ' if ok else 'FAIL'} bad usage (--activation tanh): exit {r.returncode}: {r.stderr.strip()}")
        failures += not ok
    print("PASSED" if failures == 0 else f"FAILED: {failures}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
