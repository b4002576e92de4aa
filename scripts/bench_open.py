#!/usr/bin/python3
"""Benchmark of the open: how long a mount of a large index takes until the mount point is in
/proc/mounts, and the daemon's peak memory (VmHWM) then. A 5,000-tensor container (median of
RUNS mounts; goal 0.03 s), and with --million a 1,000,000-tensor one (one mount; goals under
5 s and under 1 GiB). Models are written by scripts/gen_model.py into a temporary directory.

Usage: scripts/bench_open.py [RUNS] [--million] [--tbmfs PATH]   (root: it mounts)"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
GEN = os.path.join(HERE, "gen_model.py")


def mounted(path):
    with open("/proc/mounts") as f:
        return any(line.split()[1] == path for line in f)


def vm_kib(pid, field):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def unmount(mnt):
    """fusermount3 -u, again while something that walks /tmp holds the fresh mount busy, then
    lazily."""
    for _ in range(50):
        if not mounted(mnt):
            return
        subprocess.run(["fusermount3", "-u", mnt], timeout=60, stderr=subprocess.DEVNULL)
        time.sleep(0.02)
    subprocess.run(["fusermount3", "-uz", mnt], timeout=60)


def mount_once(tbmfs, src, mnt, timeout=300):
    """Seconds from the daemon's start until the mount is listed, and its VmHWM in KiB."""
    if mounted(mnt):
        raise RuntimeError("%s is still mounted" % mnt)
    start = time.monotonic()
    p = subprocess.Popen([tbmfs, "-f", src, mnt], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    try:
        while not mounted(mnt):
            if p.poll() is not None:
                raise RuntimeError("tbmfs exited %d before mounting %s" % (p.returncode, src))
            if time.monotonic() - start > timeout:
                raise RuntimeError("no mount of %s within %d s" % (src, timeout))
            time.sleep(0.0005)
        took = time.monotonic() - start
        return took, vm_kib(p.pid, "VmHWM")
    finally:
        unmount(mnt)
        try:
            p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("runs", nargs="?", type=int, default=21)
    ap.add_argument("--million", action="store_true")
    ap.add_argument("--tbmfs", default=os.path.join(HERE, "..", "build", "src", "tbmfs"))
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="tbm-bench-open-")
    try:
        mnt = os.path.join(work, "mnt")
        os.mkdir(mnt)
        small = os.path.join(work, "m5k.tbm")
        subprocess.run(["/usr/bin/python3", GEN, "many", small, "--count", "5000"], check=True)
        mount_once(args.tbmfs, small, mnt)  # the page cache warm, the binary loaded
        runs = [mount_once(args.tbmfs, small, mnt) for _ in range(args.runs)]
        secs = sorted(r[0] for r in runs)
        print("5,000 tensors: mount %.4f s median (min %.4f, max %.4f, %d runs), VmHWM %d KiB"
              % (statistics.median(secs), secs[0], secs[-1], len(secs),
                 statistics.median(r[1] for r in runs)), flush=True)
        if args.million:
            big = os.path.join(work, "m1m.tbm")
            subprocess.run(["/usr/bin/python3", GEN, "many", big, "--count", "1000000"],
                           check=True)
            mount_once(args.tbmfs, big, mnt)
            took, hwm = mount_once(args.tbmfs, big, mnt)
            print("1,000,000 tensors: mount %.2f s, VmHWM %d KiB (%.2f GiB)"
                  % (took, hwm, hwm / (1 << 20)), flush=True)
    finally:
        unmount(os.path.join(work, "mnt"))
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
