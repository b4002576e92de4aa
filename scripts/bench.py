#!/usr/bin/python3
"""Throughput of reads through a tbmfs mount, measured side by side in one run.

Generates its inputs, mounts them, and prints one table: each figure the median of
several runs, with its ratio to the page-cache baseline (or to the row it is compared
with). Not part of `meson test`: these machines are shared and noisy, so only the
ratios of one run mean anything. Usage: scripts/bench.sh [RUNS]."""

import contextlib
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TBMFS = os.path.join(ROOT, "build", "src", "tbmfs")
GEN = os.path.join(ROOT, "scripts", "gen_model.py")
PY = "/usr/bin/python3"
MIB = 1 << 20


def sh(args, **kw):
    return subprocess.run(args, check=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          timeout=600, **kw)


def dd(path, direct=False):
    """Seconds to read path with dd bs=1M (stdout discarded), and bytes read."""
    args = ["dd", "if=" + path, "of=/dev/null", "bs=1M"] + (["iflag=direct"] if direct else [])
    t0 = time.perf_counter()
    out = sh(args).stderr.decode()
    secs = time.perf_counter() - t0
    size = int(re.search(r"^(\d+) bytes", out, re.M).group(1))
    return secs, size


# The integration tests' mount helper, shared so that the bench mounts and takes mounts
# down the same way the tests do: harness.Mount mounts tbmfs on a fresh directory under its
# owner's tmp and finds the daemon; stop() always unmounts.
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
os.environ.setdefault("TBMFS", TBMFS)
import harness  # noqa: E402

harness.TBMFS = TBMFS
harness.CMD_TIMEOUT = 120


class _Owner:
    """What harness.Mount needs of its suite: a directory for mount points and a list of
    live mounts (which main() takes down on the way out, whatever happened)."""

    def __init__(self, tmp):
        self.tmp, self.mounts = tmp, []


OWNER = None


class Mount(harness.Mount):
    """A tbmfs mount of source for a with block; path is its mount point, pid its daemon."""

    def __init__(self, source, args=(), env=None):
        super().__init__(OWNER, source, args, env=env)

    def __enter__(self):
        rc = self.start()
        if rc != 0 or not harness.mounted(self.path):
            self.stop()
            raise RuntimeError("tbmfs %s: exit %s: %s" % (self.source, rc, self.err.strip()))
        return self


class PeerMount:
    """The same for a peer daemon (squashfuse, squashfuse_ll) of a squashfs image; both
    return once mounted and run in the background."""

    def __init__(self, prog, image):
        self.prog, self.image = prog, image
        self.pid = None  # the harness skips the pids of the mounts it lists: a peer's is not known
        self.path = tempfile.mkdtemp(dir=OWNER.tmp, prefix="peer-")

    def stop(self):
        if harness.mounted(self.path):
            subprocess.run(["fusermount3", "-u", self.path], capture_output=True, timeout=60)
        if harness.mounted(self.path):
            subprocess.run(["umount", "-l", self.path], capture_output=True, timeout=60)
        if self in OWNER.mounts:
            OWNER.mounts.remove(self)

    def __enter__(self):
        OWNER.mounts.append(self)
        sh(["timeout", "120", self.prog, self.image, self.path])
        if not harness.mounted(self.path):
            self.stop()
            raise RuntimeError("%s %s did not mount" % (self.prog, self.image))
        return self

    def __exit__(self, *exc):
        self.stop()
        return False


def timed_mount(fs, source):
    """(seconds the mount command took to return, the live mount)."""
    if fs == "tbmfs":
        m = Mount(source)
        # time the command alone: the daemon's pid is looked up after the clock stops
        find, m.find_daemon = m.find_daemon, lambda skip=(): None
        t0 = time.perf_counter()
        m.__enter__()
        secs = time.perf_counter() - t0
        m.pid = find()
        return secs, m
    m = PeerMount(fs, source)
    t0 = time.perf_counter()
    m.__enter__()
    return time.perf_counter() - t0, m


@contextlib.contextmanager
def taken_down(m):
    """A with block over m, a mount timed_mount made, that takes it down on the way out (m's own
    with block would mount a second time, stacked on the first)."""
    try:
        yield m
    finally:
        m.stop()


