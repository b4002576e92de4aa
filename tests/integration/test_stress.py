#!/usr/bin/python3
"""Concurrency stress test: reader processes open random views of a mounted model at once and
pread random unaligned ranges (1 byte to 2 MiB), some with O_DIRECT, some through an mmap of
dense.npy, checking every byte against NumPy references and EIO on a broken tensor's unsafe
views, while the daemon's memory is sampled; then SIGTERM must end it with status 0. Before
that, page faults from many threads (issue 33): model.safetensors of fresh mounts copied out of
one MAP_SHARED mapping by threads faulting its chunks at once, for each madvise, every byte
checked and every run under a timeout (a deadlock fails it). TBMFS_STRESS_SECONDS sets how long
the readers run (default 10)."""

import errno
import json
import mmap
import multiprocessing
import os
import queue as queue_mod
import random
import signal
import subprocess
import threading
import time

import numpy as np

import harness
from harness import Mount, Skip, check, eq, mounted, read_all, run
from tbmref import Expect, parse_npy
from test_bridges import native_bytes, parse_safetensors

SECONDS = float(os.environ.get("TBMFS_STRESS_SECONDS") or 10)
# Reader processes by kind: plain pread through the page cache, O_DIRECT preads into aligned
# buffers, and np.load(mmap_mode='r') of dense.npy.
READERS = {"pread": 4, "odirect": 2, "mmap": 2}
MAX_LEN = 2 << 20
# The daemon's peak resident memory must stay under this. Measured VmHWM on this model with 8
# readers: 16-27 MiB (10 s and 40 s runs moving 3 and 13 GiB, with and without meson's
# MALLOC_PERTURB_; libfuse 3.14 grows to 10 worker threads, each keeping ~0.9 MiB of dense
# scratch and a reply buffer as large as the largest read, at most 1 MiB; 2.7 MiB idle). The
# bound is 1.8 times the highest peak seen; a per-read or per-open leak over gigabytes of reads
# would pass it.
RSS_BOUND_KIB = 48 << 10
SMALL = 1 << 16  # elements: tensors this small also get their selftest read
# scripts/faults.c as meson builds it; the runs of the page-fault case: (madvise, threads).
# 256 KiB chunks of the ~18 MiB file: every chunk's faults go to the daemon, from 8 to 16
# threads at once.
FAULTS = os.environ.get("FAULTS")
FAULT_RUNS = (("normal", 16), ("random", 8), ("sequential", 8))
FAULT_SECONDS = 60
gen = None


class Ref:
    """What one tensor directory must show: exact bytes per view, views that must fail with
    EIO, the dense.npy shape, whether its selftest is read."""

    def __init__(self, dirname, views, eio=(), shape=None, selftest=False):
        self.dir, self.views, self.eio, self.shape, self.selftest = (dirname, views, eio, shape,
                                                                     selftest)


def model_tensors():
    mk = gen.make_tensor
    good = [
        mk("fp32.2of4", [1024, 1024], "fp32", (2, 4), 1),
        mk("fp16.2of4", [1024, 1536], "fp16", (2, 4), 2),
        mk("bf16.dense", [768, 1024], "bf16", (0, 0), 3),
        mk("fp64.2of4", [512, 1024], "fp64", (2, 4), 4),
        mk("fp32.dense", [1000, 999], "fp32", (0, 0), 5),
        mk("fp16.3of8.straddle", [777, 1001], "fp16", (3, 8), 6),
        mk("small.fp32.2of4", [64, 96], "fp32", (2, 4), 7),
        mk("small.bf16.2of4", [48, 64], "bf16", (2, 4), 8),
        mk("small.fp64.1of4", [30, 40], "fp64", (1, 4), 9),
    ]
    # The mask region claims to start inside the weights: weights.bin is still served, the
    # other data views fail.
    broken = mk("broken.mask_in_weights", [256, 256], "fp32", (2, 4), 10,
                header={"masks_offset": 4096 + 8})
    return good, broken


