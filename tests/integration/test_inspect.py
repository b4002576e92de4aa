#!/usr/bin/python3
"""Integration test of the inspection views (contract v2, "Inspection views"): stats.json
against NumPy on generated tensors of every precision and N:M with NaN, infinities, -0.0,
subnormals, all-pruned tensors and rows, one element and a 64 Mi-element tensor; mask.png and
weights.png decoded by a reader written here (chunk CRCs with zlib, IDAT inflated) and by
Pillow, against pixels computed from the contract's block rules; sizes in stat equal the bytes."""

import json
import math
import os
import struct
import subprocess
import zlib

import numpy as np

import harness
import models
from harness import CMD_TIMEOUT, check, eq, read_all, run

gen = None


def dense_and_keep(e):
    """The dense expansion (float32) and which elements the mask keeps, from Expect e."""
    dense = e.dense_bits.astype("<u4").view(np.float32)
    h = e.h
    if h["nm_m"] == 0:
        keep = np.ones(len(dense), dtype=bool)
    else:
        from tbmref import keep_bits, mask_layout
        keep = keep_bits(e.mask, h["nm_m"], h["num_weights"], mask_layout(h))
    return dense, keep


def matrix(e):
    nw = e.h["num_weights"]
    shape = e.shape
    rows = shape[0] if shape and len(shape) > 1 and math.prod(shape) == nw and shape[0] else 1
    return rows, nw // rows


def reference_stats(e):
    dense, keep = dense_and_keep(e)
    kept = dense[keep].astype(np.float64)
    fin = kept[np.isfinite(kept)]
    ref = {"count": len(dense), "kept": int(keep.sum()), "zeros": int((kept == 0).sum()),
           "nan": int(np.isnan(kept).sum()), "inf": int(np.isinf(kept).sum())}
    if len(fin):
        lo, hi = float(fin.min()), float(fin.max())
        edges = [lo + (hi - lo) * i / 32 for i in range(33)]
        idx = np.clip(np.searchsorted(np.array(edges), fin, side="right") - 1, 0, 31)
        # exact sums (fsum) where the array is small: float64 pairwise sums lose what
        # +-FLT_MAX cancel; NumPy's for the large tensor
        exact = len(fin) <= 1 << 20
        mean = math.fsum(fin) / len(fin) if exact else float(fin.mean())
        dev = fin - mean
        var = math.fsum(dev * dev) / len(fin) if exact else float((dev * dev).mean())
        absm = math.fsum(np.abs(fin)) / len(fin) if exact else float(np.abs(fin).mean())
        ref.update(min=lo, max=hi, mean=mean, std=math.sqrt(var), abs_mean=absm,
                   hist_edges=edges,
                   hist_counts=np.bincount(idx, minlength=32).tolist())
    else:
        ref.update(min=None, max=None, mean=None, std=None, abs_mean=None, hist_edges=None,
                   hist_counts=[0] * 32)
    rows, cols = matrix(e)
    if cols:
        dens = keep[: rows * cols].reshape(rows, cols).sum(axis=1) / cols
        ref.update(row_density_min=float(dens.min()), row_density_max=float(dens.max()))
    else:
        ref.update(row_density_min=None, row_density_max=None)
    return ref


def close(got, want, rel):
    if want is None or got is None:
        return got is want
    return got == want or abs(got - want) <= rel * max(abs(want), 1e-300)


def check_stats(m, e, rel=1e-12):
    path = m.p(b"tensors", e.dir, b"stats.json")
    data = read_all(path)
    eq(len(data), os.stat(path).st_size, "stat size = bytes read")
    got = json.loads(data)
    want = reference_stats(e)
    for k in ("count", "kept", "zeros", "nan", "inf", "hist_counts", "min", "max",
              "row_density_min", "row_density_max"):
        eq(got.get(k, "<missing>"), want[k], k)
    for k in ("mean", "std", "abs_mean"):
        check(close(got[k], want[k], rel), "%s: got %r, want %r" % (k, got[k], want[k]))
    if want["hist_edges"] is None:
        eq(got["hist_edges"], None, "hist_edges")
    else:
        eq(got["hist_edges"], want["hist_edges"], "hist_edges (computed in double)")


