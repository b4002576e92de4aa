#!/usr/bin/python3
"""Far stores and engines' access (issue 33), side by side in one run, every figure the median
of RUNS rounds whose order rotates, cold each time (a fresh mount or a fresh process).

Everything runs on 127.0.0.1 inside a network namespace this script creates and deletes
(`ip netns add`, always deleted on the way out). This kernel has no netem (sch_netem is not
built: CONFIG_NET_SCH_NETEM is not set, and there is no modprobe), so links are made by
scripts/relay.c, a relay in front of each server in which every TCP connection is a link of
its own: half the round trip each way, a handshake's round trip before a connection's first
request, a rate cap per connection and direction, and a window of unacknowledged bytes
(--window, 6 MiB as Linux's largest receive buffer, so one stream runs at most at
window / RTT). Links:

  a  20 ms round trip, 25 MB/s per connection (one connection to a cloud object store)
  b  20 ms round trip, no cap
  c  loopback, no relay

Per link, the first RUNS x 512 MiB (--size-mib) of a fp32 tensor's raw.tb, read cold with
dd bs=1M: tbmfs http:// of nginx, tbmfs s3:// of s3rver, tbmfs http:// of a presigned URL
of the same s3rver object (s3rver's own speed, without the signing), `rclone mount :http:`,
one `curl -r` stream and `aria2c -x16 -s16` (the whole file into /dev/shm). With each tbmfs
read: the requests the server saw, their sizes, the connections the relay saw (total, most
open at once), the daemon's CPU and peak RSS. Then (--model-links, default a) the 2 GiB llama
model of bench_gguf.py read whole as model.safetensors over http:// and s3:// against aria2c
(and one curl stream where the link is not capped) of its .tbm; (--llama-links, default c)
llama.cpp's load and first evaluation of model.Q8_0.gguf from a fresh s3:// mount (and an
http:// one: s3rver is far slower than nginx) against a local copy (its pages dropped); and (unless --no-faults) the page-fault test: scripts/faults.c
touching a MAP_SHARED mapping of model.safetensors in random 4 MiB chunks from 1, 4 and 16
threads, on a fresh local mount with the source in the page cache, against a local copy of
the same file (in the page cache, and with its pages dropped) and a sequential dd of the
mount. The load average is printed before and after.

Usage (root): scripts/bench_far.py [RUNS] [--links a,b,c] [--size-mib N] [--model-links a]
[--llama-links c] [--threads 1,4,16] [--no-faults] [--tbmfs PATH] [--contenders LIST]
[--proto NAME=PATH ...] (a prototype's binary measured beside the rest). Inputs are kept in
/var/tmp/tbmfs-bench-far and /var/tmp/tbmfs-bench-gguf for the next run. RUNS=3 with the
defaults takes about 25 minutes."""

import argparse
import contextlib
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
import bench  # noqa: E402  (Mount, mount_owner, rotated, dd, daemon_cpu)
import bench_gguf  # noqa: E402  (llama_seconds, drop_file)
import bench_http  # noqa: E402  (write_big)
import bench_s3  # noqa: E402  (rclone_dd)
import harness  # noqa: E402
import httpserve  # noqa: E402
import s3serve  # noqa: E402

WORK = "/var/tmp/tbmfs-bench-far"
LLAMA = "/var/tmp/tbmfs-bench-gguf/llama-2g.tbm"
MIB = 1 << 20
LINKS = {"a": (20, 25e6), "b": (20, 0), "c": None}
LINK_TEXT = {"a": "20 ms RTT, 25 MB/s per connection", "b": "20 ms RTT, no cap",
             "c": "loopback"}
KEY, SECRET = "AKFARBENCH", "farbenchsecret"


def build(name):
    """scripts/NAME.c compiled into WORK; its path."""
    out = os.path.join(WORK, name)
    src = os.path.join(HERE, name + ".c")
    if not os.path.exists(out) or os.path.getmtime(out) < os.path.getmtime(src):
        subprocess.run(["gcc", "-std=gnu11", "-O2", "-Wall", "-Wextra", "-pthread", "-o", out,
                        src], check=True)
    return out


