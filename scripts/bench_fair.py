#!/usr/bin/python3
"""One user slows everyone on a remote mount (issue 34): how long another user's reads take
while one user's O_DIRECT reads wait on a trickling server, under the kernel's limits on a FUSE
connection's background requests as the daemon leaves them and as raised after the mount
(/sys/fs/fuse/connections/N/max_background and congestion_threshold, root's knobs; the daemon
could set the same in its INIT reply, struct fuse_conn_info's max_background and
congestion_threshold).

On 127.0.0.1 inside a network namespace of its own (as scripts/bench_far.py), the tests'
hostile server (tests/integration/httpserve.py) serves a model of 40 dense 4 MiB tensors (the first READERS of them trickle); a
root mount with -o allow_other,http_timeout=T (default 5) is read by two users with no other
rights: once the server trickles (a byte every 0.9 s), user A starts READERS (default 30)
threads, each an O_DIRECT read of a different tensor's raw.tb (none cached), and after 2 s
user B reads index.json with O_DIRECT (served from memory: the tail fetched at mount), then a
buffered read of it, then an O_DIRECT read of the raw.tb of a tensor the server sends at once
(not cached: it needs a transfer, but not a slow one). For each setting: B's seconds, the connection's `waiting` count while
A's reads wait, how many FUSE READ requests the kernel had outstanding to the daemon at most,
and how many READ requests it sent. Usage (root): scripts/bench_fair.py [--readers 30] [--timeout 5]
[--settings 12,64,256]. About 1 minute per setting."""

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
import bench  # noqa: E402  (Mount, mount_owner)
import bench_far  # noqa: E402  (in_netns)
import fuse_trace  # noqa: E402
import harness  # noqa: E402
import httpserve  # noqa: E402

ATTACKER, VICTIM = 65534, 65533

# Run as a user: "direct PATH..." reads each PATH with O_DIRECT in a thread of its own, all at
# once; "time PATH" reads PATH with O_DIRECT, then buffered, and prints the seconds of each.
CHILD = r"""
import json, mmap, os, sys, threading, time
def direct(path):
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    buf = mmap.mmap(-1, 1 << 20)
    try:
        while os.readv(fd, [buf]) > 0:
            pass
    except OSError as e:
        return e.errno
    finally:
        os.close(fd)
    return 0
if sys.argv[1] == "direct":
    ts = [threading.Thread(target=direct, args=(p,)) for p in sys.argv[2:]]
    for t in ts: t.start()
    for t in ts: t.join()
else:
    t0 = time.monotonic(); e = direct(sys.argv[2]); t1 = time.monotonic()
    try:
        with open(sys.argv[2], "rb") as f: f.read()
    except OSError:
        pass
    t2 = time.monotonic()
    print(json.dumps({"direct": t1 - t0, "buffered": t2 - t1, "err": e, }))
"""


def as_user(uid, args):
    return subprocess.Popen([sys.executable, "-c", CHILD] + args, user=uid, group=uid,
                            extra_groups=[], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def waiting(conn):
    with open("/sys/fs/fuse/connections/%d/waiting" % conn) as f:
        return int(f.read())


def set_limits(conn, bg):
    for knob, v in (("max_background", bg), ("congestion_threshold", bg * 3 // 4)):
        with open("/sys/fs/fuse/connections/%d/%s" % (conn, knob), "w") as f:
            f.write(str(v))


def one(setting, data, offsets, args):
    out = {"max_background": setting}
    procs = []
    with httpserve.Hostile(data) as server, \
            bench.Mount(server.url("m.tbm"),
                        ["-o", "allow_other,http_timeout=%d" % args.timeout]) as m:
        try:
            conn = os.minor(os.stat(m.path).st_dev)
            if not os.path.isdir("/sys/fs/fuse/connections/%d" % conn):
                # inside `ip netns exec` /sys is a fresh sysfs, without fusectl
                subprocess.run(["mount", "-t", "fusectl", "none", "/sys/fs/fuse/connections"],
                               check=True)
            if setting:
                set_limits(conn, setting)
            with open("/sys/fs/fuse/connections/%d/max_background" % conn) as f:
                out["kernel max_background"] = int(f.read())
            alone = as_user(VICTIM, ["time", m.p("index.json")]).communicate(timeout=60)[0]
            out["victim alone s"] = json.loads(alone)["direct"]
            # the attacker's tensors trickle; the last one, the victim's, comes at once
            server.trickle, server.trickle_before = 0.9, offsets[args.readers]
            with fuse_trace.FuseTrace(m.path) as tr:
                procs.append(as_user(ATTACKER, ["direct"] + [
                    m.p("tensors", "blk.%d.weight" % i, "raw.tb") for i in range(args.readers)]))
                time.sleep(2)
                out["waiting"] = waiting(conn)
                for what, rel in (("index.json", ("index.json",)),
                                  ("raw.tb of a fast range", ("tensors", "blk.39.weight",
                                                              "raw.tb"))):
                    procs.append(as_user(VICTIM, ["time", m.p(*rel)]))
                    got = json.loads(procs[-1].communicate(timeout=600)[0])
                    out["victim %s O_DIRECT s" % what] = round(got["direct"], 4)
                    out["victim %s errno" % what] = got["err"]
                    out["victim %s buffered s" % what] = round(got["buffered"], 4)
                server.trickle = None
                server.done.set()
                procs[0].communicate(timeout=600)
            s = tr.summary()
            out["reads outstanding max"] = s["reads_outstanding_max"]
            out["READ requests"] = s["reads"]
        finally:
            server.done.set()
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait(60)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--readers", type=int, default=30)
    ap.add_argument("--timeout", type=int, default=5)
    ap.add_argument("--settings", default="0,64,256",
                    help="max_background values; 0: as the daemon leaves it")
    default = os.path.join(ROOT, "build-release", "src", "tbmfs")
    ap.add_argument("--tbmfs", default=default if os.path.exists(default)
                    else os.path.join(ROOT, "build", "src", "tbmfs"))
    args = ap.parse_args()
    if not bench_far.in_netns(__file__):
        return
    gen = harness.load_gen()
    ts = gen.many_tensors(40, numel=1 << 20, dtype="fp32", nm=(0, 0))
    c = gen.container(ts, architecture="custom")
    data, offsets = c.data, c.offsets
    args.readers = min(args.readers, 35)
    harness.TBMFS = os.path.abspath(args.tbmfs)
    print("load average before: %.2f %.2f %.2f" % os.getloadavg(), flush=True)
    with bench.mount_owner() as tmp:
        os.chmod(tmp, 0o755)  # the users' reads reach the mount points below it
        for setting in [int(x) for x in args.settings.split(",")]:
            print(json.dumps(one(setting, data, offsets, args)), flush=True)
    print("load average after: %.2f %.2f %.2f" % os.getloadavg())


if __name__ == "__main__":
    main()
