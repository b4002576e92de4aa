#!/usr/bin/env python3
"""The statistics of stats.json computed with NumPy, timed, for comparison
with build/tests/kernels/bench_stats, on the very bytes it wrote:

    build/tests/kernels/bench_stats DIR && scripts/bench_stats_numpy.py DIR [RUNS]

DIR holds weights.f16 (64 Mi fp16), mask.u8 (2:4, one byte per group of 4)
and stats.txt (the C results, which this checks its own against)."""
import os
import statistics
import sys
import time

import numpy as np


def stats(w16, mask):
    x = w16.astype(np.float32)
    # bit (i % 4) of group i // 4's byte keeps element i
    kept = np.unpackbits(mask, bitorder="little").reshape(-1, 8)[:, :4].reshape(-1).astype(bool)
    v = x[kept]
    finite = np.isfinite(v)
    f = v[finite]
    out = {
        "count": x.size,
        "kept": int(v.size),
        "zeros": int(np.count_nonzero(v == 0)),
        "nan": int(np.count_nonzero(np.isnan(v))),
        "inf": int(np.count_nonzero(np.isinf(v))),
    }
    if f.size:
        lo, hi = float(f.min()), float(f.max())
        fd = f.astype(np.float64)
        edges = lo + (hi - lo) * np.arange(33, dtype=np.float64) / 32
        counts = (np.histogram(fd, bins=edges)[0] if lo != hi
                  else np.r_[np.zeros(31, np.int64), f.size])
        out.update(min=lo, max=hi, mean=float(fd.mean()), std=float(fd.std()),
                   abs_mean=float(np.abs(fd).mean()), counts=[int(c) for c in counts])
    return out


def main():
    d = sys.argv[1]
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    w16 = np.fromfile(os.path.join(d, "weights.f16"), dtype=np.float16)
    mask = np.fromfile(os.path.join(d, "mask.u8"), dtype=np.uint8)
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        r = stats(w16, mask)
        times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    print(f"numpy: {w16.size} fp16 elements, median of {runs}: {med * 1e3:.1f} ms")
    c = {}
    with open(os.path.join(d, "stats.txt")) as f:
        for line in f:
            k, *vals = line.split()
            c[k] = [float(v) for v in vals]
    assert int(c["kept"][0]) == r["kept"], (c["kept"], r["kept"])
    assert [int(v) for v in c["counts"]] == r["counts"], "histogram differs"
    assert c["min"][0] == r["min"] and c["max"][0] == r["max"]
    for k in ("mean", "std", "abs_mean"):
        rel = abs(c[k][0] - r[k]) / abs(r[k])
        print(f"{k}: C {c[k][0]!r} numpy {r[k]!r} relative difference {rel:.2e}")
        assert rel < 1e-9, k
    print("C and NumPy agree: kept, min, max, histogram exactly; sums within 1e-9")


if __name__ == "__main__":
    main()