class Nginx(httpserve.Nginx):
    """The tests' nginx, its access log also naming each request's connection (first field)."""

    def conf(self):
        return super().conf().replace("log_format ranges '", "log_format ranges '$connection ")


class Relay:
    """scripts/relay.c in front of 127.0.0.1:upstream."""

    def __init__(self, prog, upstream, rtt_ms, rate, window):
        self.args = [prog, str(upstream), str(rtt_ms), str(int(rate)), str(window)]

    def __enter__(self):
        self.proc = subprocess.Popen(self.args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True)
        self.port = int(self.proc.stdout.readline().split()[1])
        return self

    def stats(self):
        self.proc.stdin.write("stats\n")
        self.proc.stdin.flush()
        f = self.proc.stdout.readline().split()
        return dict(zip(f[0::2], map(int, f[1::2])))

    def __exit__(self, *exc):
        self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self.proc.stdout.close()


class Direct:
    """No relay: the server's own port (link c)."""

    def __init__(self, port):
        self.port = port

    def __enter__(self):
        return self

    def stats(self):
        return {}

    def __exit__(self, *exc):
        pass


def rss_kib(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def with_peak_rss(pid, fn):
    """(fn(), the peak VmRSS of pid in KiB sampled every 20 ms while fn ran)."""
    peak = [rss_kib(pid)]
    done = threading.Event()

    def sample():
        while not done.wait(0.02):
            peak[0] = max(peak[0], rss_kib(pid))

    th = threading.Thread(target=sample)
    th.start()
    try:
        return fn(), peak[0]
    finally:
        done.set()
        th.join()


def timed(args, env=None):
    t = time.perf_counter()
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                   timeout=1800, env=env)
    return time.perf_counter() - t


def log_requests(lines):
    """(requests, distinct connections, sizes) of nginx access-log lines of range requests."""
    sizes, conns = [], set()
    for line in lines:
        f = line.split()
        if len(f) >= 6 and f[1] == "GET":
            conns.add(f[0])
            sizes.append(int(f[5]))
    return len(sizes), len(conns), sizes


