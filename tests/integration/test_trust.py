#!/usr/bin/python3
"""Integration test of contract v2's trust rows: a source changed under the mount (in-place
rewrite of the same size, truncate, append, a rewrite while a reader streams, rename-replace),
the mount reading no weights (checked by the daemon's rchar, not by timing), exact sizes in stat
for every file and a tar of the mount that round-trips byte for byte, ownership and modes from
the source and -o uid, gid, umask, and the log line of each failure."""

import io
import os
import re
import stat
import subprocess
import tarfile
import threading
import time

import harness
import models
from harness import CMD_TIMEOUT, Mount, check, direct_read, ename, eq, errno_of, read_all, run

gen = None


def model(path, seed, big=False):
    mk = gen.make_tensor
    shape = [512, 1024] if big else [64, 64]
    ts = [mk("a.fp32", shape, "fp32", (2, 4), seed), mk("b.fp16", shape, "fp16", (2, 4), seed + 1),
          mk("c.dense", [16], "fp32", (0, 0), seed + 2)]
    return models.write_container(gen, path, ts)


def rchar(pid):
    with open("/proc/%d/io" % pid) as f:
        return int(re.search(r"rchar: (\d+)", f.read()).group(1))


def no_weights_at_mount(suite):
    path = os.path.join(suite.tmp, "big.tbm")
    cont, expects = model(path, 1, big=True)
    size = os.path.getsize(path)
    m = Mount(suite, path)
    with m:
        eq(m.start(), 0, "mount")
        os.listdir(m.p("tensors"))  # usable
        bound = len(cont.index_bytes) + 4 + 4096 * len(expects) + 64 * 1024
        got = rchar(m.pid)
        check(got < bound, "rchar %d after the mount, over index + headers + 64 KiB = %d (the "
                           "model is %d bytes)" % (got, bound, size))
        hj = harness.read_json(m.p("tensors", "a.fp32", "header.json"))
        eq(hj["kept"], expects[0].stats[0], "kept, computed when first needed")
        check(rchar(m.pid) > bound, "header.json read the mask and weights")


def walk_files(root):
    for d, _, files in os.walk(root):
        for f in files:
            yield os.path.join(d, f)


def sizes_and_tar(suite):
    path = os.path.join(suite.tmp, "t.tbm")
    model(path, 10)
    m = Mount(suite, path)
    with m:
        eq(m.start(), 0, "mount")
        want = {}
        for p in walk_files(m.path):
            data = read_all(p)
            eq(len(data), os.stat(p).st_size, "stat size of %s" % p)
            want[os.path.relpath(p, m.path)] = data
        out = os.path.join(suite.tmp, "m.tar")
        subprocess.run(["tar", "-cf", out, "-C", m.path, "."], check=True, timeout=CMD_TIMEOUT)
        with tarfile.open(out) as tf:
            got = {os.path.normpath(x.name): tf.extractfile(x).read() for x in tf if x.isfile()}
        eq(sorted(got), sorted(want), "files in the tar")
        for k in want:
            eq(got[k], want[k], "tar member %s" % k)


def ownership(suite):
    path = os.path.join(suite.tmp, "private.tbm")
    model(path, 20)
    os.chown(path, 12345, 23456)
    os.chmod(path, 0o600)
    for args, uid, gid, fmode, dmode in (
            ([], 12345, 23456, 0o400, 0o500),
            (["-o", "uid=7,gid=8,umask=027"], 7, 8, 0o440, 0o550)):
        m = Mount(suite, path, args=args)
        with m:
            eq(m.start(), 0, "mount %s" % args)
            for p in (m.p("index.json"), m.p("tensors", "a.fp32", "dense.npy")):
                st = os.stat(p)
                eq((st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)), (uid, gid, fmode),
                   "%s owner, group, mode (%s)" % (p, args))
            for p in (m.path, m.p("tensors"), m.p("tensors", "a.fp32")):
                st = os.stat(p)
                eq((st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)), (uid, gid, dmode),
                   "%s owner, group, mode (%s)" % (p, args))