def gbps(size, secs):
    return size / secs / 1e9


def rate(path, direct=False):
    """GB/s of one dd of path."""
    secs, size = dd(path, direct)
    return gbps(size, secs)


def three_reads(path):
    """The three reads of a file of a fresh mount: first buffered read, a cached re-read,
    and an O_DIRECT read (which bypasses the cache). GB/s of each."""
    first = rate(path)
    cached = rate(path)
    direct = rate(path, direct=True)
    return {"first": first, "cached": cached, "direct": direct}


def view_reads(source, rel, args=(), env=None):
    with Mount(source, args, env) as m:
        return three_reads(m.p(rel))


NUMPY_SCRIPT = r"""
import json, struct, sys
import numpy as np
src, name, out = sys.argv[1:]
with open(src, "rb") as f:
    f.seek(-4, 2); n = struct.unpack("<I", f.read(4))[0]
    f.seek(-4 - n, 2); index = json.loads(f.read(n))
e = next(t for t in index["tensors"] if t["name"] == name)
hdr = np.fromfile(src, dtype=np.uint8, count=64, offset=e["offset"])
nw, nmask, woff, moff = struct.unpack("<4Q", hdr[16:48].tobytes())
m = struct.unpack("<I", hdr[12:16].tobytes())[0]
w = np.fromfile(src, dtype="<f2", count=nw, offset=e["offset"] + woff).astype(np.float32)
mask = np.fromfile(src, dtype=np.uint8, count=nmask, offset=e["offset"] + moff)
bits = np.unpackbits(mask[:, None], axis=1, bitorder="little")[:, :m].reshape(-1)[:nw]
w[bits == 0] = 0
np.save(out, w.reshape(e["shape"]))
"""


def numpy_vs_cp(source, name, runs):
    out = "/dev/shm/tbmfs-bench.npy"
    script = os.path.join(tempfile.gettempdir(), "tbmfs-bench-numpy.py")
    with open(script, "w") as f:
        f.write(NUMPY_SCRIPT)

    def numpy_once():
        t0 = time.perf_counter()
        sh([PY, script, source, name, out])
        return time.perf_counter() - t0

    def cp_once():
        with Mount(source) as m:
            t0 = time.perf_counter()
            sh(["cp", m.p("tensors", name, "dense.npy"), out])
            return time.perf_counter() - t0

    try:
        np_secs = statistics.median(numpy_once() for _ in range(runs))
        cp_secs = statistics.median(cp_once() for _ in range(runs))
        with Mount(source) as m:
            same = sh(["cmp", m.p("tensors", name, "dense.npy"), out]).returncode == 0
    finally:
        if os.path.exists(out):
            os.unlink(out)
    return np_secs, cp_secs, same


def peak_rss_streaming(source, rel, total):
    """Daemon VmHWM (KiB) after streaming total bytes of one dense view."""
    with Mount(source) as m:
        pid = m.pid
        path = m.p(rel)
        done = 0
        while done < total:
            _, size = dd(path, direct=True)
            done += size
        with open("/proc/%d/status" % pid) as f:
            status = f.read()
    return int(re.search(r"VmHWM:\s+(\d+)", status).group(1)), done


KNOBS = (("default: 512 KiB requests, raw spliced", []),
         ("-o nosplice: 512 KiB requests, raw read by pread", ["-o", "nosplice"]),
         ("-o max_read=1048576: 1 MiB requests, pread", ["-o", "max_read=1048576"]))


def knobs(source, name, runs):
    """The request-size and splice choices side by side, rounds interleaved:
    {(knob label, view, how): median GB/s}."""
    samples = {}
    for _ in range(runs):
        for label, args in KNOBS:
            for view in ("raw.tb", "dense.f32"):
                got = view_reads(source, "tensors/%s/%s" % (name, view), args)
                for how in ("first", "direct"):
                    samples.setdefault((label, view, how), []).append(got[how])
    return {key: statistics.median(v) for key, v in samples.items()}


