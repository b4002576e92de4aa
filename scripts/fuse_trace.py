#!/usr/bin/python3
"""What the kernel asks of one FUSE mount while a command runs, counted from the kernel's own
trace events (a tracefs instance of our own, removed after): FUSE requests per opcode, READ
requests with the sizes of their replies and how many were outstanding at once, page-cache
misses that faulted (mm_filemap_fault), and the readahead the page cache started (sync, async,
and the sizes it asked for). For diagnosis: counts do not suffer from a noisy machine as timings
do. Needs root and a kernel with the fuse, readahead and filemap events (6.x).

Usage: scripts/fuse_trace.py MOUNTPOINT -- COMMAND...   (prints the summary as JSON lines)
As a module: with FuseTrace(mountpoint) as t: ...; then t.summary()."""

import collections
import json
import os
import re
import subprocess
import sys
import time

TRACEFS = "/sys/kernel/tracing"
EVENTS = ("fuse/fuse_request_send", "fuse/fuse_request_end", "readahead/page_cache_sync_ra",
          "readahead/page_cache_async_ra", "readahead/page_cache_ra_order",
          "filemap/mm_filemap_fault")
LINE = re.compile(r"^\s*(.+?)-(\d+)\s+\[(\d+)\]\s+\S+\s+([\d.]+):\s+(\w+):\s+(.*)$")


def _write(path, text):
    with open(path, "w") as f:
        f.write(text)


def kernel_dev(path):
    """The kernel's dev_t of the file system holding path (MKDEV: major << 20 | minor)."""
    st = os.stat(path)
    return (os.major(st.st_dev) << 20) | os.minor(st.st_dev)


class FuseTrace:
    def __init__(self, mountpoint, buffer_kb=131072):
        self.dev = kernel_dev(mountpoint)
        self.buffer_kb = buffer_kb
        self.inst = None
        self.lines = []
        self.lost = 0

    def __enter__(self):
        if not os.path.isdir(os.path.join(TRACEFS, "instances")):
            # inside `ip netns exec` /sys is a fresh sysfs; our mount namespace is private
            subprocess.run(["mount", "-t", "tracefs", "nodev", TRACEFS], check=True)
        instances = os.path.join(TRACEFS, "instances")
        # an instance holds its buffers until removed: those of runs killed before their
        # __exit__ (their process gone) go now
        for name in os.listdir(instances):
            pid = name[len("tbmfs-trace-"):]
            if name.startswith("tbmfs-trace-") and pid.isdigit() and \
                    not os.path.exists("/proc/%s" % pid):
                _write(os.path.join(instances, name, "tracing_on"), "0")
                os.rmdir(os.path.join(instances, name))
        self.inst = os.path.join(instances, "tbmfs-trace-%d" % os.getpid())
        os.mkdir(self.inst)
        _write(os.path.join(self.inst, "buffer_size_kb"), str(self.buffer_kb))
        for ev in EVENTS:
            d = os.path.join(self.inst, "events", ev)
            field = "connection" if ev.startswith("fuse/") else "s_dev"
            _write(os.path.join(d, "filter"), "%s == %d" % (field, self.dev))
            _write(os.path.join(d, "enable"), "1")
        _write(os.path.join(self.inst, "tracing_on"), "1")
        return self

    def __exit__(self, *exc):
        _write(os.path.join(self.inst, "tracing_on"), "0")
        with open(os.path.join(self.inst, "trace")) as f:
            self.lines = f.read().splitlines()
        for cpu in os.listdir(os.path.join(self.inst, "per_cpu")):
            with open(os.path.join(self.inst, "per_cpu", cpu, "stats")) as f:
                for line in f:
                    if line.startswith("overrun:"):
                        self.lost += int(line.split()[1])
        for ev in EVENTS:
            _write(os.path.join(self.inst, "events", ev, "enable"), "0")
        os.rmdir(self.inst)
        return False

    def summary(self):
        ops = collections.Counter()
        send = {}
        read_sizes = collections.Counter()
        latencies = []
        outstanding = peak = 0
        ra = {k: collections.Counter() for k in ("page_cache_sync_ra", "page_cache_async_ra",
                                                  "page_cache_ra_order")}
        faults = 0
        orders = collections.Counter()
        first = last = None
        for line in self.lines:
            m = LINE.match(line)
            if not m:
                continue
            ts, ev, rest = float(m.group(4)), m.group(5), m.group(6)
            first = ts if first is None else first
            last = ts
            f = dict(re.findall(r"(\w+)[= ](\S+)", rest))
            if ev == "fuse_request_send":
                op = re.search(r"\((\w+)\)", rest).group(1)
                ops[op] += 1
                send[f["req"]] = (op, ts)
                if op == "FUSE_READ":
                    outstanding += 1
                    peak = max(peak, outstanding)
            elif ev == "fuse_request_end":
                op, t0 = send.pop(f["req"], (None, None))
                if op == "FUSE_READ":
                    outstanding -= 1
                    read_sizes[max(0, int(f["len"]) - 16)] += 1
                    latencies.append(ts - t0)
            elif ev == "page_cache_ra_order":
                ra[ev][int(f["size"]) * 4] += 1
                orders[int(f["order"])] += 1
            elif ev in ra:  # what the caller asked for (size is the state before)
                ra[ev][int(f["req_count"]) * 4] += 1
            elif ev == "mm_filemap_fault":
                faults += 1
        reads = sum(read_sizes.values())
        latencies.sort()
        return {
            "ops": dict(ops),
            "reads": reads,
            "read_bytes": sum(k * v for k, v in read_sizes.items()),
            "read_sizes_kib": {"%d" % (k // 1024): v for k, v in
                               sorted(read_sizes.items(), key=lambda kv: -kv[1])[:8]},
            "reads_outstanding_max": peak,
            "read_latency_ms_median": 1e3 * latencies[len(latencies) // 2] if latencies else 0,
            "read_latency_ms_p90": 1e3 * latencies[int(len(latencies) * 0.9)] if latencies
            else 0,
            "filemap_faults": faults,
            "sync_ra": {"count": sum(ra["page_cache_sync_ra"].values()),
                        "req_kib": dict(ra["page_cache_sync_ra"].most_common(4))},
            "async_ra": {"count": sum(ra["page_cache_async_ra"].values()),
                         "req_kib": dict(ra["page_cache_async_ra"].most_common(4))},
            "ra_order": {"count": sum(ra["page_cache_ra_order"].values()),
                         "size_kib": dict(ra["page_cache_ra_order"].most_common(4)),
                         "folio_order": dict(orders.most_common(4))},
            "trace_seconds": (last - first) if first is not None else 0,
            "events_lost": self.lost,
        }


def main():
    if len(sys.argv) < 4 or sys.argv[2] != "--":
        sys.exit("usage: fuse_trace.py MOUNTPOINT -- COMMAND...")
    with FuseTrace(sys.argv[1]) as t:
        t0 = time.perf_counter()
        rc = subprocess.run(sys.argv[3:]).returncode
        secs = time.perf_counter() - t0
    s = t.summary()
    s["command_seconds"] = secs
    s["exit"] = rc
    print(json.dumps(s))


if __name__ == "__main__":
    main()