class Bench:
    def __init__(self, args, tbmfs):
        self.args, self.tbmfs = args, tbmfs
        self.samples = {}

    def add(self, key, value):
        self.samples.setdefault(key, []).append(value)

    def med(self, key):
        v = self.samples.get(key)
        return statistics.median(v) if v else None

    # one tbmfs read, with its counts
    def tbmfs_read(self, link, what, source, rel, size, relay, env=None, counter=None,
                   prog=None):
        n0 = counter() if counter else None
        relay.stats()  # its next max_open counts from here
        harness.TBMFS = prog or self.tbmfs
        try:
            m = bench.Mount(source, [], env).__enter__()
        finally:
            harness.TBMFS = self.tbmfs
        with contextlib.ExitStack() as stack:
            stack.callback(m.stop)  # not `with m`: that would mount again
            n1 = counter() if counter else None
            s1 = relay.stats()
            cpu = bench.daemon_cpu(m.pid)
            secs, rss = with_peak_rss(m.pid, lambda: timed(
                ["dd", "if=" + m.p(rel), "of=/dev/null", "bs=1M"]))
            cpu = bench.daemon_cpu(m.pid) - cpu
            n2 = counter() if counter else None
            s2 = relay.stats()
        key = (link, what)
        self.add(key + ("MB/s",), size / secs / 1e6)
        self.add(key + ("cpu s/GB",), cpu / (size / 1e9))
        self.add(key + ("rss MiB",), rss / 1024)
        if counter:
            got = n2 if isinstance(n2, int) else None
            if got is None:  # nginx: log lines
                req, conns, sizes = log_requests(n2[len(n1):])
                self.add(key + ("requests",), req)
                self.add(key + ("MiB/request",), statistics.mean(sizes) / MIB if sizes else 0)
                self.add(key + ("max MiB/request",), max(sizes) / MIB if sizes else 0)
                self.add(key + ("server connections",), conns)
                self.add(key + ("mount requests",), len(n1) - len(n0))
            else:
                self.add(key + ("requests",), n2 - n1)
                self.add(key + ("mount requests",), n1 - n0)
                if s2:
                    self.add(key + ("MiB/request",), (s2["bytes_down"] - s1["bytes_down"]) /
                             max(1, n2 - n1) / MIB)
        if s2:
            self.add(key + ("link connections",), s2["connections"] - s1["connections"])
            self.add(key + ("most open",), s2["max_open"])

    def links(self, nginx, store, relay_prog, rawlen):
        big_rel = os.path.join("tensors", "big", "raw.tb")
        for link in self.args.links:
            spec = LINKS[link]
            mk = (lambda port: Relay(relay_prog, port, spec[0], spec[1], self.args.window)) \
                if spec else Direct
            with mk(nginx.port) as hrelay, mk(store.port) as srelay:
                hurl = "http://127.0.0.1:%d/" % hrelay.port
                s3env = dict(os.environ, AWS_ENDPOINT_URL="http://127.0.0.1:%d" % srelay.port,
                             AWS_ACCESS_KEY_ID=KEY, AWS_SECRET_ACCESS_KEY=SECRET)
                presigned = presign(store, srelay.port)

                def http():
                    self.tbmfs_read(link, "tbmfs http://", hurl + "big.tbm", big_rel, rawlen,
                                    hrelay, counter=nginx.requests)

                def s3():
                    self.tbmfs_read(link, "tbmfs s3://", "s3://models/big.tbm", big_rel, rawlen,
                                    srelay, env=s3env, counter=store.requests)

                def signed():
                    self.tbmfs_read(link, "tbmfs http:// presigned s3rver", presigned, big_rel,
                                    rawlen, srelay, counter=store.requests)

                def rclone():
                    s0 = hrelay.stats()
                    secs = bench_s3.rclone_dd(hurl, os.path.join(self.tmp, "rclone"),
                                              "big.tbm", rawlen)
                    self.add((link, "rclone mount :http:", "MB/s"), rawlen / secs / 1e6)
                    s1 = hrelay.stats()
                    if s1:
                        self.add((link, "rclone mount :http:", "link connections"),
                                 s1["connections"] - s0["connections"])

                def curl():
                    secs = timed(["curl", "-sSf", "-r", "0-%d" % (rawlen - 1), hurl + "big.tbm",
                                  "-o", "/dev/null"])
                    self.add((link, "curl -r (one stream)", "MB/s"), rawlen / secs / 1e6)

                def aria2():
                    whole = os.path.getsize(os.path.join(self.www, "big.tbm"))
                    self.add((link, "aria2c -x16 -s16", "MB/s"),
                             whole / aria2c(hurl + "big.tbm") / 1e6)

                def proto(name, prog, scheme):
                    def run():
                        if scheme == "http":
                            self.tbmfs_read(link, "%s http://" % name, hurl + "big.tbm", big_rel,
                                            rawlen, hrelay, counter=nginx.requests, prog=prog)
                        else:
                            self.tbmfs_read(link, "%s s3://" % name, "s3://models/big.tbm",
                                            big_rel, rawlen, srelay, env=s3env,
                                            counter=store.requests, prog=prog)
                    return run

                named = {"http": http, "s3": s3, "presigned": signed, "rclone": rclone,
                         "curl": curl, "aria2": aria2}
                order = [named[c] for c in self.args.contenders]
                for name, prog in self.args.proto:
                    order += [proto(name, prog, "http"), proto(name, prog, "s3")]
                for r in range(self.args.runs):
                    for fn in bench.rotated(order, r):
                        fn()
                    print("  link %s round %d done" % (link, r + 1), flush=True)
                if link in self.args.model_links:
                    self.model(link, hrelay, srelay, hurl, s3env)
                if link in self.args.llama_links:
                    self.llama(link, s3env, hurl)

    def model(self, link, hrelay, srelay, hurl, s3env):
        size = os.path.getsize(os.path.join(self.www, "llama.tbm"))
        capped = LINKS[link] and LINKS[link][1] > 0
        mlen = [None]

        def http():
            self.whole_read(link, "model.safetensors, tbmfs http://", hurl + "llama.tbm",
                            hrelay, None, mlen)

        def s3():
            self.whole_read(link, "model.safetensors, tbmfs s3://", "s3://models/llama.tbm",
                            srelay, s3env, mlen)

        def aria2():
            self.add((link, "llama.tbm, aria2c -x16 -s16", "MB/s"),
                     size / aria2c(hurl + "llama.tbm") / 1e6)

        def curl():
            secs = timed(["curl", "-sSf", hurl + "llama.tbm", "-o", "/dev/null"])
            self.add((link, "llama.tbm, curl (one stream)", "MB/s"), size / secs / 1e6)

        order = [http, s3, aria2] + ([] if capped else [curl])
        for r in range(self.args.runs):
            for fn in bench.rotated(order, r):
                fn()
        print("  link %s: model done" % link, flush=True)

    def whole_read(self, link, what, source, relay, env, mlen):
        s0 = relay.stats()
        with bench.Mount(source, [], env) as m:
            path = m.p("model.safetensors")
            size = os.path.getsize(path)
            cpu = bench.daemon_cpu(m.pid)
            secs, rss = with_peak_rss(m.pid, lambda: timed(
                ["dd", "if=" + path, "of=/dev/null", "bs=1M"]))
            cpu = bench.daemon_cpu(m.pid) - cpu
        s1 = relay.stats()
        self.add((link, what, "MB/s"), size / secs / 1e6)
        self.add((link, what, "rss MiB"), rss / 1024)
        self.add((link, what, "cpu s/GB"), cpu / (size / 1e9))
        if s1:
            self.add((link, what, "link connections"), s1["connections"] - s0["connections"])

    def llama(self, link, s3env, hurl):
        local = os.path.join(WORK, "local-model.Q8_0.gguf")
        if not os.path.exists(local):
            with bench.Mount(LLAMA) as m:
                subprocess.run(["cp", m.p("model.Q8_0.gguf"), local + ".part"], check=True)
            os.rename(local + ".part", local)
        for r in range(self.args.runs):
            for where in bench.rotated(["mount", "http mount", "local"], r):
                if where != "local":
                    source, env = (("s3://models/llama.tbm", s3env) if where == "mount"
                                   else (hurl + "llama.tbm", None))
                    with bench.Mount(source, [], env) as m:
                        cold = bench_gguf.llama_seconds(m.p("model.Q8_0.gguf"))
                        warm = bench_gguf.llama_seconds(m.p("model.Q8_0.gguf"))
                else:
                    bench_gguf.drop_file(local)
                    cold = bench_gguf.llama_seconds(local)
                    warm = bench_gguf.llama_seconds(local)
                self.add((link, "llama.cpp Q8_0 " + where, "cold s"), cold)
                self.add((link, "llama.cpp Q8_0 " + where, "warm s"), warm)
        print("  link %s: llama.cpp done" % link, flush=True)

    def faults(self):
        prog = build("faults")
        local = os.path.join(WORK, "local-model.safetensors")
        if not os.path.exists(local):
            with bench.Mount(LLAMA) as m:
                subprocess.run(["cp", m.p("model.safetensors"), local + ".part"], check=True)
            os.rename(local + ".part", local)
        bench.dd(LLAMA)  # the source into the page cache

        def run(path, threads, seed):
            out = subprocess.run([prog, path, str(threads), "4", str(seed)], check=True,
                                 capture_output=True, text=True, timeout=1800).stdout.split()
            f = dict(zip(out[0::2], out[1::2]))
            return int(f["bytes"]) / float(f["seconds"]) / 1e6

        for r in range(self.args.runs):
            cases = [("mount", t) for t in self.args.threads] + [("local", t) for t in
                                                                 self.args.threads]
            cases += [("local cold", t) for t in self.args.threads] + [("mount dd", 1)]
            for where, t in bench.rotated(cases, r):
                if where == "local":
                    run(local, 1, 99)  # into the page cache
                    self.add(("faults", "local copy, page cache", t), run(local, t, r))
                elif where == "local cold":
                    bench_gguf.drop_file(local)
                    self.add(("faults", "local copy, pages dropped", t), run(local, t, r))
                else:
                    with bench.Mount(LLAMA) as m:
                        path = m.p("model.safetensors")
                        if where == "mount dd":
                            secs, size = bench.dd(path)
                            self.add(("faults", "mount, sequential dd", t), size / secs / 1e6)
                        else:
                            cpu = bench.daemon_cpu(m.pid)
                            rate = run(path, t, r)
                            cpu = bench.daemon_cpu(m.pid) - cpu
                            self.add(("faults", "mount", t), rate)
                            self.add(("faults", "mount daemon cpu s", t), cpu)
        print("  faults done", flush=True)

    def report(self):
        runs = self.args.runs
        print("\nMedians of %d rounds (round order rotating); MB/s = 1e6 bytes/s" % runs)
        for link in self.args.links:
            print("\nlink %s: %s" % (link, LINK_TEXT[link]))
            rows = [w for (lk, w, k) in self.samples if lk == link and k == "MB/s"]
            seen = []
            for w in rows:
                if w not in seen:
                    seen.append(w)
            for w in seen:
                extras = ["%s %s" % (self.fmt(self.med((link, w, k))), k)
                          for k in ("requests", "MiB/request", "max MiB/request",
                                    "server connections", "link connections", "most open",
                                    "mount requests", "cpu s/GB", "rss MiB")
                          if self.med((link, w, k)) is not None]
                vals = ", ".join("%.0f" % x for x in self.samples[(link, w, "MB/s")])
                print("  %-36s %7.1f MB/s  (%s)%s" % (w, self.med((link, w, "MB/s")), vals,
                                                    ("\n  %38s" % "" + "; ".join(extras))
                                                    if extras else ""))
            self.ratios(link)
            for where, text in (("mount", "an s3:// mount"), ("http mount", "an http:// mount"),
                                ("local", "a local copy")):
                key = (link, "llama.cpp Q8_0 " + where)
                if self.med(key + ("cold s",)) is not None:
                    print("  llama.cpp load + first eval of model.Q8_0.gguf from %-16s cold "
                          "%.2f s, warm %.2f s" % (text, self.med(key + ("cold s",)),
                                                   self.med(key + ("warm s",))))
            m, loc = self.med((link, "llama.cpp Q8_0 mount", "cold s")), \
                self.med((link, "llama.cpp Q8_0 local", "cold s"))
            if m and loc:
                print("    ratio s3:// mount / local copy, cold: %.2fx (goal <= 1.15x)" % (m / loc))
        if ("faults", "mount", self.args.threads[0]) in self.samples:
            print("\npage faults: MAP_SHARED mapping of model.safetensors (%s), random 4 MiB "
                  "chunks, MB/s" % LLAMA)
            print("  %-34s" % "threads" + "".join("%9d" % t for t in self.args.threads))
            for w in ("mount", "local copy, page cache", "local copy, pages dropped"):
                print("  %-34s" % w + "".join("%9.0f" % self.med(("faults", w, t))
                                               for t in self.args.threads))
            print("  %-34s" % "mount: daemon CPU s" + "".join(
                "%9.2f" % self.med(("faults", "mount daemon cpu s", t)) for t in self.args.threads))
            seq = self.med(("faults", "mount, sequential dd", 1))
            print("  mount, sequential dd (fresh mount)  %.0f MB/s" % seq)
            top = self.args.threads[-1]
            print("  mount %d threads / sequential dd: %.2fx (goal >= 0.8x); %d / %d threads: "
                  "%.2fx" % (top, self.med(("faults", "mount", top)) / seq,
                             self.args.threads[min(1, len(self.args.threads) - 1)],
                             self.args.threads[0],
                             self.med(("faults", "mount",
                                       self.args.threads[min(1, len(self.args.threads) - 1)])) /
                             self.med(("faults", "mount", self.args.threads[0]))))

    @staticmethod
    def fmt(x):
        return "%.0f" % x if x >= 10 else "%.2f" % x

    def ratios(self, link):
        def r(a, b):
            x, y = self.med((link, a, "MB/s")), self.med((link, b, "MB/s"))
            return x / y if x and y else float("nan")

        h = "tbmfs http://"
        print("  ratios: http:// / aria2c -x16 %.2fx, / curl -r %.2fx, / rclone %.2fx; s3:// / "
              "http:// %.2fx; s3:// / presigned %.2fx" % (
                  r(h, "aria2c -x16 -s16"), r(h, "curl -r (one stream)"),
                  r(h, "rclone mount :http:"), r("tbmfs s3://", h),
                  r("tbmfs s3://", "tbmfs http:// presigned s3rver")))
        goal = {"a": "http:// >= 1.0x aria2c", "b": "http:// >= 1.0x curl and >= 1.5x rclone",
                "c": "http:// >= 1.0x curl"}[link]
        print("  (issue 33's goals: %s; s3:// >= 0.9x http://)" % goal)
        if self.med((link, "model.safetensors, tbmfs http://", "MB/s")):
            print("  2 GiB model: model.safetensors over http:// / aria2c of the .tbm %.2fx, "
                  "s3:// / http:// %.2fx" % (
                      r("model.safetensors, tbmfs http://", "llama.tbm, aria2c -x16 -s16"),
                      r("model.safetensors, tbmfs s3://", "model.safetensors, tbmfs http://")))