def stats_tensors():
    mk = gen.make_tensor
    ts = []
    for k, dtype in enumerate(("fp32", "fp16", "bf16", "fp64")):
        ts.append(gen.special_tensor("special.%s" % dtype, dtype))
        ts.append(gen.special_tensor("special.%s.2of4" % dtype, dtype, nm=(4, 4)))
        vals = np.array(gen.SPECIAL_VALUES[dtype] * 3, dtype=gen.BITS_DTYPE[gen.PRECISIONS[dtype]])
        ts.append(mk("special_pruned.%s" % dtype, [6, 8], dtype, (2, 4), 10 + k, values=vals))
        for n, m in ((2, 4), (1, 8), (4, 16), (8, 32), (1, 1), (3, 7)):
            ts.append(mk("rand.%s.%dof%d" % (dtype, n, m), [7, 3 * m + 1], dtype, (n, m),
                         20 + k * 10 + m))
        ts.append(mk("all_pruned.%s" % dtype, [4, 8], dtype, (0, 4), 60 + k))
        ts.append(mk("one.%s" % dtype, [1], dtype, (0, 0), 70 + k))
    rows_pruned = np.ones((4, 16), dtype=bool)
    rows_pruned[1] = False
    ts.append(mk("a_row_pruned", [4, 16], "fp32", (4, 4), 80, mask_bits=rows_pruned.ravel()))
    ts.append(mk("tools.bytes16", [4, 32], "fp16", (4, 16), 81, tools_mask=True))
    ts.append(mk("shape.mismatch", [5, 5], "fp32", (2, 4), 82, num_weights=24))
    return ts


# --- PNG ---

def decode_png(data):
    """Signature, every chunk's CRC, IHDR, IDAT inflated: (width, height, pixels)."""
    eq(data[:8], b"\x89PNG\r\n\x1a\n", "signature")
    pos, idat, chunks = 8, b"", []
    while pos < len(data):
        (n,) = struct.unpack(">I", data[pos: pos + 4])
        kind, body = data[pos + 4: pos + 8], data[pos + 8: pos + 8 + n]
        (crc,) = struct.unpack(">I", data[pos + 8 + n: pos + 12 + n])
        eq(crc, zlib.crc32(kind + body), "CRC of chunk %r" % kind)
        chunks.append(kind)
        if kind == b"IHDR":
            w, h, depth, colour, comp, filt, lace = struct.unpack(">IIBBBBB", body)
            eq((depth, colour, comp, filt, lace), (8, 0, 0, 0, 0), "IHDR: 8-bit greyscale")
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    eq(chunks[0], b"IHDR", "first chunk")
    eq(chunks[-1], b"IEND", "last chunk")
    raw = zlib.decompress(idat)
    eq(len(raw), h * (w + 1), "scanlines")
    px = np.frombuffer(raw, dtype=np.uint8).reshape(h, w + 1)
    eq(set(px[:, 0].tolist()), {0}, "filter bytes")
    return w, h, px[:, 1:]


