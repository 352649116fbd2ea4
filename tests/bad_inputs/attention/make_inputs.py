# Writes the HDF5 inputs of the `attnsweep attention` bad-input cases (cases.txt) into
# the current folder: each is a small valid input (q, k, v, do, key_mask) with one thing
# wrong. Run by tests/integration/bad_inputs.sh with /usr/bin/python3 (h5py, numpy).
import h5py
import numpy as np

B, H, NQ, NK, D, DV = 2, 2, 4, 5, 3, 3
rng = np.random.default_rng(0)


def arrays():
    return {
        "q": rng.standard_normal((B, H, NQ, D)).astype(np.float32),
        "k": rng.standard_normal((B, H, NK, D)).astype(np.float32),
        "v": rng.standard_normal((B, H, NK, DV)).astype(np.float32),
        "do": rng.standard_normal((B, H, NQ, DV)).astype(np.float32),
        "key_mask": np.ones((B, NK), np.float32),
    }


def write(name, change=None, drop=()):
    a = arrays()
    for k in drop:
        del a[k]
    with h5py.File(name, "w") as f:
        for k, v in a.items():
            f[k] = v
        if change is not None:
            change(f)


def replace(name, value=None, **kw):
    def change(f):
        if name in f:
            del f[name]
        f.create_dataset(name, data=value, **kw)
    return change


def with_value(name, index, value):
    def change(f):
        x = f[name][()]
        x[index] = value
        f[name][...] = x
    return change


write("good.h5")
write("missing_q.h5", drop=["q"])
write("missing_v.h5", drop=["v"])
write("q_rank3.h5", replace("q", np.zeros((B, H, NQ), np.float32)))
write("q_scalar.h5", replace("q", np.float32(1.0)))
write("k_wrong_d.h5", replace("k", np.zeros((B, H, NK, D + 1), np.float32)))
write("v_wrong_nk.h5", replace("v", np.zeros((B, H, NK + 1, DV), np.float32)))
write("do_wrong_shape.h5", replace("do", np.zeros((B, H, NQ + 2, DV), np.float32)))
write("mask_wrong_shape.h5", replace("key_mask", np.ones((B, NK, 1), np.float32)))
write("mask_not_binary.h5", with_value("key_mask", (1, 2), 0.5))
write("q_nan.h5", with_value("q", (0, 1, 2, 0), np.nan))
write("k_inf.h5", with_value("k", (1, 0, 0, 2), -np.inf))
write("do_nan.h5", with_value("do", (0, 0, 0, 0), np.nan))
write("v_beyond_float32.h5", replace("v", np.full((B, H, NK, DV), 1e39, np.float64)))
write("q_int.h5", replace("q", np.ones((B, H, NQ, D), np.int32)))
write("q_string.h5", replace("q", np.array([b"not", b"numbers"])))
write("q_compound.h5", replace("q", np.zeros((B, H, NQ, D), dtype=[("re", "f4"), ("im", "f4")])))
write("q_is_group.h5", lambda f: (f.__delitem__("q"), f.create_group("q")))
write("d_zero.h5", lambda f: [replace(n, np.zeros((B, H, N, 0), np.float32))(f) for n, N in (("q", NQ), ("k", NK))])
# Chunked and never written: a few bytes on disk, 2^60 elements when read.
write("q_huge.h5", replace("q", shape=(2**20, 2**20, 2**20, 1), dtype=np.float32, chunks=(1, 1, 1, 1)))
write("k_huge_nk.h5", replace("k", shape=(B, H, 2**40, D), dtype=np.float32, chunks=(1, 1, 1024, D)))

with open("not_hdf5.h5", "w") as f:
    f.write("q,k,v\n1,2,3\n")
open("empty.h5", "wb").close()
with open("good.h5", "rb") as f:
    data = f.read()
with open("truncated.h5", "wb") as f:
    f.write(data[: len(data) // 2])
with open("truncated_superblock.h5", "wb") as f:
    f.write(data[:40])
