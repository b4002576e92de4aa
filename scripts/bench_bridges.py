#!/usr/bin/python3
"""model.safetensors against what a user would do without it, measured side by side in one run.

A bf16 2:4 model of 1 GiB of weights (one tensor). Figures, each the median of RUNS (default 3;
the Python script runs once, it is slow): `cp model.safetensors` into /dev/shm on a fresh mount,
against a Python script over header.json and dense.f32 that writes a float32 safetensors file;
first reads (dd to /dev/null, each on a fresh mount, model.safetensors and raw.tb in turns whose
order alternates) and O_DIRECT reads of model.safetensors against raw.tb of the same tensors.
Throughput is of each file's own bytes (model.safetensors holds the masked weights, raw.tb the
weights and masks), so the time to read the same tensors is given too, and so is the CPU each
first read took per GiB, the daemon's (schedstat) and the reader's (rusage): the two share the
CPUs, so on 2 a read takes at least half the sum of the two. The source stays in the page cache
throughout.

Just before each fresh mount 3 GiB of memory is written and freed. A virtual machine whose
balloon reports free pages to its host (virtio-balloon free page reporting) gives freed memory
back about 2 s after it is freed, and the next touch of each page faults on the host: a first
read fills fresh page cache, and whichever mount came first after an idle spell paid for those
faults. Seen here: writing 1 GiB of memory a process had not touched took 0.56-0.72 s; once,
after 10 s idle, 1.8 s; just after boot, 5.3 s. Usage: scripts/bench_bridges.py [RUNS]."""

import os
import resource
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402  (dd, sh, mounts)

GIB = 1 << 30

# What a user would write with only header.json and dense.f32 to hand.
USER_SCRIPT = r"""
import json, os, struct, sys
import numpy as np
mnt, out = sys.argv[1], sys.argv[2]
head, blobs, off = {}, [], 0
for d in sorted(os.listdir(os.path.join(mnt, "tensors"))):
    t = os.path.join(mnt, "tensors", d)
    h = json.load(open(os.path.join(t, "header.json")))
    a = np.fromfile(os.path.join(t, "dense.f32"), dtype="<f4")
    shape = h["shape"] or [h["num_weights"]]
    head[h["name"]] = {"dtype": "F32", "shape": shape, "data_offsets": [off, off + a.nbytes]}
    off += a.nbytes
    blobs.append(a)
text = json.dumps(head).encode()
text += b" " * (-len(text) % 8)
with open(out, "wb") as f:
    f.write(struct.pack("<Q", len(text)) + text)
    for a in blobs:
        a.tofile(f)
"""


def timed(args):
    t0 = time.perf_counter()
    subprocess.run(args, check=True, timeout=1800)
    return time.perf_counter() - t0


def pretouch():
    """Writes and frees 3 GiB of memory, so that a fresh mount's page cache is backed by the
    host (see the docstring)."""
    path = "/dev/shm/tbmfs-bench-pretouch"
    block = b"\1" * (64 << 20)
    with open(path, "wb") as f:
        try:
            for _ in range(48):
                f.write(block)
        finally:
            os.unlink(path)


def files(m):
    """model.safetensors and the raw.tb files of mount m."""
    tensors = m.p("tensors")
    return m.p("model.safetensors"), [os.path.join(tensors, d, "raw.tb")
                                      for d in sorted(os.listdir(tensors))]


def children_cpu():
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def main():
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    work = "/var/tmp/tbmfs-bench-bridges"
    os.makedirs(work, exist_ok=True)
    src = os.path.join(work, "bf16-2of4.tbm")
    if not os.path.exists(src):
        # 32768 x 16384 bf16 at 2:4: 1 GiB of weights, 128 MiB of masks
        bench.sh([bench.PY, bench.GEN, "tensor", src, "--shape", "32768,16384", "--dtype",
                  "bf16", "--nm", "2:4", "--name", "model.layers.0.mlp.up_proj.weight"])
    bench.dd(src)  # into the page cache
    out_st, out_py = "/dev/shm/bench-model.safetensors", "/dev/shm/bench-user.safetensors"

    def fresh(measure):
        """measure(mount) on a fresh mount: a first read, not the mount's page cache."""
        pretouch()
        with bench.Mount(src) as m:
            return measure(m)

    def cp(m):
        t = timed(["cp", files(m)[0], out_st])
        os.unlink(out_st)
        return t

    def first_read(m, kind):
        """(seconds, daemon CPU seconds, reader CPU seconds) of dd over the kind's files."""
        st, raws = files(m)
        cpu0, kids0 = bench.daemon_cpu(m.pid), children_cpu()
        secs = sum(bench.dd(p)[0] for p in ([st] if kind == "st" else raws))
        return secs, bench.daemon_cpu(m.pid) - cpu0, children_cpu() - kids0

    with bench.mount_owner():
        cps, first = [], {"st": [], "raw": []}
        for r in range(runs):
            cps.append(fresh(cp))
            for kind in bench.rotated(["st", "raw"], r):
                first[kind].append(fresh(lambda m: first_read(m, kind)))
        with bench.Mount(src) as m:
            st, raws = files(m)
            size = os.stat(st).st_size
            raw_size = sum(os.stat(p).st_size for p in raws)
            py = timed([bench.PY, "-c", USER_SCRIPT, m.path, out_py])
            py_size = os.stat(out_py).st_size
            os.unlink(out_py)
            st_direct, raw_direct = [], []
            for _ in range(runs):
                st_direct.append(bench.dd(st, direct=True)[0])
                raw_direct.append(sum(bench.dd(p, direct=True)[0] for p in raws))
    med = statistics.median
    gbs = lambda n, s: n / s / GIB  # noqa: E731
    print("model: %s, model.safetensors %d bytes, raw.tb %d bytes (GiB/s of each file's own "
          "bytes; medians of %d)" % (src, size, raw_size, runs))
    print("cp model.safetensors -> /dev/shm      %7.2fs  (runs: %s)" %
          (med(cps), ", ".join("%.2f" % c for c in cps)))
    print("user script header.json + dense.f32   %7.2fs  %.1fx slower, output %d bytes "
          "(%.2fx ours)" % (py, py / med(cps), py_size, py_size / size))
    st_t, raw_t = (med([x[0] for x in first[k]]) for k in ("st", "raw"))
    print("first read (dd, fresh mount)  model.safetensors %.2f GiB/s  raw.tb %.2f GiB/s  "
          "ratio %.2fx" % (gbs(size, st_t), gbs(raw_size, raw_t),
                           gbs(size, st_t) / gbs(raw_size, raw_t)))
    print("  time for the same tensors   model.safetensors %.3fs  raw.tb %.3fs  ratio %.2fx"
          % (st_t, raw_t, raw_t / st_t))
    for k, n in (("st", size), ("raw", raw_size)):
        print("  CPU per GiB, %-17s daemon %.3fs  reader %.3fs" %
              ("model.safetensors" if k == "st" else "raw.tb",
               med([x[1] for x in first[k]]) / n * GIB, med([x[2] for x in first[k]]) / n * GIB))
    print("O_DIRECT (dd, same mount)     model.safetensors %.2f GiB/s  raw.tb %.2f GiB/s  "
          "ratio %.2fx" % (gbs(size, med(st_direct)), gbs(raw_size, med(raw_direct)),
                           gbs(size, med(st_direct)) / gbs(raw_size, med(raw_direct))))


if __name__ == "__main__":
    main()