def changed(suite, how):
    """One way of changing the source under a -f mount: EIO for every view that reads it, the
    JSON views as they were, one log line."""
    path = os.path.join(suite.tmp, "live-%s.tbm" % how)
    other = os.path.join(suite.tmp, "other-%s.tbm" % how)
    cont, expects = model(path, 30)
    model(other, 40)
    m = Mount(suite, path, foreground=True)
    with m:
        eq(m.start(), None, "mount")
        header = read_all(m.p("tensors", "a.fp32", "header.json"))
        index = read_all(m.p("index.json"))
        eq(read_all(m.p("tensors", "a.fp32", "raw.tb")), expects[0].raw, "raw.tb before")
        if how == "rewrite":
            with open(other, "rb") as f, open(path, "r+b") as g:
                g.write(f.read())  # same size, in place
        elif how == "truncate":
            os.truncate(path, os.path.getsize(path) - 1000)
        elif how == "append":
            with open(path, "ab") as g:
                g.write(b"more")
        elif how == "rename":
            os.rename(other, path)
        for view in ("raw.tb", "weights.bin", "mask.bin", "dense.f32", "dense.npy"):
            p = m.p("tensors", "b.fp16", view)
            if how == "rename":
                eq(read_all(p), read_all(p), view)  # the old file, still served
            else:
                eq(ename(errno_of(read_all, p)), "EIO", "%s after %s" % (view, how))
        if how == "rename":
            eq(read_all(m.p("tensors", "a.fp32", "raw.tb")), expects[0].raw, "old bytes served")
        eq(read_all(m.p("index.json")), index, "index.json keeps reading")
        eq(read_all(m.p("tensors", "a.fp32", "header.json")), header, "header.json")
        m.unmount()
        m.wait_exit(10)
        m.out, m.err = (x.decode() for x in m.proc.communicate(timeout=CMD_TIMEOUT))
    lines = m.err.splitlines()
    if how == "rename":
        eq([x for x in lines if "changed since mount" in x], [], "no change logged")
        return
    eq(len([x for x in lines if "changed since mount" in x]), 1, "one change line: %r" % lines)
    check(any("changed since mount" in x and path in x and "remount" in x for x in lines),
          "the line names the source: %r" % lines)
    check(any("tensor b.fp16: dense.npy: the source changed since the mount" in x
              for x in lines), "the EIO of dense.npy is logged: %r" % lines)
    eq(len(lines), len(set(lines)), "each line once")


def unlinked_then_rewritten(suite):
    """A source with a second hard link at mount: the link removed (its ctime moves, nothing
    else) is no change; a rewrite in place after that, its mtime put back, is one (the ctime
    moves again, no link lost)."""
    path = os.path.join(suite.tmp, "linked.tbm")
    other = os.path.join(suite.tmp, "linked-other.tbm")
    cont, expects = model(path, 31)
    model(other, 41)
    os.link(path, path + ".2")
    with Mount(suite, path) as m:
        eq(m.start(), 0, "mount")
        raw = m.p("tensors", "a.fp32", "raw.tb")
        eq(read_all(raw), expects[0].raw, "raw.tb before")
        os.unlink(path + ".2")
        eq(read_all(m.p("tensors", "b.fp16", "weights.bin")), expects[1].weights,
           "weights.bin after the second link went")
        st = os.stat(path)
        with open(other, "rb") as f, open(path, "r+b") as g:
            g.write(f.read())  # same size, in place
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
        eq(os.stat(path).st_mtime_ns, st.st_mtime_ns, "mtime put back")
        for view in ("raw.tb", "weights.bin", "dense.f32"):
            eq(ename(errno_of(read_all, m.p("tensors", "b.fp16", view))), "EIO",
               "%s after the rewrite" % view)