def mount_and_find(source, runs):
    mounts, finds = [], []
    for _ in range(runs):
        secs, m = timed_mount("tbmfs", source)
        mounts.append(secs)
        with taken_down(m):
            t0 = time.perf_counter()
            n = len(sh(["find", m.path]).stdout.splitlines())
            finds.append(time.perf_counter() - t0)
    return statistics.median(mounts), statistics.median(finds), n


UNCHECKED = {"TBMFS_NO_CHANGE_CHECK": "1"}
CHECK_READS = (("dense.f32 (computed; checked after its reads)", "dense.f32", []),
               ("raw.tb (spliced; checked before each splice)", "raw.tb", []),
               ("raw.tb -o nosplice (checked after its read)", "raw.tb",
                ["-o", "nosplice"]))


def change_check(source, name, runs):
    """Figure 9: {(row, how, checked): median GB/s} of reads with the source's change check
    and without it (TBMFS_NO_CHANGE_CHECK=1). First reads: one per fresh mount of each, which
    goes first alternating; O_DIRECT reads: both mounts live side by side, 4 reads of each per
    round, alternating, so that the machine's swings fall on both alike."""
    samples = {}
    for r in range(runs):
        for label, view, args in CHECK_READS:
            rel = "tensors/%s/%s" % (name, view)
            order = rotated([True, False], r)
            for checked in order:
                with Mount(source, args, None if checked else UNCHECKED) as m:
                    samples.setdefault((label, "first", checked), []).append(rate(m.p(rel)))
            with Mount(source, args) as on, Mount(source, args, UNCHECKED) as off:
                for _ in range(4):
                    for checked in order:
                        m = on if checked else off
                        cpu = daemon_cpu(m.pid)
                        secs, size = dd(m.p(rel), direct=True)
                        samples.setdefault((label, "direct", checked), []).append(
                            gbps(size, secs))
                        samples.setdefault((label, "cpu", checked), []).append(
                            (daemon_cpu(m.pid) - cpu) / size * (1 << 30))
    return {key: statistics.median(v) for key, v in samples.items()}


def daemon_cpu(pid):
    """Seconds the daemon's threads have run on a CPU (schedstat: nanoseconds, not ticks)."""
    total = 0
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/schedstat" % (pid, tid)) as f:
                total += int(f.read().split()[0])
        except (FileNotFoundError, ProcessLookupError):  # a thread gone since the listing
            pass
    return total / 1e9


