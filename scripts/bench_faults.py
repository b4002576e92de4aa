#!/usr/bin/python3
"""Where the time of a page fault goes on a mount (issue 33): scripts/faults.c touching a
MAP_SHARED mapping of model.safetensors in random CHUNK chunks from several threads, each run
on a fresh mount (the source in the page cache), under scripts/fuse_trace.py. Per case, medians
of RUNS rounds whose order rotates: MB/s, the daemon's CPU seconds and the faulting process's,
FUSE READ requests and their sizes, the most outstanding at once and their latency, major
faults, and the kernel's readahead (read-around and async windows, folio order). Counts and
CPU seconds hold on a loaded machine; MB/s does not, so the load average is printed before
and after.

Cases are THREADS x ADVICE (the madvise of the mapping) x builds (--tbmfs, and NAME=PATH of
--proto, side by side), plus `dd` (a sequential read of a fresh mount) per build. --ra-kb sets
the mount's read_ahead_kb after mounting (before the mapping's file is opened); --mount-args
are given to every mount (e.g. "-o max_read=262144").

Usage (root): scripts/bench_faults.py [RUNS] [--threads 1,4,16] [--advice normal,random]
[--chunk 4] [--ra-kb N] [--mount-args ARGS] [--tbmfs PATH] [--proto NAME=PATH ...]
[--source TBM] (default the 2 GiB llama model of bench_far.py / bench_gguf.py)"""

import argparse
import collections
import os
import shlex
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "integration"))
import bench  # noqa: E402  (Mount, mount_owner, rotated, dd, daemon_cpu)
import bench_far  # noqa: E402  (build, LLAMA)
import fuse_trace  # noqa: E402
import harness  # noqa: E402

COLUMNS = ("MB/s", "daemon cpu s", "client cpu s", "reads", "outstanding", "latency ms",
           "majflt")


def children_cpu():
    t = os.times()
    return t.children_user + t.children_system


def one(tbmfs, source, threads, advice, args):
    """One case on a fresh mount: {column: value} and the trace's summary."""
    harness.TBMFS = bench.TBMFS = tbmfs
    with bench.Mount(source, args=args.mount_args) as m:
        path = m.p("model.safetensors")
        if args.ra_kb:
            st = os.stat(m.path)
            knob = "/sys/class/bdi/%d:%d/read_ahead_kb" % (os.major(st.st_dev),
                                                          os.minor(st.st_dev))
            time.sleep(0.1)  # after the daemon's own widening (src/fuse/readahead.c)
            with open(knob, "w") as f:
                f.write("%d\n" % args.ra_kb)
        cpu, child = bench.daemon_cpu(m.pid), children_cpu()
        with fuse_trace.FuseTrace(m.path) as t:
            if threads == "dd":
                secs, size = bench.dd(path)
                majflt = 0
            else:
                out = subprocess.run([args.faults, path, threads, args.chunk, "1", advice],
                                     check=True, capture_output=True, text=True,
                                     timeout=1800).stdout.split()
                f = dict(zip(out[0::2], out[1::2]))
                secs, size, majflt = float(f["seconds"]), int(f["bytes"]), int(f["majflt"])
        s = t.summary()
        return {"MB/s": size / secs / 1e6, "daemon cpu s": bench.daemon_cpu(m.pid) - cpu,
                "client cpu s": children_cpu() - child, "reads": s["reads"],
                "outstanding": s["reads_outstanding_max"],
                "latency ms": s["read_latency_ms_median"], "majflt": majflt}, s


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="?", type=int, default=3)
    ap.add_argument("--threads", default="1,4,16")
    ap.add_argument("--advice", default="normal")
    ap.add_argument("--chunk", default="4", help="MiB, or KiB with a k (256k)")
    ap.add_argument("--ra-kb", type=int, default=0)
    ap.add_argument("--mount-args", default="")
    ap.add_argument("--tbmfs", default=bench.TBMFS)
    ap.add_argument("--proto", action="append", default=[], metavar="NAME=PATH")
    ap.add_argument("--source", default=bench_far.LLAMA)
    args = ap.parse_args()
    args.mount_args = shlex.split(args.mount_args)
    if not os.path.exists(args.source):
        sys.exit("bench_faults: %s missing (scripts/bench_far.py writes it)" % args.source)
    args.faults = bench_far.build("faults")
    builds = [("tbmfs", os.path.abspath(args.tbmfs))] + [
        (p.split("=", 1)[0], os.path.abspath(p.split("=", 1)[1])) for p in args.proto]
    cases = [(t, a) for t in args.threads.split(",") for a in args.advice.split(",")]
    cases += [("dd", "-")]
    bench.dd(args.source)  # the source in the page cache
    print("load average before: %.2f %.2f %.2f" % os.getloadavg(), flush=True)
    samples = collections.defaultdict(list)
    traces = {}
    with bench.mount_owner():
        for r in range(args.runs):
            for (name, tbmfs), (threads, advice) in bench.rotated(
                    [(b, c) for c in cases for b in builds], r):
                row, s = one(tbmfs, args.source, threads, advice, args)
                for k, v in row.items():
                    samples[(name, threads, advice, k)].append(v)
                traces[(name, threads, advice)] = s
    print("load average after: %.2f %.2f %.2f" % os.getloadavg())
    print("\nmedians of %d rounds; %s chunks, %s" % (args.runs, args.chunk, args.source))
    print("%-10s %-7s %-10s" % ("build", "threads", "madvise") +
          "".join("%14s" % c for c in COLUMNS))
    for threads, advice in cases:
        for name, _ in builds:
            vals = [statistics.median(samples[(name, threads, advice, c)]) for c in COLUMNS]
            print("%-10s %-7s %-10s" % (name, threads, advice) +
                  "".join("%14.2f" % v for v in vals))
    print("\nlast round's readahead and request sizes (KiB: count):")
    for (name, threads, advice), s in traces.items():
        print("  %-10s %-7s %-10s reads %s; read-around/async windows %s, folio orders %s"
              % (name, threads, advice, s["read_sizes_kib"], s["ra_order"]["size_kib"],
                 s["ra_order"]["folio_order"]))


if __name__ == "__main__":
    main()
