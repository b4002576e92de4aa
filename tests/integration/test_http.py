#!/usr/bin/python3
"""Integration test of HTTP sources against a private nginx on loopback: the tree and dense
checks of the local tests with a URL as SOURCE, random and concurrent reads, refusals at mount,
retried faults through a fault-injecting proxy, a file changed on the server, and the cache's
memory bound."""

import errno
import mmap
import os
import random
import struct
import threading
import time

import harness
import httpserve
import models
import test_dense
import test_tree
from harness import Mount, Skip, check, eq, mounted, read_all, read_json, run, run_tbmfs

gen = None


class Prefixed:
    """A suite whose case names start with prefix: the local checks, run over HTTP."""

    def __init__(self, suite, prefix):
        self._suite = suite
        self._prefix = prefix

    def case(self, name, fn, timeout=30):
        return self._suite.case(self._prefix + name, fn, timeout)

    def mount(self, source, args=(), env=None, foreground=False, name=None):
        return self._suite.mount(source, args, env, foreground,
                                 self._prefix + (name or "mount"))

    def __getattr__(self, name):
        return getattr(self._suite, name)


def read_direct(path, chunk=1 << 20):
    """The whole file read with O_DIRECT, past the kernel's page cache, so that every read
    reaches the daemon."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    buf = mmap.mmap(-1, chunk)
    try:
        out, off = [], 0
        while True:
            n = os.preadv(fd, [buf], off)
            if n <= 0:
                return b"".join(out)
            out.append(buf[:n])
            off += n
    finally:
        buf.close()
        os.close(fd)


def errno_name(fn, *args):
    try:
        fn(*args)
        return "0"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))


def one_line_refusal(suite, label, url, want, extra=()):
    """Mount and --check of url are refused: exit 1 (--check 2), one line naming url and
    containing want."""
    def go():
        mnt = os.path.join(suite.tmp, "refused")
        os.makedirs(mnt, exist_ok=True)
        rc, out, err = run_tbmfs(list(extra) + [url, mnt])
        try:
            eq(rc, 1, "mount exit (%s)" % err.strip())
            check(not mounted(mnt), "mounted anyway")
        finally:
            if mounted(mnt):
                harness.subprocess.run(["fusermount3", "-u", mnt], timeout=30)
        lines = err.strip().splitlines()
        eq(len(lines), 1, "stderr lines (%r)" % err)
        check(url in lines[0] and want in lines[0], "message %r lacks %r or %r"
              % (lines[0], url, want))
        rc, out, err = run_tbmfs(list(extra) + ["--check", url])
        eq(rc, 2, "--check exit (%s)" % err.strip())
        check(url in err and want in err, "--check message %r" % err)

    suite.case(label, go)


def tree_and_dense(suite, nginx, root):
    tensors = (models.sound_tensors(gen) + models.warning_tensors(gen)
               + [models.warning_counts_tensor(gen)]
               + models.name_tensors(gen, models.SHORT_NAMES + models.LONG_NAMES))
    path = os.path.join(root, "tree.tbm")
    cont, expects = models.write_container(gen, path, tensors, mtime=1234567890)
    test_tree.gen = gen
    test_tree.check_source(Prefixed(suite, "http tree: "), "container", nginx.url("tree.tbm"),
                           expects, test_tree.exact(cont.index_bytes), 1234567890, "llama",
                           {"hidden_size": 16, "num_layers": 1})

    test_dense.gen = gen
    dpath = os.path.join(root, "dense.tbm")
    _, dexpects = models.write_container(gen, dpath, test_dense.dense_tensors())
    with Mount(suite, nginx.url("dense.tbm")) as m:
        suite.case("http dense: mount", lambda: eq(m.start(), 0, "exit (%s)" % m.err.strip()))
        test_dense.views(suite, m, "http dense", dexpects)


def medium_tensors():
    mk = gen.make_tensor
    return [
        mk("a.fp32", [1024, 640], "fp32", (2, 4), 1),
        mk("b.fp16", [1536, 512], "fp16", (3, 8), 2),
        mk("c.bf16", [700, 1000], "bf16", (8, 16), 3),
        mk("d.fp64", [256, 600], "fp64", (16, 32), 4),
        mk("e.dense", [300, 1111], "fp32", (0, 0), 5),
        mk("f.small", [7, 9], "fp16", (1, 2), 6),
    ]


def reads(suite, nginx, root):
    """Random preads, then 8 readers at once for 10 s, every byte checked; a small cache so
    that blocks are evicted and fetched again while others read them."""
    path = os.path.join(root, "medium.tbm")
    _, expects = models.write_container(gen, path, medium_tensors())
    files = []
    for e in expects:
        for name, want in (("raw.tb", e.raw), ("weights.bin", e.weights), ("mask.bin", e.mask),
                           ("dense.f32", e.dense)):
            files.append((os.path.join(e.dir.decode(), name), want))
    with Mount(suite, nginx.url("medium.tbm"), ["-o", "cache_size=8M"]) as m:
        suite.case("http reads: mount with an 8 MiB cache",
                   lambda: eq(m.start(), 0, "exit (%s)" % m.err.strip()))

        def whole():
            for rel, want in files:
                eq(read_direct(m.p("tensors", rel)), want, rel + " (O_DIRECT)")

        suite.case("http reads: every view whole, O_DIRECT", whole, timeout=60)

        def random_preads():
            rnd = random.Random(5)
            for _ in range(400):
                rel, want = rnd.choice(files)
                off = rnd.randrange(0, len(want) + 16)
                size = rnd.choice([1, 7, 4096, 65536, 1 << 20, 3 << 20])
                eq(harness.pread(m.p("tensors", rel), off, size), want[off:off + size],
                   "%s [%d, +%d)" % (rel, off, size))

        suite.case("http reads: 400 random preads", random_preads, timeout=60)

        def concurrent():
            stop = time.monotonic() + 10
            results = []

            def reader(k):
                rnd = random.Random(100 + k)
                done = 0
                try:
                    while time.monotonic() < stop:
                        rel, want = rnd.choice(files)
                        p = m.p("tensors", rel)
                        if rnd.random() < 0.5:
                            eq(read_direct(p), want, rel + " (O_DIRECT)")
                            done += len(want)
                        else:
                            off = rnd.randrange(0, len(want) + 1)
                            size = rnd.randrange(1, 2 << 20)
                            eq(harness.pread(p, off, size), want[off:off + size],
                               "%s [%d, +%d)" % (rel, off, size))
                            done += min(size, len(want) - off)
                    results.append((k, done, None))
                except Exception as ex:  # reported by the case below
                    results.append((k, done, ex))

            threads = [threading.Thread(target=reader, args=(k,)) for k in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(40)
            eq(len(results), 8, "readers that finished")
            for k, done, ex in results:
                check(ex is None, "reader %d: %s" % (k, ex))
                check(done > 0, "reader %d verified nothing" % k)
            print("# 8 readers verified %.1f MiB in 10 s"
                  % (sum(d for _, d, _ in results) / 2 ** 20), flush=True)

        suite.case("http reads: 8 concurrent readers for 10 s, every byte verified", concurrent,
                   timeout=60)

        def npy_mmap():
            import numpy as np
            for e in expects:
                arr = np.load(m.p("tensors", e.dir.decode(), "dense.npy"), mmap_mode="r")
                eq(np.ascontiguousarray(arr).tobytes(), e.dense, "np.load of %s" % e.name)
                del arr

        suite.case("http reads: np.load(mmap_mode='r') of every dense.npy", npy_mmap)
        suite.case("http reads: daemon alive", lambda: check(m.alive(), "daemon gone"))


def held_blocks(suite, nginx, root):
    """Replies come straight from the cache's blocks, each held until written; a reply that
    spans two blocks holds both. Through a cache of two slots, 8 readers of such ranges at
    once would each hold one block and wait for a second for ever, unless a reader that would
    wait lets go and copies instead."""
    _, expects = models.write_container(gen, os.path.join(root, "held.tbm"), medium_tensors()[:3])
    files = [(os.path.join(e.dir.decode(), "raw.tb"), e.raw) for e in expects]
    with Mount(suite, nginx.url("held.tbm"), ["-o", "cache_size=2M"]) as m:
        suite.case("http held: mount with a cache of two blocks",
                   lambda: eq(m.start(), 0, "exit (%s)" % m.err.strip()))

        def spanning():
            stop = time.monotonic() + 5
            results = []

            def reader(k):
                rnd = random.Random(200 + k)
                buf = mmap.mmap(-1, 1 << 20)
                done = 0
                try:
                    while time.monotonic() < stop:
                        rel, want = rnd.choice(files)
                        fd = os.open(m.p("tensors", rel), os.O_RDONLY | os.O_DIRECT)
                        try:
                            off = rnd.randrange(0, len(want) // 4096) * 4096
                            n = os.preadv(fd, [buf], off)
                        finally:
                            os.close(fd)
                        eq(buf[:n], want[off:off + (1 << 20)], "%s [%d, +1 MiB)" % (rel, off))
                        done += n
                    results.append((k, done, None))
                except Exception as ex:  # reported by the case below
                    results.append((k, done, ex))

            threads = [threading.Thread(target=reader, args=(k,), daemon=True) for k in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(max(0, stop + 10 - time.monotonic()))
            eq(len(results), 8, "readers that finished (the others wait for ever)")
            for k, done, ex in results:
                check(ex is None, "reader %d: %s" % (k, ex))
                check(done > 0, "reader %d verified nothing" % k)

        suite.case("http held: 8 readers of 1 MiB O_DIRECT reads across blocks, 5 s",
                   spanning, timeout=30)
        suite.case("http held: daemon alive", lambda: check(m.alive(), "daemon gone"))


def refusals(suite, nginx, root, proxy):
    path = os.path.join(root, "small.tbm")
    models.write_container(gen, path, medium_tensors()[-1:])
    url = proxy.url("small.tbm")
    one_line_refusal(suite, "http refused: 404 at mount", nginx.url("missing.tbm"), "404")
    proxy.set(always=("status", 403))
    one_line_refusal(suite, "http refused: 403 at mount", url, "403")
    proxy.set(always=("norange", None))
    one_line_refusal(suite, "http refused: a server that ignores Range (200, whole file)",
                     url, "ignores Range")
    proxy.set()
    one_line_refusal(suite, "http refused: not a container (index length)",
                     nginx.url("notatbm.bin"), "not a .tbm container")

    def retried_at_mount():
        proxy.set([("status", 503)])
        with Mount(suite, url) as m:
            eq(m.start(), 0, "exit (%s)" % m.err.strip())
            check(mounted(m.path), "not mounted")
        eq([f for _, f in proxy.served[-2:]][:1], ["status"], "first answer was the 503")

    suite.case("http mount: a 503 at mount is retried", retried_at_mount)
    proxy.set()

    def header_sent():
        with Mount(suite, nginx.url("small.tbm"), ["-o", "http_header=X-Tbm-Test: hello 1"]) as m:
            eq(m.start(), 0, "exit (%s)" % m.err.strip())
        check(any('"hello 1"' in line for line in nginx.requests()),
              "X-Tbm-Test not in the access log")

    suite.case("http mount: -o http_header is sent", header_sent)

    def redirected():
        with Mount(suite, nginx.url("moved/small.tbm")) as m:
            eq(m.start(), 0, "exit (%s)" % m.err.strip())
            eq(read_json(m.p("model.json")).get("tensor_count"), 1, "tensor_count")
        check(any(line.startswith("GET /moved/small.tbm") and " 302 " in line
                  for line in nginx.requests()), "no 302 in the access log")

    suite.case("http mount: a redirect is followed", redirected)
    # The server's certificate is self-signed, so verification against the system's CAs
    # must refuse it.
    one_line_refusal(suite, "https refused: a certificate no system CA signed",
                     nginx.tls_url("small.tbm"), "certificate")
    rc, _, err = run_tbmfs(["-o", "http_header=nocolon", nginx.url("small.tbm"),
                            suite.tmp])
    suite.case("http mount: a header without a colon is refused",
               lambda: check(rc == 2 and "http_header=nocolon" in err, "rc %d: %r" % (rc, err)))


def faults(suite, nginx, root, proxy):
    """Faults while mounted, on reads that miss a 2 MiB cache (O_DIRECT past the kernel's):
    each passing one is retried and the read succeeds; one that lasts gives EIO, and the
    daemon serves again once the server does."""
    path = os.path.join(root, "faults.tbm")
    _, expects = models.write_container(gen, path, medium_tensors()[:3])
    e = expects[0]
    raw = lambda m: m.p("tensors", e.dir.decode(), "raw.tb")
    not_tail = lambda rng: not rng.startswith("bytes=-")
    # No read-ahead: a block read ahead at the end of one case could reach the proxy after the
    # next case set its fault, and take the fault meant for the reader's own block.
    m = Mount(suite, proxy.url("faults.tbm"), ["-o", "cache_size=2M,http_timeout=2,readahead=0"])
    with m:
        suite.case("http faults: mount through the proxy",
                   lambda: eq(m.start(), 0, "exit (%s)" % m.err.strip()))

        def retried(fault, min_secs=0.0):
            def go():
                proxy.set([fault], when=not_tail)
                before = len(proxy.served)
                t = time.monotonic()
                eq(read_direct(raw(m)), e.raw, "raw.tb")
                secs = time.monotonic() - t
                kinds = [f for _, f in proxy.served[before:]]
                check(fault[0] in kinds, "the fault was never applied: %r" % kinds)
                check(secs >= min_secs, "took %.2fs, under the %.1fs stall timeout"
                      % (secs, min_secs))
                proxy.set()
            return go

        suite.case("http faults: connection reset mid-body, retried", retried(("reset", None)))
        suite.case("http faults: 503 then success, retried", retried(("status", 503)))
        suite.case("http faults: body shorter than its Content-Range, retried",
                   retried(("short", None)))
        suite.case("http faults: a stall past http_timeout=2, retried",
                   retried(("stall", 6), 2.0), timeout=40)

        def lasting():
            proxy.set(always=("status", 503), when=not_tail)
            t = time.monotonic()
            eq(errno_name(read_direct, raw(m)), "EIO", "read while the server fails")
            secs = time.monotonic() - t
            check(secs < 10, "EIO took %.1fs" % secs)
            proxy.set()
            check(m.alive(), "daemon died")
            time.sleep(3.5)  # the failure is remembered 3 s (TBM_HTTP_FAIL_MEMORY_MS)
            eq(read_direct(raw(m)), e.raw, "raw.tb once the server answers again")

        suite.case("http faults: a failure that lasts 3 tries is EIO, the daemon stays",
                   lasting, timeout=40)
        proxy.set()


def changed(suite, nginx, root):
    path = os.path.join(root, "changing.tbm")
    tensors = medium_tensors()[:3]
    _, expects = models.write_container(gen, path, tensors, mtime=1500000000)
    # A cache smaller than the file: tensor 0's blocks are fetched again after the change,
    # tensor 2's, read last, are still cached then.
    m = Mount(suite, nginx.url("changing.tbm"), ["-o", "cache_size=4M"])
    with m:
        suite.case("http changed: mount", lambda: eq(m.start(), 0, "exit (%s)" % m.err.strip()))
        p = [m.p("tensors", e.dir.decode(), "raw.tb") for e in expects]
        suite.case("http changed: read before the change",
                   lambda: eq(read_direct(p[2]), expects[2].raw, "raw.tb"))

        def after():
            # Same length, other bytes and mtime: nginx's ETag (mtime-length) changes.
            data = bytearray(open(path, "rb").read())
            data[5000:5100] = b"\xff" * 100
            tmp = path + ".new"
            with open(tmp, "wb") as f:
                f.write(data)
            os.utime(tmp, (1600000000, 1600000000))
            os.replace(tmp, path)
            eq(errno_name(read_direct, p[0]), "EIO", "uncached range after the change")
            eq(errno_name(read_direct, p[2]), "EIO", "range cached before the change")
            eq(errno_name(read_direct, p[1]), "EIO", "another range after the change")
            hj = read_json(m.p("tensors", expects[0].dir.decode(), "header.json"))
            eq(hj.get("name"), expects[0].name, "header.json still reads")
            check(m.alive(), "daemon died")

        suite.case("http changed: ETag changed on the server: EIO from then on", after)


def bounded(suite, nginx, root):
    """1 GiB streamed through a 16 MiB cache: the daemon's peak memory stays under 64 MiB."""
    if os.environ.get("TBMFS_SANITIZED"):
        def skip():
            # shadow memory and the allocator's quarantine make a sanitized daemon's
            # footprint say nothing about ours
            raise Skip("sanitized build: VmHWM not held to the bound")

        suite.case("http memory: 1 GiB through a 16 MiB cache", skip)
        return
    path = os.path.join(root, "big.tbm")
    write_zero_tensor(path, "big", 1 << 28)  # 2^28 fp32: 1 GiB of weights
    m = Mount(suite, nginx.url("big.tbm"), ["-o", "cache_size=16M"])
    with m:
        suite.case("http memory: mount 1 GiB", lambda: eq(m.start(), 0,
                                                           "exit (%s)" % m.err.strip()),
                   timeout=120)

        def stream():
            fd = os.open(m.p("tensors", "big", "raw.tb"), os.O_RDONLY | os.O_DIRECT)
            buf = mmap.mmap(-1, 1 << 20)
            total = 0
            try:
                while True:
                    n = os.preadv(fd, [buf], total)
                    if n <= 0:
                        break
                    total += n
            finally:
                buf.close()
                os.close(fd)
            eq(total, 4096 + (1 << 30), "bytes streamed")
            with open("/proc/%d/status" % m.pid) as f:
                hwm = next(int(line.split()[1]) for line in f if line.startswith("VmHWM"))
            print("# daemon VmHWM %.1f MiB after 1 GiB read through a 16 MiB cache"
                  % (hwm / 1024), flush=True)
            check(hwm < 64 * 1024, "VmHWM %d KiB" % hwm)

        suite.case("http memory: 1 GiB through a 16 MiB cache, VmHWM < 64 MiB", stream,
                   timeout=120)


def spread_headers(suite, nginx, root):
    """1,000 dense tensors 1.2 MB apart (a sparse file): the mount fetches their headers, a few
    KiB each and all at once, not the 1 MiB blocks around them."""
    path = os.path.join(root, "spread.tbm")
    nw, ents = 300000, []
    stride = gen.HEADER_SIZE + 4 * nw
    with open(path, "wb") as f:
        for i in range(1000):
            hdr = struct.pack(gen.HEADER_FMT, gen.MAGIC, gen.VERSION, 0, 0, nw, 0,
                              gen.HEADER_SIZE, gen.HEADER_SIZE + 4 * nw, 0)
            f.seek(i * stride)
            f.write(hdr)
            ents.append({"name": "t%d" % i, "offset": i * stride, "shape": [nw], "nm_n": 0,
                         "nm_m": 0, "dtype": "fp32", "num_weights": nw, "num_mask_bytes": 0})
        f.truncate(1000 * stride)
        f.seek(0, 2)
        gen._write_index(f, {"architecture": "custom", "config": {}, "tensors": ents})

    def go():
        before = len(nginx.requests())
        t = time.monotonic()
        with Mount(suite, nginx.url("spread.tbm")) as m:
            eq(m.start(), 0, "exit (%s)" % m.err.strip())
            secs = time.monotonic() - t
            eq(len(os.listdir(m.p("tensors"))), 1000, "tensors")
        lines = nginx.requests()[before:]
        sent = sum(int(line.split()[4]) for line in lines)
        print("# spread 1,000-tensor mount: %.3f s, %d requests, %.1f MiB"
              % (secs, len(lines), sent / 2 ** 20), flush=True)
        check(sent < 64 << 20, "the mount fetched %d bytes in %d requests" % (sent, len(lines)))

    suite.case("http mount: 1,000 headers 1.2 MB apart cost KiB each, not blocks", go)


def write_zero_tensor(path, name, nw):
    """A dense fp32 tensor of nw zeros, written sparse: costs no time or disk."""
    hdr = struct.pack(gen.HEADER_FMT, gen.MAGIC, gen.VERSION, 0, 0, nw, 0, gen.HEADER_SIZE,
                      gen.HEADER_SIZE + 4 * nw, 0)
    with open(path, "wb") as f:
        f.write(hdr + bytes(gen.HEADER_SIZE - len(hdr)))
        f.truncate(gen.HEADER_SIZE + 4 * nw)
        f.seek(0, 2)
        gen._write_index(f, {"architecture": "custom", "config": {}, "tensors": [
            {"name": name, "offset": 0, "shape": [nw], "nm_n": 0, "nm_m": 0, "dtype": "fp32",
             "num_weights": nw, "num_mask_bytes": 0}]})


def main(suite):
    global gen
    gen = harness.load_gen()
    root = os.path.join(suite.tmp, "www")
    os.makedirs(root)
    with open(os.path.join(root, "notatbm.bin"), "wb") as f:
        f.write(b"\xff" * 100)
    with httpserve.Nginx(os.path.join(suite.tmp, "nginx"), root, tls=True) as nginx, \
            httpserve.Proxy(nginx.port) as proxy:
        tree_and_dense(suite, nginx, root)
        reads(suite, nginx, root)
        held_blocks(suite, nginx, root)
        refusals(suite, nginx, root, proxy)
        faults(suite, nginx, root, proxy)
        changed(suite, nginx, root)
        spread_headers(suite, nginx, root)
        bounded(suite, nginx, root)
        # mounts go before the servers do
        for mnt in list(suite.mounts):
            mnt.stop()


if __name__ == "__main__":
    run("integration-http", main)