def unchecked(suite):
    """TBMFS_NO_CHANGE_CHECK=1, which the benchmark uses to price the check: said at mount, and
    then a rewrite in place is served as it is, not refused."""
    path = os.path.join(suite.tmp, "unchecked.tbm")
    other = os.path.join(suite.tmp, "unchecked-other.tbm")
    _, expects = model(path, 50)
    _, others = model(other, 60)
    m = Mount(suite, path, env={"TBMFS_NO_CHANGE_CHECK": "1"})
    with m:
        eq(m.start(), 0, "mount")
        check("TBMFS_NO_CHANGE_CHECK=1" in m.err and path in m.err, "the warning: %r" % m.err)
        raw = m.p("tensors", "b.fp16", "raw.tb")
        eq(direct_read(raw), expects[1].raw, "raw.tb before")
        with open(other, "rb") as f, open(path, "r+b") as g:
            g.write(f.read())
        eq(direct_read(raw), others[1].raw, "raw.tb after a rewrite: the new bytes, no EIO")


def streaming(suite, view, args):
    """A reader that streams a view while the source is rewritten gets EIO, never mixed bytes.
    Views read by the daemon are checked after every read; spliced ones only before the
    splice (README), so raw.tb is streamed with -o nosplice and dense.f32 of fp16, which is
    computed, with the defaults."""
    path = os.path.join(suite.tmp, "stream-%s.tbm" % view)
    other = os.path.join(suite.tmp, "stream-other-%s.tbm" % view)
    cont, expects = model(path, 50, big=True)
    model(other, 60, big=True)
    m = Mount(suite, path, args=args)
    with m:
        eq(m.start(), 0, "mount")
        want = expects[1]
        raw = want.raw if view == "raw.tb" else want.dense
        seen = {"eio": False, "bad": None, "reads": 0}
        stop = time.monotonic() + 20

        def reader():
            p = m.p("tensors", want.dir, view.encode())
            while time.monotonic() < stop and not seen["eio"]:
                try:
                    fd = os.open(p, os.O_RDONLY | os.O_DIRECT)
                except OSError:
                    seen["eio"] = True
                    return
                try:
                    buf = __import__("mmap").mmap(-1, 1 << 16)
                    off = 0
                    while off < len(raw):
                        n = os.preadv(fd, [buf], off)
                        if n == 0:
                            break
                        if bytes(buf[:n]) != raw[off: off + n]:
                            seen["bad"] = off
                            return
                        off += n
                        seen["reads"] += 1
                except OSError as e:
                    seen["eio"] = e.errno == 5
                    return
                finally:
                    os.close(fd)

        t = threading.Thread(target=reader)
        t.start()
        time.sleep(0.3)
        with open(other, "rb") as f, open(path, "r+b") as g:
            g.write(f.read())
        t.join(CMD_TIMEOUT)
        eq(seen["bad"], None, "offset of a chunk that is neither the old bytes nor EIO")
        check(seen["eio"], "the streaming reader never got EIO (%d reads)" % seen["reads"])


def mountpoint_warnings(suite):
    path = os.path.join(suite.tmp, "w.tbm")
    model(path, 70)
    m = Mount(suite, path)
    for name in ("x", "y"):
        open(os.path.join(m.path, name), "w").close()
    with m:
        eq(m.start(), 0, "mount over a non-empty directory")
        check("is not empty: the mount hides its 2 entries" in m.err, "stderr: %r" % m.err)
        top = Mount(suite, path)
        top.path = m.path
        with top:
            eq(top.start(), 0, "mount on top of the mount")
            check("is already a mount point" in top.err, "stderr: %r" % top.err)


