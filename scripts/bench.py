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
    def __init__(self, source, mnt, args=()):
        self.source, self.mnt, self.args = source, mnt, list(args)

    def __enter__(self):
        os.makedirs(self.mnt, exist_ok=True)
        sh(["timeout", "120", TBMFS, self.source, self.mnt] + self.args)
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


def rate(path, direct=False):
    """GB/s of one dd of path."""
    secs, size = dd(path, direct)
    return gbps(size, secs)


def view_reads(source, mnt, rel, args=()):
    """One round of the three reads of a view: first buffered read of a fresh mount, a
    cached re-read, and an O_DIRECT read (which bypasses the cache). GB/s of each."""
    with Mount(source, mnt, args):
        path = os.path.join(mnt, rel)
        first = rate(path)
        cached = rate(path)
        direct = rate(path, direct=True)
    return {"first": first, "cached": cached, "direct": direct}


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


KNOBS = (("default: 512 KiB requests, raw spliced", []),
         ("-o nosplice: 512 KiB requests, raw read by pread", ["-o", "nosplice"]),
         ("-o max_read=1048576: 1 MiB requests, pread", ["-o", "max_read=1048576"]))


def knobs(source, mnt, name, runs):
    """The request-size and splice choices side by side, rounds interleaved:
    {(knob label, view, how): median GB/s}."""
    samples = {}
    for _ in range(runs):
        for label, args in KNOBS:
            for view in ("raw.tb", "dense.f32"):
                got = view_reads(source, mnt, "tensors/%s/%s" % (name, view), args)
                for how in ("first", "direct"):
                    samples.setdefault((label, view, how), []).append(got[how])
    return {key: statistics.median(v) for key, v in samples.items()}


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

    # Every figure is measured once per round, the rounds one after another, so that
    # a slow spell of this shared machine weighs on all figures alike, not on one.
    kinds = (("fp16 2:4", fp16, "w16"), ("fp32 dense", fp32, "w32"))
    samples = {}
    for _ in range(runs):
        for label, source, name in kinds:
            samples.setdefault((label, "base"), []).append(rate(source))
            for view in ("raw.tb", "dense.f32"):
                got = view_reads(source, mnt, "tensors/%s/%s" % (name, view))
                for how, speed in got.items():
                    samples.setdefault((label, view, how), []).append(speed)
    med = {key: statistics.median(v) for key, v in samples.items()}

    rows = []
    for i, (label, source, _) in enumerate(kinds):
        base = med[(label, "base")]
        rows.append(("%s dd bs=1M of %s from the page cache%s"
                     % ("1." if i == 0 else "  ", os.path.basename(source),
                        " (baseline)" if i == 0 else ""), base, 1.0))
    for label, _, _ in kinds:
        base = med[(label, "base")]
        raw = {how: med[(label, "raw.tb", how)] for how in ("first", "direct", "cached")}
        dense = {how: med[(label, "dense.f32", how)] for how in ("first", "direct", "cached")}
        rows += [
            ("2. %s raw.tb first read" % label, raw["first"], raw["first"] / base),
            ("   %s raw.tb first read, O_DIRECT" % label, raw["direct"], raw["direct"] / base),
            ("   %s raw.tb cached re-read" % label, raw["cached"], raw["cached"] / base),
            ("3. %s dense.f32 first read (ratio to raw.tb)" % label, dense["first"],
             dense["first"] / raw["first"]),
            ("   %s dense.f32 O_DIRECT (ratio to raw.tb)" % label, dense["direct"],
             dense["direct"] / raw["direct"]),
            ("   %s dense.f32 cached re-read (ratio to raw.tb)" % label, dense["cached"],
             dense["cached"] / raw["cached"]),
        ]

    print("\n%-58s %10s %8s" % ("figure (median of %d)" % runs, "GB/s", "ratio"))
    for label, speed, ratio in rows:
        print("%-58s %10.2f %8.2f" % (label, speed, ratio))

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

    print("\n7. the knobs side by side, fp16 2:4 tensor, GB/s (median of %d):" % runs)
    print("   %-50s %9s %9s %9s %9s" % ("", "raw first", "raw O_DIR", "dns first",
                                       "dns O_DIR"))
    got = knobs(fp16, mnt, "w16", runs)
    for label, _ in KNOBS:
        print("   %-50s %9.2f %9.2f %9.2f %9.2f" % (
            label, got[(label, "raw.tb", "first")], got[(label, "raw.tb", "direct")],
            got[(label, "dense.f32", "first")], got[(label, "dense.f32", "direct")]))
    subprocess.run(["rm", "-rf", work])


if __name__ == "__main__":
    main()