def build(path):
    good, broken = model_tensors()
    cont = gen.container(good + [broken], config={"hidden_size": 1024})
    gen.write_file(path, cont.data)
    expects = [Expect(t.name, t.name.encode(), t.shape, t.header, cont.data, off,
                      cont.index_start) for t, off in zip(good, cont.offsets)]
    check(all(e.dense is not None and not e.problem for e in expects), "reference: sound tensors")
    return cont, expects, broken


def snapshot_refs(m, cont, expects, broken):
    """References: raw, weights, mask and dense from NumPy; dense.npy is the daemon's header,
    checked against the shape, followed by the NumPy dense bytes; header.json, index.json and
    model.json as first read (they must not change)."""
    refs = []
    for e in expects:
        d = m.p("tensors", e.name)
        npy = read_all(os.path.join(d, "dense.npy"))
        hdr, hlen, _ = parse_npy(npy)
        eq(hdr, {"descr": "<f4", "fortran_order": False, "shape": tuple(e.shape)},
           "%s dense.npy header" % e.name)
        hj = read_all(os.path.join(d, "header.json"))
        eq(json.loads(hj).get("problems"), [], "%s problems" % e.name)
        views = {"raw.tb": e.raw, "weights.bin": e.weights, "mask.bin": e.mask,
                 "dense.f32": e.dense, "dense.npy": npy[:hlen] + e.dense, "header.json": hj}
        refs.append(Ref(e.name, views, shape=tuple(e.shape),
                        selftest=e.h["num_weights"] <= SMALL and e.h["nm_m"] > 0))
    hj = read_all(m.p("tensors", broken.name, "header.json"))
    check(json.loads(hj).get("problems"), "the broken tensor has no problem")
    refs.append(Ref(broken.name, {"weights.bin": broken.weights, "header.json": hj},
                    eio=("raw.tb", "mask.bin", "dense.f32", "dense.npy")))
    root = Ref("", {"index.json": cont.index_bytes, "model.json": read_all(m.p("model.json"))})
    return refs, root


def fault_copy(suite, path, expects, advice, threads):
    """A fresh mount's model.safetensors (none of it in the page cache yet) copied out of one
    MAP_SHARED mapping by threads that fault its 256 KiB chunks in a random order, all at once;
    every tensor's bytes must be NumPy's, and the copy must end within FAULT_SECONDS."""
    if not FAULTS:
        raise Skip("FAULTS is not set (meson test sets it to its build of scripts/faults.c)")
    m = Mount(suite, path)
    try:
        eq(m.start(), 0, "tbmfs exit status (%s)" % m.err.strip()[:300])
        out = os.path.join(suite.tmp, "faults-%s.bin" % advice)
        p = subprocess.run(["timeout", str(FAULT_SECONDS), FAULTS, m.p("model.safetensors"),
                            str(threads), "256k", "7", advice, out], capture_output=True, text=True)
        eq(p.returncode, 0, "faults exit status (124: not done in %d s; stderr %r)"
           % (FAULT_SECONDS, p.stderr.strip()[:300]))
        data = read_all(out)
        eq(len(data), os.stat(m.p("model.safetensors")).st_size, "bytes copied")
        _, head, start = parse_safetensors(data)
        eq(sorted(head), sorted(e.name for e in expects), "tensors in the copy")
        for e in expects:
            a, b = head[e.name]["data_offsets"]
            eq(data[start + a: start + b], native_bytes(e), "%s: bytes (madvise %s, %d threads)"
               % (e.name, advice, threads))
    finally:
        m.stop()


# ---- readers (forked processes) --------------------------------------------------------------

def rand_len(rnd):
    return min(MAX_LEN, int(2 ** rnd.uniform(0, 21)))


def rand_off(rnd, size):
    """Anywhere in the file, now and then at or past its end."""
    return rnd.randrange(size + 1) if rnd.random() < 0.95 else size + rnd.randrange(4096)


