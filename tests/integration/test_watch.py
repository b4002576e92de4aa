#!/usr/bin/python3
"""Integration test of change detection that does not wait for a request (contract v2, "A
source that changes under the mount"): views read before an in-place change (and so in the
kernel's page cache) fail with EIO when read again at once, for a rewrite, a truncation and an
append, of a container and of one file of a manifest; the change is logged once; the other files
of a manifest keep their cached pages; a file rewritten over and over once changed costs the
daemon no CPU per event."""

import ctypes
import json
import mmap
import os
import time

import harness
import models
from harness import CMD_TIMEOUT, Mount, check, ename, eq, errno_of, read_all, run

VIEWS = ("raw.tb", "weights.bin", "mask.bin", "dense.f32", "dense.npy")
# Between the change and the read that must see it: the watch has this long to drop the pages.
AT_ONCE = 0.02


def tensors(gen, seed):
    mk = gen.make_tensor
    return [mk("a.fp32", [64, 64], "fp32", (2, 4), seed),
            mk("b.fp16", [64, 64], "fp16", (2, 4), seed + 1)]


def change(path, how, other):
    if how == "rewrite":
        with open(other, "rb") as f, open(path, "r+b") as g:
            g.write(f.read())  # same size, in place
    elif how == "truncate":
        os.truncate(path, os.path.getsize(path) - 1000)
    elif how == "append":
        with open(path, "ab") as g:
            g.write(b"more")


def case(suite, gen, kind, how):
    work = os.path.join(suite.tmp, "%s-%s" % (kind, how))
    os.makedirs(work)
    if kind == "container":
        source = changed = os.path.join(work, "m.tbm")
        other = os.path.join(work, "other.tbm")
        models.write_container(gen, source, tensors(gen, 10))
        models.write_container(gen, other, tensors(gen, 20))
    else:
        source = os.path.join(work, "dir")
        models.write_manifest(gen, source, tensors(gen, 10))
        models.write_manifest(gen, os.path.join(work, "otherdir"), tensors(gen, 20))
        with open(os.path.join(source, "manifest.json")) as f:
            name = json.load(f)["tensors"][1]["file"]
        changed = os.path.join(source, name)
        other = os.path.join(work, "otherdir", name)
    m = Mount(suite, source, foreground=True)
    with m:
        eq(m.start(), None, "mount")
        paths = [m.p("tensors", "b.fp16", v) for v in VIEWS]
        for p in paths:  # twice: the second read is the page cache's
            eq(read_all(p), read_all(p), "%s before the change" % p)
        index = read_all(m.p("index.json"))
        change(changed, how, other)
        time.sleep(AT_ONCE)
        for p, view in zip(paths, VIEWS):
            eq(ename(errno_of(read_all, p)), "EIO", "%s at once after the %s" % (view, how))
        eq(read_all(m.p("index.json")), index, "index.json keeps reading")
        m.unmount()
        m.wait_exit(10)
        m.out, m.err = (x.decode() for x in m.proc.communicate(timeout=CMD_TIMEOUT))
    lines = [x for x in m.err.splitlines() if "changed since mount" in x]
    eq(len(lines), 1, "one change line: %r" % m.err)
    check(changed in lines[0] and "remount" in lines[0], "the line: %r" % lines[0])


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def flood(suite, gen):
    """A container written to over and over once it has changed: the daemon drops the kernel's
    cache of the tree once, not on every event (each drop is a notification per inode: a flood
    of them doubled the daemon's CPU and slowed other readers)."""
    changed = source = os.path.join(suite.tmp, "flood.tbm")
    many = [gen.make_tensor("t%04d.fp32" % k, [4], "fp32", (0, 0), k) for k in range(2000)]
    models.write_container(gen, source, many)
    with Mount(suite, source) as m:
        eq(m.start(), 0, "mount")
        for k in range(0, 2000, 20):  # some inodes known to the kernel
            os.stat(m.p("tensors", "t%04d.fp32" % k, "raw.tb"))
        with open(changed, "ab") as g:
            g.write(b"x")
        time.sleep(0.2)
        before = cpu_seconds(m.pid)
        for _ in range(300):
            with open(changed, "ab") as g:
                g.write(b"x")
            time.sleep(0.002)  # each event read on its own, not merged with the next
        time.sleep(0.3)
        used = cpu_seconds(m.pid) - before
        print("#   daemon CPU %.3f s" % used, flush=True)
        check(used < 0.25, "the daemon took %.2f s of CPU for 300 events on a file known "
              "changed" % used)


def resident(path):
    """How many of the file's pages the kernel's page cache holds (mincore of a mapping that
    reads nothing)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long)
    libc.mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p)
    libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
    size = os.path.getsize(path)
    vec = ctypes.create_string_buffer((size + mmap.PAGESIZE - 1) // mmap.PAGESIZE)
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        check(addr != ctypes.c_void_p(-1).value, "mmap %s: errno %d" % (path, ctypes.get_errno()))
        try:
            eq(libc.mincore(addr, size, vec), 0, "mincore %s" % path)
        finally:
            libc.munmap(addr, size)
    finally:
        os.close(fd)
    return sum(b & 1 for b in vec.raw), len(vec.raw)


def others_kept(suite, gen):
    """One file of a manifest rewritten: the files made from it and the root's lose their cached
    pages, the other tensors' keep theirs (each drop makes every reader of them read again)."""
    source = os.path.join(suite.tmp, "kept")
    models.write_manifest(gen, source, tensors(gen, 10))
    models.write_manifest(gen, os.path.join(suite.tmp, "kept-other"), tensors(gen, 20))
    with open(os.path.join(source, "manifest.json")) as f:
        name = json.load(f)["tensors"][1]["file"]
    with Mount(suite, source) as m:
        eq(m.start(), 0, "mount")
        kept = [m.p("tensors", "a.fp32", v) for v in VIEWS]
        dropped = [m.p("model.safetensors")] + [m.p("tensors", "b.fp16", v) for v in VIEWS]
        for p in kept + dropped:
            read_all(p)
            got, pages = resident(p)
            eq(got, pages, "%s's pages cached before the change" % p)
        change(os.path.join(source, name), "rewrite", os.path.join(suite.tmp, "kept-other", name))
        time.sleep(0.3)
        for p in kept:
            got, pages = resident(p)
            eq(got, pages, "%s's pages cached after b.fp16's file changed" % p)
        for p in dropped:
            eq(resident(p)[0], 0, "%s's pages cached after b.fp16's file changed" % p)


def main(suite):
    gen = harness.load_gen()
    suite.case("one file of a manifest changed: only the files made from it lose their cache",
               lambda: others_kept(suite, gen), timeout=60)
    suite.case("a flood of events on a changed file: the tree's cache dropped once",
               lambda: flood(suite, gen), timeout=60)
    for kind in ("container", "manifest"):
        for how in ("rewrite", "truncate", "append"):
            suite.case("%s changed by %s: EIO at once for views already cached" % (kind, how),
                       lambda kind=kind, how=how: case(suite, gen, kind, how), timeout=60)


if __name__ == "__main__":
    run("integration-watch", main)