def reference_pictures(e):
    dense, keep = dense_and_keep(e)
    rows, cols = matrix(e)
    if rows == 0 or cols == 0:
        return np.zeros((1, 1), np.uint8), np.zeros((1, 1), np.uint8)
    bh, bw = -(-rows // 1024), -(-cols // 1024)
    h, w = -(-rows // bh), -(-cols // bw)
    d = np.where(keep, dense, np.float32(0))[: rows * cols].reshape(rows, cols).astype(np.float64)
    k = keep[: rows * cols].reshape(rows, cols)

    def blocks(a):
        p = np.zeros((h * bh, w * bw), dtype=np.float64)
        p[:rows, :cols] = a
        return p.reshape(h, bh, w, bw).sum(axis=(1, 3))

    elems = blocks(np.ones((rows, cols)))
    kept = blocks(k)
    fin = np.isfinite(d)
    nfin = blocks(fin)
    absum = blocks(np.where(fin, np.abs(d), 0))
    mask_px = ((2 * 255 * kept + elems) // (2 * elems)).astype(np.uint8)
    mean = np.divide(absum, nfin, out=np.zeros_like(absum), where=nfin > 0)
    nz = mean[mean > 0]
    wpx = np.zeros_like(mean, dtype=np.uint8)
    if len(nz):
        lo, hi = nz.min(), nz.max()
        for (i, j), v in np.ndenumerate(mean):
            if v > 0:
                wpx[i, j] = 255 if lo == hi else 1 + math.floor(
                    254 * (math.log(v) - math.log(lo)) / (math.log(hi) - math.log(lo)) + 0.5)
    return mask_px, wpx


def check_pictures(m, e):
    want_mask, want_w = reference_pictures(e)
    for name, want in (("mask.png", want_mask), ("weights.png", want_w)):
        path = m.p(b"tensors", e.dir, name.encode())
        data = read_all(path)
        eq(len(data), os.stat(path).st_size, "%s: stat size = bytes" % name)
        w, h, px = decode_png(data)
        eq((h, w), want.shape, "%s: height x width" % name)
        eq(px.tobytes(), want.tobytes(), "%s: pixels" % name)
        try:
            from PIL import Image
        except ImportError:
            continue
        import io
        img = Image.open(io.BytesIO(data))
        eq((img.mode, img.size), ("L", (w, h)), "%s: Pillow mode and size" % name)
        eq(img.tobytes(), want.tobytes(), "%s: Pillow pixels" % name)


def picture_tensors():
    mk = gen.make_tensor
    # 2048 x 2048 at 2:4: blocks of 2 x 2, each wholly kept, wholly pruned or its top row kept
    rows = cols = 2048
    block = np.arange((rows // 2) * (cols // 2)).reshape(rows // 2, cols // 2) % 3
    keep = np.zeros((rows, cols), dtype=bool)
    full = np.repeat(np.repeat(block == 0, 2, axis=0), 2, axis=1)
    half = np.repeat(np.repeat(block == 2, 2, axis=0), 2, axis=1)
    keep |= full
    keep[0::2] |= half[0::2]
    ones = np.ones(rows * cols, dtype=np.float32)
    return [
        mk("structured", [rows, cols], "fp16", (4, 4), 1, values=ones, mask_bits=keep.ravel()),
        mk("partial.blocks", [1025, 3001], "bf16", (2, 4), 2),
        mk("small", [7, 9], "fp32", (1, 3), 3),
        mk("dense.fp64", [33, 5], "fp64", (0, 0), 4),
        mk("empty", [0], "fp32", (0, 0), 5),
    ]


def large(suite):
    """64 Mi fp16 elements at 2:4: mean and std against NumPy's float64 pairwise sums."""
    if os.environ.get("TBMFS_SANITIZED"):
        raise harness.Skip("64 Mi elements are too slow under the sanitizers")
    path = os.path.join(suite.tmp, "large.tbm")
    subprocess.run(["/usr/bin/python3", harness.GEN, "tensor", path, "--shape", "8192,8192",
                    "--dtype", "fp16", "--nm", "2:4", "--name", "large"], check=True,
                   timeout=300)
    e = models.expects_from_tbm(path)[0]
    m = harness.Mount(suite, path)
    with m:
        eq(m.start(), 0, "mount")
        check_stats(m, e, rel=1e-13)


def main(suite):
    global gen
    gen = harness.load_gen()
    src = os.path.join(suite.tmp, "stats.tbm")
    _, expects = models.write_container(gen, src, stats_tensors())
    m = suite.mount(src, name="stats: mount")
    with m:
        for e in expects:
            suite.case("stats.json: %s" % e.name, lambda e=e: check_stats(m, e))

        def shared():
            a = read_all(m.p("tensors", "rand.fp32.2of4", "stats.json"))
            fds = [os.open(m.p("tensors", "rand.fp32.2of4", "stats.json"), os.O_RDONLY)
                   for _ in range(20)]
            try:
                eq({os.pread(fd, 1 << 16, 0) for fd in fds}, {a}, "every open's bytes")
            finally:
                for fd in fds:
                    os.close(fd)
        suite.case("stats.json: every open reads the same bytes", shared)
    src = os.path.join(suite.tmp, "pictures.tbm")
    _, pexpects = models.write_container(gen, src, picture_tensors())
    m = suite.mount(src, name="pictures: mount")
    with m:
        for e in pexpects:
            suite.case("mask.png and weights.png: %s" % e.name,
                       lambda e=e: check_pictures(m, e), timeout=120)
    suite.case("stats.json of 64 Mi fp16 elements", lambda: large(suite), timeout=600)


if __name__ == "__main__":
    run("integration-inspect", main)