def presign(store, port):
    """A presigned URL of models/big.tbm through port: the signature covers the host and port."""
    real = store.port
    store.port = port
    try:
        client = store.client(KEY, SECRET)
    finally:
        store.port = real
    return client.generate_presigned_url(
        "get_object", Params={"Bucket": "models", "Key": "big.tbm"}, ExpiresIn=86400)


def aria2c(url):
    """Seconds of aria2c -x16 -s16 fetching url whole into /dev/shm (then removed)."""
    out = "tbmfs-bench-far.aria2"
    try:
        return timed(["aria2c", "-q", "-x16", "-s16", "--file-allocation=none",
                      "--allow-overwrite=true", "--auto-file-renaming=false", "-d", "/dev/shm",
                      "-o", out, url])
    finally:
        for suffix in ("", ".aria2"):
            if os.path.exists("/dev/shm/" + out + suffix):
                os.unlink("/dev/shm/" + out + suffix)


def inputs(args):
    os.makedirs(WORK, exist_ok=True)
    big = os.path.join(WORK, "big-%d.tbm" % args.size_mib)
    if not os.path.exists(big):
        print("writing %s ..." % big, flush=True)
        bench_http.write_big(big + ".part", args.size_mib, filler=False)
        os.rename(big + ".part", big)
    if (args.model_links or args.llama_links or not args.no_faults) and not os.path.exists(LLAMA):
        print("writing %s ..." % LLAMA, flush=True)
        os.makedirs(os.path.dirname(LLAMA), exist_ok=True)
        bench.sh([bench.PY, bench.GEN, "llama", LLAMA + ".part", "--layers", "16", "--hidden",
                  "2048", "--heads", "16", "--kv-heads", "8", "--intermediate", "5632", "--vocab",
                  "32000"])
        os.rename(LLAMA + ".part", LLAMA)
    return big, 4096 + args.size_mib * MIB


