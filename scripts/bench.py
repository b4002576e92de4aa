#!/usr/bin/python3
"""Throughput of reads through a tbmfs mount, measured side by side in one run.

Generates its inputs, mounts them, and prints one table: each figure the median of
several runs, with its ratio to the page-cache baseline (or to the row it is compared
with). Not part of `meson test`: these machines are shared and noisy, so only the
ratios of one run mean anything. Usage: scripts/bench.sh [RUNS]."""

import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TBMFS = os.path.join(ROOT, "build", "src", "tbmfs")
GEN = os.path.join(ROOT, "scripts", "gen_model.py")
PY = "/usr/bin/python3"
MIB = 1 << 20


def sh(args, **kw):
    return subprocess.run(args, check=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          timeout=600, **kw)


def dd(path, direct=False):
    """Seconds to read path with dd bs=1M (stdout discarded), and bytes read."""
    args = ["dd", "if=" + path, "of=/dev/null", "bs=1M"] + (["iflag=direct"] if direct else [])
    t0 = time.perf_counter()
    out = sh(args).stderr.decode()
    secs = time.perf_counter() - t0
    size = int(re.search(r"^(\d+) bytes", out, re.M).group(1))
    return secs, size


class Mount:
    def __init__(self, source, mnt):
        self.source, self.mnt = source, mnt

    def __enter__(self):
        os.makedirs(self.mnt, exist_ok=True)
        sh(["timeout", "120", TBMFS, self.source, self.mnt])
        return self

    def __exit__(self, *exc):
        subprocess.run(["fusermount3", "-u", self.mnt], timeout=60)

    def daemon_pid(self):
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open("/proc/%s/cmdline" % pid, "rb") as f:
                    argv = f.read().split(b"\0")
            except OSError:
                continue
            if argv and argv[0].endswith(b"tbmfs") and self.mnt.encode() in argv:
                return int(pid)
        raise RuntimeError("no daemon for " + self.mnt)


def gbps(size, secs):
    return size / secs / 1e9


def median_rate(fn, runs):
    rates = []
    for _ in range(runs):
        secs, size = fn()
        rates.append(gbps(size, secs))
    return statistics.median(rates)


def fresh_read(source, mnt, rel, direct, runs):
    """First read of a view: a new mount each run, so no page of it is cached."""
    def once():
        with Mount(source, mnt):
            return dd(os.path.join(mnt, rel), direct)
    return median_rate(once, runs)


def cached_read(source, mnt, rel, runs):
    with Mount(source, mnt):
        path = os.path.join(mnt, rel)
        dd(path)
        return median_rate(lambda: dd(path), runs)


NUMPY_SCRIPT = r"""
import json, struct, sys
import numpy as np
src, name, out = sys.argv[1:]
with open(src, "rb") as f:
    f.seek(-4, 2); n = struct.unpack("<I", f.read(4))[0]
    f.seek(-4 - n, 2); index = json.loads(f.read(n))
e = next(t for t in index["tensors"] if t["name"] == name)
hdr = np.fromfile(src, dtype=np.uint8, count=64, offset=e["offset"])
nw, nmask, woff, moff = struct.unpack("<4Q", hdr[16:48].tobytes())
m = struct.unpack("<I", hdr[12:16].tobytes())[0]
w = np.fromfile(src, dtype="<f2", count=nw, offset=e["offset"] + woff).astype(np.float32)
mask = np.fromfile(src, dtype=np.uint8, count=nmask, offset=e["offset"] + moff)
bits = np.unpackbits(mask[:, None], axis=1, bitorder="little")[:, :m].reshape(-1)[:nw]
w[bits == 0] = 0
np.save(out, w.reshape(e["shape"]))
"""


def numpy_vs_cp(source, mnt, name, runs):
    out = "/dev/shm/tbmfs-bench.npy"
    script = os.path.join(tempfile.gettempdir(), "tbmfs-bench-numpy.py")
    with open(script, "w") as f:
        f.write(NUMPY_SCRIPT)

    def numpy_once():
        t0 = time.perf_counter()
        sh([PY, script, source, name, out])
        return time.perf_counter() - t0

    def cp_once():
        with Mount(source, mnt):
            t0 = time.perf_counter()
            sh(["cp", os.path.join(mnt, "tensors", name, "dense.npy"), out])
            return time.perf_counter() - t0

    try:
        np_secs = statistics.median(numpy_once() for _ in range(runs))
        cp_secs = statistics.median(cp_once() for _ in range(runs))
        with Mount(source, mnt):
            same = sh(["cmp", os.path.join(mnt, "tensors", name, "dense.npy"), out]).returncode == 0
    finally:
        if os.path.exists(out):
            os.unlink(out)
    return np_secs, cp_secs, same


