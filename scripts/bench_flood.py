#!/usr/bin/python3
"""Another reader's throughput while one file of a manifest is written over and over (issue
34's inotify flood), side by side in one run, medians of RUNS (default 5), turns alternating:
a manifest of a 64 MiB fp32 tensor "a" and a small "b"; b's file is changed once (the daemon
learns it and drops the kernel's cache of what was made from it), then a reader reads a's
raw.tb, cached in the kernel's page cache, over and over for SECONDS, with and without a
writer appending to b's file every 2 ms. Printed per build (--tbmfs, and NAME=PATH of --proto):
the reader's MB/s, the daemon's CPU seconds in the window, and the READs that reached the
daemon. The load average is printed before and after.

Usage (root): scripts/bench_flood.py [RUNS] [--seconds 3] [--tbmfs PATH] [--proto NAME=PATH]"""

import argparse
import json
import os
import statistics
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "integration"))
import bench  # noqa: E402  (TBMFS, Mount, mount_owner, rotated, daemon_cpu)
import harness  # noqa: E402
import models  # noqa: E402

WORK = "/var/tmp/tbmfs-bench-flood"


def make_source():
    src = os.path.join(WORK, "dir")
    if not os.path.exists(os.path.join(src, "manifest.json")):
        gen = harness.load_gen()
        mk = gen.make_tensor
        models.write_manifest(gen, src, [mk("a.fp32", [4096, 4096], "fp32", (2, 4), 1),
                                         mk("b.fp32", [64, 64], "fp32", (2, 4), 2)])
    with open(os.path.join(src, "manifest.json")) as f:
        return src, os.path.join(src, json.load(f)["tensors"][1]["file"])


def reads_seen(pid):
    """The daemon's read syscalls so far (each FUSE request is one read of /dev/fuse)."""
    with open("/proc/%d/io" % pid) as f:
        return int(dict(line.split(": ") for line in f.read().splitlines())["syscr"])


def one(prog, src, b_file, flood, seconds):
    harness.TBMFS = prog
    with open(b_file, "rb") as f:
        original = f.read()
    try:
        with bench.Mount(src) as m:
            raw = m.p("tensors", "a.fp32", "raw.tb")
            with open(raw, "rb") as f:  # into the page cache (the mount keeps it)
                while f.read(1 << 20):
                    pass
            with open(b_file, "ab") as g:  # b changed: learnt by the watch
                g.write(b"x")
            time.sleep(0.3)
            stop = threading.Event()

            def writer():
                while not stop.is_set():
                    with open(b_file, "ab") as g:
                        g.write(b"x")
                    time.sleep(0.002)

            w = threading.Thread(target=writer) if flood else None
            cpu0, syscr0 = bench.daemon_cpu(m.pid), reads_seen(m.pid)
            if w:
                w.start()
            done, t0 = 0, time.monotonic()
            while time.monotonic() - t0 < seconds:
                with open(raw, "rb") as f:
                    while True:
                        n = len(f.read(1 << 20))
                        if not n:
                            break
                        done += n
            secs = time.monotonic() - t0
            stop.set()
            if w:
                w.join()
            return (done / secs / 1e6, bench.daemon_cpu(m.pid) - cpu0,
                    reads_seen(m.pid) - syscr0)
    finally:
        with open(b_file, "wb") as g:
            g.write(original)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("runs", nargs="?", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--tbmfs", default=bench.TBMFS)
    ap.add_argument("--proto", action="append", default=[])
    a = ap.parse_args()
    builds = [("tbmfs", a.tbmfs)] + [tuple(p.split("=", 1)) for p in a.proto]
    os.makedirs(WORK, exist_ok=True)
    src, b_file = make_source()
    cases = [(name, prog, flood) for name, prog in builds for flood in (False, True)]
    got = {c: [] for c in cases}
    print("load before: %.2f %.2f %.2f" % os.getloadavg(), flush=True)
    with bench.mount_owner():
        for r in range(a.runs):
            for c in bench.rotated(cases, r):
                got[c].append(one(c[1], src, b_file, c[2], a.seconds))
    print("load after: %.2f %.2f %.2f" % os.getloadavg())
    med = statistics.median
    print("%-24s %10s %14s %14s" % ("medians of %d" % a.runs, "MB/s", "daemon cpu s",
                                      "daemon reads"))
    for c in cases:
        print("%-24s %10.0f %14.3f %14.0f" % ("%s %s" % (c[0], "flood" if c[2] else "quiet"),
                                               med(x[0] for x in got[c]),
                                               med(x[1] for x in got[c]),
                                               med(x[2] for x in got[c])))


if __name__ == "__main__":
    main()
