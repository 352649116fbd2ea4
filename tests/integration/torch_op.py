"""torch.ops.attnsweep.attention checked like a PyTorch op (docs/pytorch.md), for every
activation of the registry (the op's own registry_specs, so a new one is covered):

1. forward, backward and both norms against the plain float64 PyTorch composite
   (matmul, phi, matmul; the norms from the materialised matrix and its Jacobian by
   autograd): attention_torch.py's reference, plain, masked and causal;
2. torch.autograd.gradcheck of the op itself (finite differences), plain, masked, causal;
3. equal to `attnsweep attention` (the binary) on the same inputs;
4. bad inputs raise a RuntimeError naming the problem; the process lives on.

Run with Debian's /usr/bin/python3 (torch 1.13, h5py), PYTHONPATH=<build>/python and
ATTNSWEEP = the binary. Exit 0 = all passed."""
import os
import subprocess
import sys
import tempfile
import warnings

import h5py
import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from attention_torch import PHI, inputs, reference, rel_err  # noqa: E402 (the float64 composite)

import attnsweep_torch  # noqa: E402

torch.set_default_dtype(torch.float32)
BIN = os.environ["ATTNSWEEP"]
SPECS = attnsweep_torch.registry_specs()
assert {a for a, _, _ in SPECS} == set(PHI), "every activation of the registry is tested"
failures = 0


def report(ok, what):
    global failures
    print(("ok   " if ok else "FAIL ") + what)
    failures += not ok


def op(q, k, v, spec, causal, mask):
    act, degree, scale = spec
    return attnsweep_torch.attention(q, k, v, act, degree=degree, scale=scale, causal=causal, key_mask=mask)


# 1. Against the float64 composite. The op computes in float32: the errors seen are ~1e-6
# relative at these sizes (as for the binary, attention_torch.py); 1e-4 leaves margin
# and still catches a wrong term (they give errors of order 1).
rng = np.random.default_rng(1)
SHAPES = [(2, 3, 17, 17, 16, 16, False, False), (2, 2, 9, 23, 8, 12, True, False), (2, 1, 40, 30, 32, 8, True, True)]
worst = 0.0
for B, H, Nq, Nk, d, dv, masked, causal in SHAPES:
    q, k, v, do, mask = inputs(rng, B, H, Nq, Nk, d, dv, masked)
    for spec in SPECS:
        qg, kg, vg = (t.clone().requires_grad_(True) for t in (q, k, v))
        out, attn, jac = op(qg, kg, vg, spec, causal, mask)
        out.backward(do)
        ref = reference(spec[0], spec[1], spec[2], *(t.double() for t in (q, k, v, do)),
                        mask.double() if mask is not None else None, causal)
        got = {"o": out.detach(), "dq": qg.grad, "dk": kg.grad, "dv": vg.grad, "attn_fro": attn, "jac_fro": jac}
        for name, x in got.items():
            e = rel_err(x.double().numpy(), ref[name])
            worst = max(worst, e)
            if not e <= 1e-4:
                report(False, f"{spec} B{B} H{H} Nq{Nq} Nk{Nk} mask={masked} causal={causal}: {name} "
                              f"relative error {e:.3g} > 1e-4")
        if attn.requires_grad or jac.requires_grad or attn.dtype != torch.float64:
            report(False, f"{spec}: the norms are float64 outputs without a gradient")
report(failures == 0, f"forward, backward and norms of {len(SPECS)} specs x {len(SHAPES)} shapes equal the float64 "
                      f"composite (worst relative error {worst:.2g}, bound 1e-4)")

# 2. gradcheck of the op in float32 (its kernels' precision; float64 is refused): central
# differences with eps 1e-2 on small inputs (|out| ~ 1). Their rounding error is about
# 2^-24 |out| / eps ~ 1e-5 and their truncation error eps^2 |phi'''| / 6 ~ 2e-5 for the
# cubic phis; atol = rtol = 2e-3 is 100x both and 1000x below a wrong derivative term.
# The inputs keep every score at least 0.05 from relu's kink, where a finite difference
# would straddle it.
n_checked = 0
for masked, causal in ((False, False), (True, False), (False, True)):
    for spec in SPECS:
        for seed in range(100):
            g = np.random.default_rng(seed)
            q, k, v, _, mask = inputs(g, 1, 2, 4, 5, 3, 2, masked)
            s = q @ k.transpose(-1, -2) / 3 ** 0.5
            if s.abs().min() > 0.05:
                break
        args = tuple(t.clone().requires_grad_(True) for t in (q, k, v))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # gradcheck's note that the inputs are not float64
            try:
                ok = torch.autograd.gradcheck(lambda q, k, v: op(q, k, v, spec, causal, mask)[0], args, eps=1e-2,
                                              atol=2e-3, rtol=2e-3)
            except RuntimeError as e:
                ok = False
                print(str(e)[:600])
        n_checked += 1
        if not ok:
            report(False, f"gradcheck {spec} mask={masked} causal={causal}")