def fstat_seconds(path, n=200000):
    """Median seconds of one fstat of path, over 5 batches of n (Python's own call overhead
    included, so an upper bound on what the daemon's C call costs)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(n):
                os.fstat(fd)
            times.append((time.perf_counter() - t0) / n)
        return statistics.median(times)
    finally:
        os.close(fd)


def print_change_check(got, runs, source):
    print("\n9. the change check's cost, fp16 2:4 tensor, GB/s (medians of %d first reads and "
          "%d O_DIRECT; without: TBMFS_NO_CHANGE_CHECK=1):" % (runs, 4 * runs))
    print("   %-62s %8s %8s %7s" % ("", "checked", "without", "cost"))
    for label, _, _ in CHECK_READS:
        for how in ("first", "direct"):
            on, off = got[(label, how, True)], got[(label, how, False)]
            print("   %-62s %8.2f %8.2f %6.1f%%" % ("%s, %s" % (label, {
                "first": "first read", "direct": "O_DIRECT"}[how]), on, off,
                100 * (1 - on / off)))
        on, off = got[(label, "cpu", True)], got[(label, "cpu", False)]
        print("   %-62s %8.1f %8.1f %6.1f%%" % ("%s, daemon CPU ms per GiB (O_DIRECT)" % label,
                                             on * 1e3, off * 1e3, 100 * (on / off - 1)))
    # The check is one fstat per request, after its last read of the source (or before its
    # splice): its cost against a 512 KiB request's time at the fastest rate above, which
    # throughput alone cannot resolve on a noisy machine.
    per = fstat_seconds(source)
    fastest = max(got.values())
    request = 524288 / (fastest * 1e9)
    print("   one fstat (the check): %.2f us; a 512 KiB request at %.2f GB/s: %.0f us; the "
          "check's share of it: %.2f%%" % (per * 1e6, fastest, request * 1e6,
                                           100 * per / request))


def drop_caches():
    sh(["sync"])
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def cold_mounts(work, runs):
    """Figure 10: {(column, model): median seconds} of mounting a 2 GiB and a 1 MiB model
    with the page cache dropped first, tbmfs on the .tbm, the peers on an uncompressed
    squashfs image holding the same .tbm (the same bytes, as a peer would serve them)."""
    models = {}
    for label, shape in (("2 GiB", "32768,32768"), ("1 MiB", "512,1024")):
        src = os.path.join(work, "cold-%s.tbm" % label.replace(" ", ""))
        sh([PY, GEN, "tensor", src, "--shape", shape, "--dtype", "fp16", "--nm", "2:4",
            "--name", "w"])
        folder = src + ".d"
        os.makedirs(folder)
        os.link(src, os.path.join(folder, os.path.basename(src)))
        squash(folder, src + ".sqfs")
        models[label] = (src, src + ".sqfs", os.path.getsize(src))
    samples = {}
    for r in range(runs):
        for label, (src, image, _) in models.items():
            for fs in rotated(COLUMNS, r):
                drop_caches()
                secs, m = timed_mount(fs, src if fs == "tbmfs" else image)
                m.stop()
                samples.setdefault((fs, label), []).append(secs)
    for src, image, _ in models.values():
        subprocess.run(["rm", "-rf", src, src + ".d", image])
    return {key: statistics.median(v) for key, v in samples.items()}, models


def print_cold_mounts(got, models, runs):
    print("\n10. cold mount (page cache dropped first), seconds (median of %d):" % runs)
    print("   %-26s %10s %14s %14s" % ("model", *COLUMNS))
    for label, (_, _, size) in models.items():
        print("   %-26s %10.3f %14.3f %14.3f" % ("%s (%d bytes)" % (label, size),
                                                 *(got[(fs, label)] for fs in COLUMNS)))
    print("   %-26s %10.2f %14.2f %14.2f" % ("ratio 2 GiB / 1 MiB",
                                             *(got[(fs, "2 GiB")] / got[(fs, "1 MiB")]
                                               for fs in COLUMNS)))


PEERS = ("squashfuse", "squashfuse_ll")
COLUMNS = ("tbmfs",) + PEERS


def squash(src, image):
    """An uncompressed squashfs image of the directory src, as a user who does not use
    tbmfs would serve its extracted views: no compression of inodes, data, fragments or
    xattrs."""
    sh(["mksquashfs", src, image, "-noI", "-noD", "-noF", "-noX", "-quiet", "-no-progress",
        "-noappend"])


def extract_views(reads, out):
    """Copies each view that the peer table reads out of a tbmfs mount into out."""
    for _, source, rel in reads:
        os.makedirs(os.path.dirname(os.path.join(out, rel)), exist_ok=True)
        with Mount(source) as m:
            sh(["cp", m.p(rel), os.path.join(out, rel)])


def copy_tree_shape(source, out):
    """The tree of a tbmfs mount with the same names, kinds, modes and sizes, the files
    sparse: the metadata figures read no content, and copying 140,000 files' contents
    through the mount would take longer than the whole benchmark. Number of entries."""
    n = 0
    with Mount(source) as m:
        for top, dirs, files in os.walk(m.path):
            rel = os.path.relpath(top, m.path)
            dest = os.path.normpath(os.path.join(out, rel))
            os.makedirs(dest, exist_ok=True)
            n += 1
            for name in files:
                st = os.lstat(os.path.join(top, name))
                path = os.path.join(dest, name)
                with open(path, "wb") as f:
                    f.truncate(st.st_size)
                os.chmod(path, st.st_mode & 0o7777)
                n += 1
    for top, dirs, _ in os.walk(out):
        for name in dirs:
            os.chmod(os.path.join(top, name), 0o555)
    return n


def fs_mount(fs, source, image):
    return Mount(source) if fs == "tbmfs" else PeerMount(fs, image)


def rotated(seq, r):
    """seq started at its r-th element: no column always goes first in a round."""
    r %= len(seq)
    return seq[r:] + seq[:r]


def peer_reads(reads, views, image, runs):
    """{(column, view label, how): median GB/s} of the three reads of each view on a fresh
    mount of tbmfs and of each peer, and ext4's two reads of the extracted file from its
    page cache (the limit: what a kernel file system serves the same bytes at)."""
    samples = {}
    for r in range(runs):
        for label, source, rel in reads:
            plain = os.path.join(views, rel)
            samples.setdefault(("ext4", label, "first"), []).append(rate(plain))
            samples.setdefault(("ext4", label, "cached"), []).append(rate(plain))
            for fs in rotated(COLUMNS, r):
                with fs_mount(fs, source, image) as m:
                    got = three_reads(os.path.join(m.path, rel))
                for how, speed in got.items():
                    samples.setdefault((fs, label, how), []).append(speed)
    return {key: statistics.median(v) for key, v in samples.items()}


def walk_times(path):
    """(seconds of find PATH | wc -l, entries, seconds of ls -lR PATH > /dev/null after it)."""
    t0 = time.perf_counter()
    n = len(sh(["find", path]).stdout.splitlines())
    find_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    subprocess.run(["ls", "-lR", path], check=True, stdout=subprocess.DEVNULL, timeout=600)
    return find_s, n, time.perf_counter() - t0


def peer_meta(source, tree, image, runs):
    """{(column, figure): median seconds} of mounting the index, find and ls -lR over it;
    ext4 walks the tree of the same shape; entries seen by each column."""
    samples, entries = {}, {}
    for r in range(runs):
        find_s, entries["ext4"], ls_s = walk_times(tree)
        samples.setdefault(("ext4", "find"), []).append(find_s)
        samples.setdefault(("ext4", "ls"), []).append(ls_s)
        for fs in rotated(COLUMNS, r):
            secs, m = timed_mount(fs, source if fs == "tbmfs" else image)
            with taken_down(m):
                find_s, entries[fs], ls_s = walk_times(m.path)
            for key, v in (("mount", secs), ("find", find_s), ("ls", ls_s)):
                samples.setdefault((fs, key), []).append(v)
    return {key: statistics.median(v) for key, v in samples.items()}, entries


def print_peers(reads, got, meta, entries, runs):
    print("\n8. tbmfs beside the read-only FUSE mounts a user who does not use tbmfs would serve")
    print("   the extracted files with: squashfuse and squashfuse_ll over an uncompressed squashfs")
    print("   image (mksquashfs -noI -noD -noF -noX); ext4 page cache is the limit. Median of %d,"
          % runs)
    print("   rounds interleaved, a fresh mount for each read; ratio = tbmfs to the best peer")
    print("   (above 1.0: tbmfs ahead). 256 MiB files, GB/s:")
    head = "   %-42s %7s %7s %10s %13s %7s"
    row = "   %-42s %7s %7.2f %10.2f %13.2f %7.2f"
    print(head % ("read", "ext4", "tbmfs", "squashfuse", "squashfuse_ll", "ratio"))
    for label, _, _ in reads:
        for how, text in (("first", label + ", first read"), ("direct", "  same, O_DIRECT"),
                          ("cached", "  same, second read (cached)")):
            ext4 = got.get(("ext4", label, how))
            peers = [got[(p, label, how)] for p in PEERS]
            print(row % (text, "%.2f" % ext4 if ext4 else "(disk)", got[("tbmfs", label, how)],
                         peers[0], peers[1], got[("tbmfs", label, how)] / max(peers)))
    print("\n   index of %s tensors (%s entries), seconds:"
          % ("{:,}".format(META_TENSORS), "{:,}".format(entries["tbmfs"])))
    for key, text in (("mount", "mount (command returns)"), ("find", "find MNT | wc -l"),
                      ("ls", "ls -lR MNT > /dev/null, after find")):
        ext4 = meta.get(("ext4", key))
        peers = [meta[(p, key)] for p in PEERS]
        print("   %-42s %7s %7.3f %10.3f %13.3f %7.2f" % (
            text, "%.3f" % ext4 if ext4 is not None else "-", meta[("tbmfs", key)], peers[0],
            peers[1], min(peers) / meta[("tbmfs", key)]))
    if len(set(entries.values())) != 1:
        print("   ENTRY COUNTS DIFFER: %s" % entries)


META_TENSORS = 20000


def figures(work, runs, want):
    fp16 = os.path.join(work, "fp16.tbm")
    fp32 = os.path.join(work, "fp32.tbm")
    many = os.path.join(work, "many.tbm")
    print("generating inputs in %s ..." % work, flush=True)
    sh([PY, GEN, "tensor", fp16, "--shape", "8192,8192", "--dtype", "fp16", "--nm", "2:4",
        "--name", "w16"])
    sh([PY, GEN, "tensor", fp32, "--shape", "8192,8192", "--dtype", "fp32", "--nm", "0:0",
        "--name", "w32"])
    if 6 in want:
        sh([PY, GEN, "many", many, "--count", "100000"])
    if want & {1, 2, 3}:
        reads_figures(runs, fp16, fp32)
    if 4 in want:
        np_secs, cp_secs, same = numpy_vs_cp(fp16, "w16", runs)
        print("\n4. NumPy script (read .tbm, expand, write .npy to /dev/shm): %.3f s" % np_secs)
        print("   cp dense.npy out of the mount to /dev/shm:%18s%.3f s  (%.1fx faster%s)"
              % ("", cp_secs, np_secs / cp_secs, "" if same else ", OUTPUTS DIFFER"))
    if 5 in want:
        hwm, streamed = peak_rss_streaming(fp16, "tensors/w16/dense.f32", 1 << 30)
        print("\n5. daemon peak RSS (VmHWM) after streaming %.2f GiB of dense.f32: %.1f MiB"
              % (streamed / (1 << 30), hwm / 1024))
    if 6 in want:
        mount_s, find_s, entries = mount_and_find(many, max(3, runs // 2))
        print("\n6. 100,000-tensor index: mount %.3f s, find MNT | wc -l (%d entries) %.3f s"
              % (mount_s, entries, find_s))
    if 7 in want:
        print("\n7. the knobs side by side, fp16 2:4 tensor, GB/s (median of %d):" % runs)
        print("   %-50s %9s %9s %9s %9s" % ("", "raw first", "raw O_DIR", "dns first",
                                           "dns O_DIR"))
        got = knobs(fp16, "w16", runs)
        for label, _ in KNOBS:
            print("   %-50s %9.2f %9.2f %9.2f %9.2f" % (
                label, got[(label, "raw.tb", "first")], got[(label, "raw.tb", "direct")],
                got[(label, "dense.f32", "first")], got[(label, "dense.f32", "direct")]))
    if 8 in want:
        peers(work, runs, fp16, fp32)
    if 9 in want:
        print_change_check(change_check(fp16, "w16", runs), runs, fp16)
    if 10 in want:
        got, models = cold_mounts(work, runs)
        print_cold_mounts(got, models, runs)


def reads_figures(runs, fp16, fp32):
    # Every figure is measured once per round, the rounds one after another, so that
    # a slow spell of this shared machine weighs on all figures alike, not on one.
    kinds = (("fp16 2:4", fp16, "w16"), ("fp32 dense", fp32, "w32"))
    samples = {}
    for _ in range(runs):
        for label, source, name in kinds:
            samples.setdefault((label, "base"), []).append(rate(source))
            for view in ("raw.tb", "dense.f32"):
                got = view_reads(source, "tensors/%s/%s" % (name, view))
                for how, speed in got.items():
                    samples.setdefault((label, view, how), []).append(speed)
    med = {key: statistics.median(v) for key, v in samples.items()}

    rows = []
    for i, (label, source, _) in enumerate(kinds):
        base = med[(label, "base")]
        rows.append(("%s dd bs=1M of %s from the page cache%s"
                     % ("1." if i == 0 else "  ", os.path.basename(source),
                        " (baseline)" if i == 0 else ""), base, 1.0))
    for label, _, _ in kinds:
        base = med[(label, "base")]
        raw = {how: med[(label, "raw.tb", how)] for how in ("first", "direct", "cached")}
        dense = {how: med[(label, "dense.f32", how)] for how in ("first", "direct", "cached")}
        rows += [
            ("2. %s raw.tb first read" % label, raw["first"], raw["first"] / base),
            ("   %s raw.tb first read, O_DIRECT" % label, raw["direct"], raw["direct"] / base),
            ("   %s raw.tb cached re-read" % label, raw["cached"], raw["cached"] / base),
            ("3. %s dense.f32 first read (ratio to raw.tb)" % label, dense["first"],
             dense["first"] / raw["first"]),
            ("   %s dense.f32 O_DIRECT (ratio to raw.tb)" % label, dense["direct"],
             dense["direct"] / raw["direct"]),
            ("   %s dense.f32 cached re-read (ratio to raw.tb)" % label, dense["cached"],
             dense["cached"] / raw["cached"]),
        ]

    print("\n%-58s %10s %8s" % ("figure (median of %d)" % runs, "GB/s", "ratio"))
    for label, speed, ratio in rows:
        print("%-58s %10.2f %8.2f" % (label, speed, ratio))



def peers(work, runs, fp16, fp32):
    """Figure 8: the peer table; builds its squashfs images from what tbmfs shows."""
    many = os.path.join(work, "many20k.tbm")
    views, tree = os.path.join(work, "views"), os.path.join(work, "tree")
    views_img, tree_img = os.path.join(work, "views.sqfs"), os.path.join(work, "tree.sqfs")
    reads = (("dense.f32 of fp16 2:4 (computed)", fp16, "tensors/w16/dense.f32"),
             ("raw.tb of fp32 (spliced)", fp32, "tensors/w32/raw.tb"))
    print("building the squashfs images of the peers ...", flush=True)
    sh([PY, GEN, "many", many, "--count", str(META_TENSORS)])
    extract_views(reads, views)
    copy_tree_shape(many, tree)
    squash(views, views_img)
    squash(tree, tree_img)
    # the images and inputs just written must not be flushed to disk while measuring
    sh(["sync"])
    got = peer_reads(reads, views, views_img, runs)
    meta, entries = peer_meta(many, tree, tree_img, runs)
    print_peers(reads, got, meta, entries, runs)
    subprocess.run(["rm", "-rf", views, tree])


def daemons_under(work):
    """Pids of tbmfs processes whose arguments name a path under work."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if os.path.basename(argv[0]) == b"tbmfs" and any(
                a.startswith(work.encode() + b"/") for a in argv[1:]):
            found.append(int(pid))
    return found