def peak_rss_streaming(source, mnt, rel, total):
    """Daemon VmHWM (KiB) after streaming total bytes of one dense view."""
    with Mount(source, mnt) as m:
        pid = m.daemon_pid()
        path = os.path.join(mnt, rel)
        done = 0
        while done < total:
            _, size = dd(path, direct=True)
            done += size
        with open("/proc/%d/status" % pid) as f:
            status = f.read()
    return int(re.search(r"VmHWM:\s+(\d+)", status).group(1)), done


def mount_and_find(source, mnt, runs):
    mounts, finds = [], []
    for _ in range(runs):
        os.makedirs(mnt, exist_ok=True)
        t0 = time.perf_counter()
        sh(["timeout", "120", TBMFS, source, mnt])
        mounts.append(time.perf_counter() - t0)
        try:
            t0 = time.perf_counter()
            n = len(sh(["find", mnt]).stdout.splitlines())
            finds.append(time.perf_counter() - t0)
        finally:
            subprocess.run(["fusermount3", "-u", mnt], timeout=60)
    return statistics.median(mounts), statistics.median(finds), n


def main():
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    work = tempfile.mkdtemp(prefix="tbmfs-bench-")
    fp16 = os.path.join(work, "fp16.tbm")
    fp32 = os.path.join(work, "fp32.tbm")
    many = os.path.join(work, "many.tbm")
    mnt = os.path.join(work, "mnt")
    print("generating inputs in %s ..." % work, flush=True)
    sh([PY, GEN, "tensor", fp16, "--shape", "8192,8192", "--dtype", "fp16", "--nm", "2:4",
        "--name", "w16"])
    sh([PY, GEN, "tensor", fp32, "--shape", "8192,8192", "--dtype", "fp32", "--nm", "0:0",
        "--name", "w32"])
    sh([PY, GEN, "many", many, "--count", "100000"])

    rows = []
    base16 = median_rate(lambda: dd(fp16), runs)
    base32 = median_rate(lambda: dd(fp32), runs)
    rows.append(("1. dd bs=1M of fp16.tbm from the page cache (baseline)", base16, 1.0))
    rows.append(("   dd bs=1M of fp32.tbm from the page cache", base32, 1.0))
    for label, source, name, base in (("fp16 2:4", fp16, "w16", base16),
                                      ("fp32 dense", fp32, "w32", base32)):
        raw = "tensors/%s/raw.tb" % name
        dense = "tensors/%s/dense.f32" % name
        r_first = fresh_read(source, mnt, raw, False, runs)
        r_direct = fresh_read(source, mnt, raw, True, runs)
        r_cached = cached_read(source, mnt, raw, runs)
        d_first = fresh_read(source, mnt, dense, False, runs)
        d_direct = fresh_read(source, mnt, dense, True, runs)
        d_cached = cached_read(source, mnt, dense, runs)
        rows += [
            ("2. %s raw.tb first read" % label, r_first, r_first / base),
            ("   %s raw.tb first read, O_DIRECT" % label, r_direct, r_direct / base),
            ("   %s raw.tb cached re-read" % label, r_cached, r_cached / base),
            ("3. %s dense.f32 first read (ratio to raw.tb)" % label, d_first, d_first / r_first),
            ("   %s dense.f32 O_DIRECT (ratio to raw.tb)" % label, d_direct, d_direct / r_direct),
            ("   %s dense.f32 cached re-read (ratio to raw.tb)" % label, d_cached,
             d_cached / r_cached),
        ]

    print("\n%-58s %10s %8s" % ("figure (median of %d)" % runs, "GB/s", "ratio"))
    for label, rate, ratio in rows:
        print("%-58s %10.2f %8.2f" % (label, rate, ratio))

    np_secs, cp_secs, same = numpy_vs_cp(fp16, mnt, "w16", runs)
    print("\n4. NumPy script (read .tbm, expand, write .npy to /dev/shm): %.3f s" % np_secs)
    print("   cp dense.npy out of the mount to /dev/shm:                  %.3f s  (%.1fx faster%s)"
          % (cp_secs, np_secs / cp_secs, "" if same else ", OUTPUTS DIFFER"))

    hwm, streamed = peak_rss_streaming(fp16, mnt, "tensors/w16/dense.f32", 1 << 30)
    print("\n5. daemon peak RSS (VmHWM) after streaming %.2f GiB of dense.f32: %.1f MiB"
          % (streamed / (1 << 30), hwm / 1024))

    mount_s, find_s, entries = mount_and_find(many, mnt, max(3, runs // 2))
    print("\n6. 100,000-tensor index: mount %.3f s, find MNT | wc -l (%d entries) %.3f s"
          % (mount_s, entries, find_s))
    subprocess.run(["rm", "-rf", work])


if __name__ == "__main__":
    main()