report(failures == 0, f"gradcheck passes for {n_checked} cases (every spec; plain, masked, causal)")

# 3. The same as the binary's `attnsweep attention` (the same kernels, another caller).
with tempfile.TemporaryDirectory() as tmp:
    q, k, v, do, mask = inputs(np.random.default_rng(3), 2, 2, 33, 29, 16, 8, True)
    with h5py.File(f"{tmp}/in.h5", "w") as f:
        for name, x in (("q", q), ("k", k), ("v", v), ("do", do), ("key_mask", mask)):
            f[name] = x.numpy()
    worst = 0.0
    for spec in SPECS:
        r = subprocess.run([BIN, "attention", f"{tmp}/in.h5", "--out", f"{tmp}/out.h5", "--activation", spec[0],
                            "--degree", str(spec[1]), "--scale", spec[2], "--causal"], capture_output=True, text=True)
        if r.returncode != 0:
            report(False, f"attnsweep attention {spec}: exit {r.returncode}: {r.stderr}")
            continue
        qg, kg, vg = (t.clone().requires_grad_(True) for t in (q, k, v))
        out, attn, jac = op(qg, kg, vg, spec, True, mask)
        out.backward(do)
        with h5py.File(f"{tmp}/out.h5") as f:
            for name, x in (("o", out), ("dq", qg.grad), ("dk", kg.grad), ("dv", vg.grad), ("attn_fro", attn),
                            ("jac_fro", jac)):
                # The file keeps float32: the op's float64 norms rounded to float32 (2^-24).
                e = rel_err(f[name][()], x.detach().double())
                worst = max(worst, e)
    report(worst <= 1e-6, f"equal to `attnsweep attention` for every spec (worst relative difference {worst:.2g})")

# 4. Bad inputs: a RuntimeError naming the problem, never a crash.
q, k, v, _, _ = inputs(np.random.default_rng(4), 1, 2, 5, 6, 4, 3, False)
bad = [
    ("float64", lambda: attnsweep_torch.attention(q.double(), k, v, "softmax"), "q: expected float32, got Double"),
    ("int", lambda: attnsweep_torch.attention(q, k.int(), v, "softmax"), "k: expected float32, got Int"),
    ("3-D", lambda: attnsweep_torch.attention(q[0], k, v, "softmax"), "q: expected 4 dimensions"),
    ("shapes", lambda: attnsweep_torch.attention(q, k[..., :3].contiguous(), v, "softmax"),
     "k: expected [B, H, Nk, d] = [1, 2, Nk, 4]"),
    ("v's keys", lambda: attnsweep_torch.attention(q, k, v[:, :, :4].contiguous(), "softmax"),
     "v: expected [B, H, Nk, dv] = [1, 2, 6, dv]"),
    ("non-contiguous", lambda: attnsweep_torch.attention(q.transpose(2, 3), k, v, "softmax"),
     "q: expected a contiguous tensor"),
    ("activation", lambda: attnsweep_torch.attention(q, k, v, "tanh"), 'activation: expected softmax, poly'),
    ("degree", lambda: attnsweep_torch.attention(q, k, v, "poly", degree=0), "degree: expected an integer in 1..16"),
    ("scale", lambda: attnsweep_torch.attention(q, k, v, "poly", scale="inv_n2"), "scale: expected none, inv_sqrt_n"),
    ("mask shape", lambda: attnsweep_torch.attention(q, k, v, "softmax", key_mask=torch.ones(1, 5)),
     "key_mask: expected [B, Nk] = [1, 6]"),
    ("mask values", lambda: attnsweep_torch.attention(q, k, v, "softmax", key_mask=torch.full((1, 6), 0.5)),
     "key_mask: expected only 0 and 1"),
    ("score_scale", lambda: attnsweep_torch.attention(q, k, v, "softmax", score_scale=-1.0),
     "score_scale: expected a positive number"),
    ("double backward", lambda: torch.autograd.grad(
        torch.autograd.grad(attnsweep_torch.attention(q.requires_grad_(), k, v, "sigmoid")[0].sum(), q,
                            create_graph=True)[0].sum(), q), "double backward"),
]
for what, call, expected in bad:
    try:
        call()
        report(False, f"bad input ({what}): no exception")
    except RuntimeError as e:
        report(expected in str(e), f"bad input ({what}): {str(e).splitlines()[0]}")
q.requires_grad_(False)

# Under no_grad and with a bool mask: no autograd node, the same output as a 0/1 mask.
with torch.no_grad():
    m = torch.tensor([[True, True, False, True, True, False]])
    a = attnsweep_torch.attention(q, k, v, "relu", scale="inv_n", key_mask=m)
    b = attnsweep_torch.attention(q, k, v, "relu", scale="inv_n", key_mask=m.float())
report(not a[0].requires_grad and torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]),
       "no_grad: no node; a bool key_mask is the float 0/1 one")

print("PASSED" if failures == 0 else f"FAILED: {failures}")
sys.exit(1 if failures else 0)