def inner(args):
    tbmfs = args.tbmfs
    harness.TBMFS = bench.TBMFS = tbmfs
    harness.CMD_TIMEOUT = 300
    print("tbmfs: %s; load average before: %.2f %.2f %.2f" % ((tbmfs,) + os.getloadavg()),
          flush=True)
    big, rawlen = inputs(args)
    relay_prog = build("relay")
    b = Bench(args, tbmfs)
    with bench.mount_owner() as tmp:
        b.tmp = tmp
        b.www = www = os.path.join(tmp, "www")
        os.makedirs(www)
        if os.stat(big).st_dev == os.stat(tmp).st_dev:
            os.link(big, os.path.join(www, "big.tbm"))
        else:
            shutil.copy(big, os.path.join(www, "big.tbm"))
        need_llama = bool(args.model_links or args.llama_links)
        if need_llama:
            os.symlink(LLAMA, os.path.join(www, "llama.tbm"))
        if args.links:
            why = s3serve.missing()
            if why:
                sys.exit("bench_far: %s" % why)
            with Nginx(os.path.join(tmp, "nginx"), www, workers=2, autoindex=True) as nginx, \
                    s3serve.S3Server(tmp) as store:
                store.key(KEY, SECRET)
                client = store.client(KEY, SECRET)
                client.create_bucket(Bucket="models")
                client.upload_file(big, "models", "big.tbm")
                if need_llama:
                    client.upload_file(LLAMA, "models", "llama.tbm")
                for f in (big, LLAMA if need_llama else big):
                    bench.dd(f)  # the servers' files in the page cache
                b.links(nginx, store, relay_prog, rawlen)
        if not args.no_faults:
            b.faults()
    b.report()
    print("\nload average after: %.2f %.2f %.2f" % os.getloadavg())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="?", type=int, default=3)
    ap.add_argument("--links", default="a,b,c")
    ap.add_argument("--size-mib", type=int, default=512)
    ap.add_argument("--model-links", default="a")
    ap.add_argument("--llama-links", default="c")
    ap.add_argument("--threads", default="1,4,16")
    ap.add_argument("--window", type=int, default=6 << 20)
    ap.add_argument("--no-faults", action="store_true")
    ap.add_argument("--contenders", default="http,s3,presigned,rclone,curl,aria2",
                    help="which of http,s3,presigned,rclone,curl,aria2 read the tensor")
    ap.add_argument("--proto", action="append", default=[], metavar="NAME=PATH",
                    help="another tbmfs binary, read over http:// and s3:// beside the others "
                         "(a prototype; repeatable)")
    default = os.path.join(ROOT, "build-release", "src", "tbmfs")
    ap.add_argument("--tbmfs", default=default if os.path.exists(default) else bench.TBMFS)
    args = ap.parse_args()
    split = lambda s: [x for x in s.split(",") if x]  # noqa: E731
    args.links = split(args.links)
    args.model_links = [x for x in split(args.model_links) if x in args.links]
    args.llama_links = [x for x in split(args.llama_links) if x in args.links]
    args.threads = [int(x) for x in split(args.threads)]
    args.tbmfs = os.path.abspath(args.tbmfs)
    args.contenders = split(args.contenders)
    args.proto = [(p.split("=", 1)[0], os.path.abspath(p.split("=", 1)[1])) for p in args.proto]
    if any(x not in LINKS for x in args.links):
        sys.exit("bench_far: links are a, b, c")
    if in_netns(__file__):
        inner(args)


def in_netns(script):
    """True inside the network namespace; outside, runs script again inside a namespace of
    its own (loopback up, nothing else), deletes the namespace whatever happens, and exits
    with the inner run's status. Mounts made inside live in the mount namespace `ip netns
    exec` makes, so none outlives the run either."""
    # a SIGTERM (timeout(1) signals its whole process group) unwinds through the finally
    # blocks, which unmount and stop what was started: a daemon left running would keep its
    # mount namespace, and so its mount, alive
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(143))
    if os.environ.get("TBMFS_FAR_NETNS"):
        return True
    # what the runs need, installed first: inside the namespace there is no network
    for deps in ("install-deps.sh", "install-bench-deps.sh"):
        subprocess.run([os.path.join(HERE, deps)], check=True)
    ns = "tbmfs-far-%d" % os.getpid()
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        subprocess.run(["ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up"], check=True)
        env = dict(os.environ, TBMFS_FAR_NETNS=ns)
        rc = subprocess.run(["ip", "netns", "exec", ns, sys.executable, os.path.abspath(script)]
                            + sys.argv[1:], env=env).returncode
    finally:
        subprocess.run(["ip", "netns", "del", ns])
    sys.exit(rc)


if __name__ == "__main__":
    tempfile.tempdir = None
    main()