@contextlib.contextmanager
def mount_owner():
    """Mounts (Mount) for a with block: their mount points under a fresh directory, the block's
    value; on the way out every mount is taken down and the directory removed (kept, and said
    so, if something under it is still mounted)."""
    global OWNER
    work = tempfile.mkdtemp(prefix="tbmfs-bench-")
    OWNER = _Owner(work)
    try:
        yield work
    finally:
        for m in list(OWNER.mounts):
            m.stop()
        # a daemon whose mount command was cut short (a signal while mounting) is in no list;
        # inside a mount namespace of its own it would keep its mount, and itself, alive
        stray = daemons_under(work)
        for pid in stray:
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        while stray and time.monotonic() < deadline:
            time.sleep(0.1)
            stray = daemons_under(work)
        for pid in stray:
            os.kill(pid, signal.SIGKILL)
        for line in open("/proc/mounts", errors="surrogateescape"):
            if line.split()[1].startswith(work + "/"):
                subprocess.run(["umount", "-l", line.split()[1]], timeout=60)
        if OWNER.mounts or any(line.split()[1].startswith(work + "/") for line in open("/proc/mounts", errors="surrogateescape")):
            print("STILL MOUNTED under %s; kept" % work)
        else:
            subprocess.run(["rm", "-rf", work])


def main():
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    # optional: which figures, e.g. "8" or "1,2,3,8" (default all)
    want = ({int(x) for x in sys.argv[2].split(",")} if len(sys.argv) > 2
            else set(range(1, 11)))
    with mount_owner() as work:
        figures(work, runs, want)


if __name__ == "__main__":
    main()