def many_files(suite):
    """A 30,000-file manifest under ulimit -n 1024: the files past what the limit allows are
    opened when read, and read right."""
    d = os.path.join(suite.tmp, "many")
    ts = gen.many_tensors(30000, numel=16, dtype="fp16", nm=(2, 4), seed=3)
    gen.write_manifest(d, ts)
    limited = ["prlimit", "--nofile=1024:1024", harness.TBMFS]
    p = subprocess.run(limited + ["--check", d], capture_output=True, timeout=120)
    eq(p.returncode, 0, "--check exit (%s)" % p.stderr.decode()[-300:])
    check(p.stdout.decode().strip().endswith("30000 tensors, 0 with problems, 0 warnings"),
          "summary: %r" % p.stdout.decode()[-200:])
    m = Mount(suite, d)
    with m:
        p = subprocess.run(limited + [d, m.path], capture_output=True, timeout=120)
        eq(p.returncode, 0, "mount exit (%s)" % p.stderr.decode()[-300:])
        m.pid = m.find_daemon()
        suite.mounts.append(m)
        eq(len(os.listdir(m.p("tensors"))), 30000, "tensors")
        dirs = sorted(os.listdir(m.p("tensors")))
        want = gen.blob(ts[0])
        for name in (dirs[0], dirs[15000], dirs[-1]):
            eq(read_all(m.p("tensors", name, "raw.tb")), want, "%s raw.tb" % name)
            eq(harness.read_json(m.p("tensors", name, "header.json"))["problems"], [], name)
        with open("/proc/%d/limits" % m.pid) as f:
            check(any("Max open files" in x and "1024" in x for x in f), "the daemon's limit")


def explained(suite):
    """Each EIO is logged once naming tensor, view and reason; -d names the file of a node."""
    path = os.path.join(suite.tmp, "broken.tbm")
    mk = gen.make_tensor
    models.write_container(gen, path, [mk("good", [8], "fp32", (2, 4), 1),
                                       mk("bad", [8], "fp32", (2, 4), 2, header={"magic": 7})])
    m = Mount(suite, path, args=["-d"], foreground=True)
    with m:
        eq(m.start(), None, "mount")
        for _ in range(3):
            eq(ename(errno_of(read_all, m.p("tensors", "bad", "dense.f32"))), "EIO", "dense.f32")
        read_all(m.p("tensors", "good", "header.json"))
        m.unmount()
        m.wait_exit(10)
        m.out, m.err = (x.decode() for x in m.proc.communicate(timeout=CMD_TIMEOUT))
    lines = [x for x in m.err.splitlines() if x.startswith("tbmfs: ")]
    eq([x for x in lines if "tensor bad: dense.f32:" in x],
       ["tbmfs: tensor bad: dense.f32: the tensor has problems (see header.json or tbmfs "
        "--check)"], "the failure, logged once")
    check(any(re.match(r"tbmfs: open node \d+: tensors/good/header.json$", x) for x in lines),
          "-d names the node: %r" % lines)


def main(suite):
    global gen
    gen = harness.load_gen()
    suite.case("the mount reads no weights (rchar)", lambda: no_weights_at_mount(suite))
    suite.case("stat size = bytes for every file; tar round-trips", lambda: sizes_and_tar(suite))
    suite.case("ownership and modes from the source; -o uid, gid, umask",
               lambda: ownership(suite))
    suite.case("mount-point warnings", lambda: mountpoint_warnings(suite))
    suite.case("failures explained: logged once; -d names the node", lambda: explained(suite))
    suite.case("30,000 manifest files under ulimit -n 1024", lambda: many_files(suite),
               timeout=240)
    for how in ("rewrite", "truncate", "append", "rename"):
        suite.case("source changed by %s" % how, lambda how=how: changed(suite, how), timeout=60)
    suite.case("a second link removed, then a rewrite with the mtime put back: EIO",
               lambda: unlinked_then_rewritten(suite), timeout=60)
    suite.case("TBMFS_NO_CHANGE_CHECK=1: said at mount, changes not checked",
               lambda: unchecked(suite), timeout=60)
    suite.case("a rewrite while a reader streams raw.tb (-o nosplice): EIO, never mixed bytes",
               lambda: streaming(suite, "raw.tb", ["-o", "nosplice"]), timeout=60)
    suite.case("a rewrite while a reader streams dense.f32: EIO, never mixed bytes",
               lambda: streaming(suite, "dense.f32", []), timeout=60)


if __name__ == "__main__":
    run("integration-trust", main)
