#!/usr/bin/python3
"""Integration test of dense.f32 and dense.npy: bit patterns of the dense expansion (special
values, every M from 1 to 32, partial groups, junk mask bits, masks that must not be applied),
the NPY header and shape, np.load with mmap, reads at random unaligned offsets, once per kernel
level the CPU has."""

import os
import random

import numpy as np

import harness
import models
from harness import (Mount, check, eq, kernels_supported, pread, read_all, read_json, run)
from tbmref import parse_npy

gen = None


def dense_tensors():
    mk = gen.make_tensor
    ts = []
    for dtype in ("fp32", "fp16", "bf16", "fp64"):
        ts.append(gen.special_tensor("special.%s.dense" % dtype, dtype))
        ts.append(gen.special_tensor("special.%s.kept" % dtype, dtype, nm=(4, 4)))
        vals = np.array(gen.SPECIAL_VALUES[dtype] * 4, dtype=gen.BITS_DTYPE[gen.PRECISIONS[dtype]])
        # Special values everywhere, half of them pruned but stored: they must come out +0.0.
        ts.append(mk("special.%s.pruned" % dtype, [len(vals)], dtype, (2, 4), 1, values=vals,
                     prune=False))
    dtypes = ("fp32", "fp16", "bf16", "fp64")
    rnd = random.Random(7)
    for m in range(1, 33):
        n = rnd.randint(0, m)
        rows = rnd.randint(1, 5)
        cols = rnd.randint(1, 3 * m + 1)
        ts.append(mk("every_m.%02d" % m, [rows, cols], dtypes[m % 4], (n, m), 200 + m,
                     junk_bits=m % 3 == 0))
    ts += [
        mk("big.fp16", [256, 100], "fp16", (2, 4), 300),
        mk("big.bf16", [128, 129], "bf16", (3, 8), 301, junk_bits=True),
        mk("big.fp64", [64, 77], "fp64", (5, 16), 302),
        mk("big.fp32", [100, 99], "fp32", (7, 32), 303),
        mk("big.fp32.dense", [33, 65], "fp32", (0, 0), 304),
        mk("big.fp16.dense", [17, 301], "fp16", (0, 0), 305),
        mk("unusable.m40", [3, 80], "fp32", (2, 40), 306),
        mk("unusable.n_over_m", [5, 12], "bf16", (6, 4), 307),
        mk("shape.mismatch", [7, 7], "fp16", (2, 4), 308, num_weights=45),
        mk("shape.1d", [77], "fp32", (1, 2), 309),
        mk("index.dtype.lies", [6, 6], "fp16", (2, 4), 310, index={"dtype": "fp64"}),
        mk("conflicts", [16, 16], "fp32", (2, 4), 311, conflicts=40),
        mk("over_n", [16, 16], "fp16", (2, 4), 312, over_n=10),
    ]
    return ts


def check_dense(m, e, rnd):
    d = m.p("tensors", e.dir)
    want = e.dense
    f32 = os.path.join(d, b"dense.f32")
    eq(os.stat(f32).st_size, len(want), "dense.f32 st_size")
    eq(read_all(f32), want, "dense.f32")
    for _ in range(12):
        off = rnd.randrange(0, len(want) + 8)
        size = rnd.randrange(1, 300)
        eq(pread(f32, off, size), want[off: off + size], "dense.f32 [%d, +%d)" % (off, size))


def check_npy(m, e, rnd):
    p = os.path.join(m.p("tensors", e.dir), b"dense.npy")
    data = read_all(p)
    eq(os.stat(p).st_size, len(data), "dense.npy st_size")
    header, hlen, payload = parse_npy(data)
    eq(header, {"descr": "<f4", "fortran_order": False, "shape": e.npy_shape()}, "NPY header")
    eq(payload, e.dense, "NPY payload")
    arr = np.load(p, mmap_mode="r")
    eq((arr.dtype.str, arr.shape), ("<f4", e.npy_shape()), "np.load dtype and shape")
    eq(np.ascontiguousarray(arr).tobytes(), e.dense, "np.load data")
    del arr
    for _ in range(8):
        off = rnd.randrange(0, len(data) + 8)
        size = rnd.randrange(1, 500)
        eq(pread(p, off, size), data[off: off + size], "dense.npy [%d, +%d)" % (off, size))


def skip(why):
    raise harness.Skip(why)


def main(suite):
    global gen
    gen = harness.load_gen()
    tensors = dense_tensors()
    src = os.path.join(suite.tmp, "dense.tbm")
    cont, expects = models.write_container(gen, src, tensors)
    for e in expects:
        check(e.dense is not None, "no reference for %s" % e.name)
    supported = kernels_supported()
    for k in ("scalar", "avx2", "avx512"):
        if k not in supported:
            suite.case("%s: kernel level" % k, lambda k=k: skip("the CPU lacks %s" % k))
            continue
        m = Mount(suite, src, env={"TBMFS_KERNELS": k})
        suite.case("%s: mount" % k, lambda m=m: eq(m.start(), 0, "exit (%s)" % m.err.strip()))
        with m:
            suite.case("%s: model.json kernels" % k, lambda m=m, k=k: eq(
                read_json(m.p("model.json")).get("kernels"), k, "kernels"))
            views(suite, m, k, expects)
    other_sources(suite, tensors)


def views(suite, m, label, expects):
    rnd = random.Random(label)
    for e in expects:
        suite.case("%s: %s: dense.f32" % (label, e.name), lambda e=e: check_dense(m, e, rnd))
        suite.case("%s: %s: dense.npy" % (label, e.name), lambda e=e: check_npy(m, e, rnd))


def other_sources(suite, tensors):
    """The same expansion from a manifest directory and from bare .tb files."""
    picked = [t for t in tensors if t.name.startswith(("special.", "big.", "shape."))]
    mdir = os.path.join(suite.tmp, "dense-manifest")
    _, expects = models.write_manifest(gen, mdir, picked)
    with Mount(suite, mdir) as m:
        suite.case("manifest: mount", lambda: eq(m.start(), 0, "exit (%s)" % m.err.strip()))
        views(suite, m, "manifest", expects)
    for t in picked[:4] + [t for t in picked if t.name == "shape.mismatch"]:
        path = os.path.join(suite.tmp, t.name + ".tb")
        e = models.write_tb(gen, path, t)
        with Mount(suite, path) as m:
            suite.case("tb %s: mount" % t.name,
                       lambda m=m: eq(m.start(), 0, "exit (%s)" % m.err.strip()))
            views(suite, m, "tb", [e])
    llama = models.cli_llama(suite.tmp)
    with Mount(suite, llama) as m:
        suite.case("llama (CLI): mount", lambda: eq(m.start(), 0, "exit (%s)" % m.err.strip()))
        views(suite, m, "llama (CLI)", models.expects_from_tbm(llama))


if __name__ == "__main__":
    run("integration-dense", main)
