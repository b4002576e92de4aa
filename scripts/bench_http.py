#!/usr/bin/python3
"""Benchmark of HTTP sources against a private nginx on loopback (its own configuration and
prefix in a temp dir, stopped by its pid): a cold dd bs=1M of one 256 MiB raw.tb through the
mount against curl -r of the same bytes from the same nginx (and the same dd through a mount of
the local file: what FUSE and dd cost with no transfer), and the mount and ls -R of a
1,000-tensor model with the requests each made (nginx's access log). Medians of RUNS rounds,
each round measuring every figure once. Usage: scripts/bench_http.py [RUNS]."""

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import gen_model  # noqa: E402
import httpserve  # noqa: E402

TBMFS = os.path.join(ROOT, "build", "src", "tbmfs")
MIB = 1 << 20


def sh(args, timeout=300):
    return subprocess.run(args, check=True, capture_output=True, timeout=timeout)


def write_big(path, mib=256, filler=True):
    """A fp32 tensor of mib MiB, 256 by default (raw.tb: those bytes + its 4 KiB header), then,
    with filler, a 64 MiB one; the length of big's raw.tb."""
    rng = np.random.default_rng(1)
    entries, off = [], 0
    tensors = (("big", mib * MIB // 4),) + ((("filler", 16 * MIB),) if filler else ())
    with open(path, "wb") as f:
        for name, nw in tensors:
            hdr = gen_model.struct.pack(gen_model.HEADER_FMT, gen_model.MAGIC, gen_model.VERSION,
                                        0, 0, nw, 0, 4096, 4096 + 4 * nw, 0)
            f.write(hdr + bytes(4096 - len(hdr)))
            for _ in range(nw // MIB):
                f.write(rng.integers(0, 2 ** 32, MIB, dtype=np.uint32).tobytes())
            entries.append({"name": name, "offset": off, "shape": [nw], "nm_n": 0, "nm_m": 0,
                            "dtype": "fp32", "num_weights": nw, "num_mask_bytes": 0})
            off += 4096 + 4 * nw
        gen_model._write_index(f, {"architecture": "custom", "config": {}, "tensors": entries})
    return 4096 + mib * MIB


def write_many(path, count=1000):
    ts = gen_model.many_tensors(count, numel=4096, dtype="fp16", nm=(2, 4))
    with open(path, "wb") as f:
        f.write(gen_model.container(ts).data)


def write_spread(path, count=1000, nw=300000):
    """count dense fp32 tensors 1.2 MB apart, written sparse: every header in a block of its
    own."""
    stride = 4096 + 4 * nw
    entries = []
    with open(path, "wb") as f:
        for i in range(count):
            hdr = gen_model.struct.pack(gen_model.HEADER_FMT, gen_model.MAGIC, gen_model.VERSION,
                                        0, 0, nw, 0, 4096, 4096 + 4 * nw, 0)
            f.seek(i * stride)
            f.write(hdr)
            entries.append({"name": "t%d" % i, "offset": i * stride, "shape": [nw], "nm_n": 0,
                            "nm_m": 0, "dtype": "fp32", "num_weights": nw, "num_mask_bytes": 0})
        f.truncate(count * stride)
        f.seek(0, 2)
        gen_model._write_index(f, {"architecture": "custom", "config": {}, "tensors": entries})


class Mounted:
    def __init__(self, url, mnt, args=()):
        self.url, self.mnt, self.args = url, mnt, list(args)

    def __enter__(self):
        os.makedirs(self.mnt, exist_ok=True)
        t = time.perf_counter()
        sh(["timeout", "120", TBMFS] + self.args + [self.url, self.mnt])
        self.secs = time.perf_counter() - t
        return self

    def __exit__(self, *exc):
        subprocess.run(["fusermount3", "-u", self.mnt], timeout=60)


def daemon_cpu(mnt):
    """CPU seconds the tbmfs serving mnt has used (utime + stime of all its threads)."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = open("/proc/%s/cmdline" % pid, "rb").read().split(b"\0")
            stat = open("/proc/%s/stat" % pid).read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if os.path.basename(argv[0]) == b"tbmfs" and mnt.encode() in argv:
            return (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")
    return 0.0


def timed(args):
    t = time.perf_counter()
    sh(args)
    return time.perf_counter() - t


def main():
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    tmp = tempfile.mkdtemp(prefix="tbmfs-bench-http-")
    www = os.path.join(tmp, "www")
    os.makedirs(www)
    rawlen = write_big(os.path.join(www, "big.tbm"))
    write_many(os.path.join(www, "many.tbm"))
    write_spread(os.path.join(www, "spread.tbm"))
    mnt = os.path.join(tmp, "mnt")
    fig = {k: [] for k in ("dd", "dd_cpu", "local", "curl", "mount_big", "mount", "ls",
                           "req_mount", "req_ls", "req_mount_big", "mount_spread", "ls_spread",
                           "req_spread", "mib_spread")}
    try:
        with httpserve.Nginx(os.path.join(tmp, "nginx"), www) as nginx:
            big, many = nginx.url("big.tbm"), nginx.url("many.tbm")
            for _ in range(runs):
                n0 = len(nginx.requests())
                with Mounted(big, mnt, ["-o", "cache_size=64M"]) as m:
                    fig["mount_big"].append(m.secs)
                    fig["req_mount_big"].append(len(nginx.requests()) - n0)
                    cpu = daemon_cpu(mnt)
                    fig["dd"].append(timed(["dd", "if=" + os.path.join(mnt, "tensors", "big",
                                                                      "raw.tb"),
                                            "of=/dev/null", "bs=1M"]))
                    fig["dd_cpu"].append(daemon_cpu(mnt) - cpu)
                # The same dd from the local file (in the page cache) through a mount: what
                # the kernel's FUSE path and dd cost alone, with no transfer.
                with Mounted(os.path.join(www, "big.tbm"), mnt):
                    fig["local"].append(timed(["dd", "if=" + os.path.join(mnt, "tensors", "big",
                                                                         "raw.tb"),
                                               "of=/dev/null", "bs=1M"]))
                fig["curl"].append(timed(["curl", "-sSf", "-r", "0-%d" % (rawlen - 1), big,
                                          "-o", "/dev/null"]))
                n0 = len(nginx.requests())
                with Mounted(many, mnt) as m:
                    fig["mount"].append(m.secs)
                    n1 = len(nginx.requests())
                    fig["req_mount"].append(n1 - n0)
                    fig["ls"].append(timed(["ls", "-R", mnt]))
                    fig["req_ls"].append(len(nginx.requests()) - n1)
                n0 = len(nginx.requests())
                with Mounted(nginx.url("spread.tbm"), mnt) as m:
                    fig["mount_spread"].append(m.secs)
                    lines = nginx.requests()[n0:]
                    fig["req_spread"].append(len(lines))
                    fig["mib_spread"].append(sum(int(x.split()[4]) for x in lines) / MIB)
                    fig["ls_spread"].append(timed(["ls", "-R", mnt]))
    finally:
        if os.path.ismount(mnt):
            subprocess.run(["fusermount3", "-u", mnt], timeout=60)
        shutil.rmtree(tmp, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in fig.items()}
    gb = rawlen / 1e9
    print("HTTP source, nginx on 127.0.0.1, medians of %d rounds" % runs)
    print("  cold dd bs=1M of a 256 MiB raw.tb   %6.2f GB/s" % (gb / med["dd"]))
    print("  curl -r of the same bytes           %6.2f GB/s" % (gb / med["curl"]))
    print("  ratio mount / curl                  %6.2fx  (goal >= 0.8x)"
          % (med["curl"] / med["dd"]))
    print("  daemon CPU during that dd           %6.3f s" % med["dd_cpu"])
    print("  same dd from the local file         %6.2f GB/s, %.2fx curl (FUSE and dd alone)"
          % (gb / med["local"], med["curl"] / med["local"]))
    print("  mount of that 320 MiB model         %6.3f s, %d requests"
          % (med["mount_big"], med["req_mount_big"]))
    print("  mount of 1,000 2:4 tensors, 13 MB   %6.3f s  (goal < 1 s), %d requests "
          "(the index and the headers: statistics wait until needed)"
          % (med["mount"], med["req_mount"]))
    print("  ls -R of it                         %6.3f s, %d requests"
          % (med["ls"], med["req_ls"]))
    print("  mount of 1,000 dense tensors 1.2 MB apart, 1.2 GB  %6.3f s, %d requests, "
          "%.1f MiB" % (med["mount_spread"], med["req_spread"], med["mib_spread"]))
    print("  ls -R of it                         %6.3f s" % med["ls_spread"])


if __name__ == "__main__":
    main()