def pread_full(fd, n, off):
    out = []
    got = 0
    while got < n:
        b = os.pread(fd, n - got, off + got)
        if not b:
            break
        out.append(b)
        got += len(b)
    return b"".join(out)


def first_diff(got, want):
    if len(got) != len(want):
        return "length %d, want %d" % (len(got), len(want))
    i = next(i for i in range(len(got)) if got[i] != want[i])
    return "first differing byte %d: %r, want %r" % (i, got[i: i + 8], want[i: i + 8])


class Reader:
    def __init__(self, kind, seed, mnt, refs, root):
        self.kind, self.mnt, self.refs, self.root = kind, mnt, refs, root
        self.rnd = random.Random(seed)
        self.st = {"kind": kind, "bytes": 0, "reads": 0, "opens": 0, "eio": 0, "selftests": 0,
                   "failures": []}

    def path(self, ref, view):
        if not ref.dir:
            return os.path.join(self.mnt, view)
        return os.path.join(self.mnt, "tensors", ref.dir, view)

    def fail(self, msg):
        if len(self.st["failures"]) < 5:
            self.st["failures"].append("%s reader %d: %s" % (self.kind, os.getpid(), msg))

    def verify(self, where, got, want):
        if got != want:
            self.fail("%s: %s" % (where, first_diff(got, want)))
        self.st["bytes"] += len(want)
        self.st["reads"] += 1

    def run(self, deadline):
        step = {"pread": self.pread_round, "odirect": self.odirect_round,
                "mmap": self.mmap_round}[self.kind]
        if self.kind == "odirect":
            self.buf = mmap.mmap(-1, MAX_LEN)
        try:
            while time.monotonic() < deadline:
                step()
        except Exception as e:  # report, never hang the parent
            self.fail("%s: %s" % (type(e).__name__, e))
        return self.st

    def eio_round(self, ref):
        for view in ref.eio:
            try:
                os.close(os.open(self.path(ref, view), os.O_RDONLY))
                self.fail("%s/%s: open succeeded, want EIO" % (ref.dir, view))
            except OSError as e:
                if e.errno != errno.EIO:
                    self.fail("%s/%s: %s, want EIO" % (ref.dir, view, errno.errorcode[e.errno]))
            self.st["eio"] += 1

    def selftest_round(self, ref):
        st = json.loads(read_all(self.path(ref, "selftest")))
        if st.get("name") != ref.dir or st.get("pass") is not True:
            self.fail("%s/selftest: %r" % (ref.dir, st))
        self.st["selftests"] += 1

    def pread_round(self):
        rnd = self.rnd
        ref = rnd.choice(self.refs + [self.root])
        r = rnd.random()
        if ref.eio and r < 0.2:
            return self.eio_round(ref)
        if ref.selftest and r < 0.05:
            return self.selftest_round(ref)
        view = rnd.choice(sorted(ref.views))
        want = ref.views[view]
        fd = os.open(self.path(ref, view), os.O_RDONLY)
        self.st["opens"] += 1
        try:
            if rnd.random() < 0.3:  # drop our cached pages so that the daemon serves again
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            for _ in range(rnd.randint(1, 4)):
                n, off = rand_len(rnd), rand_off(rnd, len(want))
                self.verify("%s/%s [%d, +%d)" % (ref.dir, view, off, n), pread_full(fd, n, off),
                            want[off: off + n])
        finally:
            os.close(fd)

    def odirect_round(self):
        rnd = self.rnd
        ref = rnd.choice([r for r in self.refs if "dense.npy" in r.views])
        view = rnd.choice(("raw.tb", "weights.bin", "mask.bin", "dense.f32", "dense.npy"))
        want = ref.views[view]
        fd = os.open(self.path(ref, view), os.O_RDONLY | os.O_DIRECT)
        self.st["opens"] += 1
        try:
            for _ in range(rnd.randint(1, 4)):
                off = rand_off(rnd, len(want)) // 4096 * 4096
                n = max(1, rand_len(rnd) // 4096) * 4096
                got = 0
                with memoryview(self.buf) as mv:
                    while got < n:
                        k = os.preadv(fd, [mv[got:n]], off + got)
                        if k == 0:
                            break
                        got += k
                self.verify("O_DIRECT %s/%s [%d, +%d)" % (ref.dir, view, off, n),
                            self.buf[:got], want[off: off + n])
        finally:
            os.close(fd)

    def mmap_round(self):
        rnd = self.rnd
        ref = rnd.choice([r for r in self.refs if "dense.npy" in r.views])
        path = self.path(ref, "dense.npy")
        if rnd.random() < 0.5:
            fd = os.open(path, os.O_RDONLY)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            os.close(fd)
        arr = np.load(path, mmap_mode="r")
        self.st["opens"] += 1
        if arr.shape != ref.shape or arr.dtype != np.dtype("<f4"):
            self.fail("%s/dense.npy: np.load gives %s %s" % (ref.dir, arr.shape, arr.dtype))
            return
        flat = arr.reshape(-1)
        dense = ref.views["dense.f32"]
        for _ in range(rnd.randint(1, 8)):
            i = rnd.randrange(flat.size)
            j = min(flat.size, i + max(1, rand_len(rnd) // 4))
            self.verify("mmap %s/dense.npy elements [%d, %d)" % (ref.dir, i, j),
                        np.asarray(flat[i:j]).tobytes(), dense[i * 4: j * 4])
        del flat, arr


def reader_main(kind, seed, deadline, mnt, refs, root, queue):
    queue.put(Reader(kind, seed, mnt, refs, root).run(deadline))


# ---- the parent ------------------------------------------------------------------------------

def status_kib(pid, field):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


class Sampler(threading.Thread):
    """Samples the daemon's VmRSS and thread count every 20 ms until stopped."""

    def __init__(self, pid):
        super().__init__(daemon=True)
        self.pid = pid
        self.peak_rss = self.peak_threads = 0
        self.samples = 0
        self.done = threading.Event()

    def run(self):
        while not self.done.is_set():
            try:
                self.peak_rss = max(self.peak_rss, status_kib(self.pid, "VmRSS"))
                self.peak_threads = max(self.peak_threads, status_kib(self.pid, "Threads"))
                self.samples += 1
            except OSError:
                return
            self.done.wait(0.02)


def collect(queue, procs, give_up):
    """Every reader's report; a reader that died (a SIGBUS from an mmap read, say) or is still
    running at give_up is a failure."""
    results = []
    while len(results) < len(procs) and time.monotonic() < give_up:
        try:
            results.append(queue.get(timeout=0.5))
        except queue_mod.Empty:
            if not any(p.is_alive() for p in procs):
                break
    lost = len(procs) - len(results)
    if lost:
        codes = [p.exitcode for p in procs]
        raise harness.Failure("%d reader(s) never reported; exit codes %s" % (lost, codes))
    return results


def stress(m, refs, root, out):
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    deadline = time.monotonic() + SECONDS
    procs = []
    for kind, count in READERS.items():
        for k in range(count):
            procs.append(ctx.Process(target=reader_main, args=(
                kind, 1000 * len(procs) + 7, deadline, m.path, refs, root, queue)))
    sampler = Sampler(m.pid)
    sampler.start()
    started = time.monotonic()
    for p in procs:
        p.start()
    results = []
    try:
        results = collect(queue, procs, time.monotonic() + SECONDS + 20)
    finally:
        for p in procs:
            p.join(5)
            if p.is_alive():
                p.kill()
                p.join()
        sampler.done.set()
        sampler.join()
    out["elapsed"] = time.monotonic() - started
    out["results"] = results
    out["peak_rss"] = sampler.peak_rss
    out["peak_threads"] = sampler.peak_threads
    out["samples"] = sampler.samples
    out["hwm"] = status_kib(m.pid, "VmHWM")
    failures = [f for r in results for f in r["failures"]]
    check(not failures, "%d failures, first: %s" % (len(failures), failures[:3]))
    check(m.alive(), "daemon gone")


def main(suite):
    global gen
    gen = harness.load_gen()
    path = os.path.join(suite.tmp, "stress.tbm")
    cont, expects, broken = build(path)
    m = Mount(suite, path, foreground=True)
    suite.case("mount (foreground)", lambda: (
        check(m.start() is None, "tbmfs -f exited %s: %s" % (m.rc, m.err.strip()[:300])),
        check(mounted(m.path), "not mounted")))
    if not mounted(m.path):
        m.stop()
        return
    state = {}

    def refs():
        state["refs"] = snapshot_refs(m, cont, expects, broken)

    suite.case("references: NumPy views, dense.npy headers, JSON snapshots", refs)
    if "refs" not in state:
        m.stop()
        return
    for advice, threads in FAULT_RUNS:
        suite.case("page faults: %d threads, madvise %s, fresh mount: every byte of "
                   "model.safetensors, no hang" % (threads, advice),
                   lambda a=advice, t=threads: fault_copy(suite, path, expects, a, t),
                   timeout=FAULT_SECONDS + 30)
    readers = sum(READERS.values())
    out = {}
    suite.case("stress: %d readers (%s) x %gs, every byte checked" % (
        readers, ", ".join("%d %s" % (n, k) for k, n in READERS.items()), SECONDS),
        lambda: stress(m, *state["refs"], out), timeout=SECONDS + 40)
    if "results" not in out:
        m.stop()
        return
    res = out["results"]
    total = sum(r["bytes"] for r in res)
    by_kind = {k: sum(r["bytes"] for r in res if r["kind"] == k) for k in READERS}
    print("# %d readers x %.1f s: %.1f MiB verified in %d reads over %d opens "
          "(pread %.1f MiB, O_DIRECT %.1f MiB, mmap %.1f MiB), %d EIO checks, %d selftests"
          % (readers, out["elapsed"], total / 2 ** 20, sum(r["reads"] for r in res),
             sum(r["opens"] for r in res), by_kind["pread"] / 2 ** 20,
             by_kind["odirect"] / 2 ** 20, by_kind["mmap"] / 2 ** 20,
             sum(r["eio"] for r in res), sum(r["selftests"] for r in res)))
    print("# daemon: peak VmRSS %.1f MiB over %d samples, VmHWM %.1f MiB, up to %d threads"
          % (out["peak_rss"] / 1024, out["samples"], out["hwm"] / 1024, out["peak_threads"]))

    def every_kind():
        eq(len(res), readers, "readers that reported")
        for k in READERS:
            check(by_kind[k] > 0, "%s readers verified nothing" % k)
        check(sum(r["eio"] for r in res) > 0, "no EIO check ran")
        check(sum(r["selftests"] for r in res) > 0, "no selftest ran")

    suite.case("stress: %.1f MiB verified; every reader kind, EIO checks and selftests ran"
               % (total / 2 ** 20), every_kind)
    def bounded():
        # shadow memory and the allocator's quarantine make a sanitized daemon's footprint
        # say nothing about ours
        if os.environ.get("TBMFS_SANITIZED"):
            raise Skip("sanitized build: VmHWM %d KiB not held to the bound" % out["hwm"])
        check(out["hwm"] < RSS_BOUND_KIB and out["peak_rss"] < RSS_BOUND_KIB,
              "VmHWM %d KiB, peak VmRSS %d KiB" % (out["hwm"], out["peak_rss"]))

    suite.case("stress: daemon VmHWM %.1f MiB < %d MiB" % (out["hwm"] / 1024,
                                                          RSS_BOUND_KIB >> 10), bounded)

    def term():
        m.proc.send_signal(signal.SIGTERM)
        eq(m.wait_exit(10), 0, "exit status after SIGTERM")
        check(not mounted(m.path), "mount left behind")

    suite.case("SIGTERM: exit 0, no mount left", term)
    m.stop()


if __name__ == "__main__":
    run("integration-stress", main)
