#!/usr/bin/python3
"""Integration test of the mounted tree for a .tbm container, a manifest directory and a bare
.tb: listings, index.json, raw.tb / weights.bin / mask.bin bytes, header.json, model.json,
sizes, modes, times, inode numbers, read-only errors, directory names, unmount."""

import errno
import json
import os
import stat
import subprocess
import time

import harness
import models
from harness import (CMD_TIMEOUT, check, ename, eq, errno_of, kernels_supported, mounted, read_all,
                     read_json, run)
from tbmref import TENSOR_FILES, dir_names, root_files

gen = None


def shown(dirname):
    s = dirname.decode("utf-8", "replace")
    return s if len(s) <= 40 else s[:30] + "..." + s[-8:]


def check_views(m, e):
    d = m.p("tensors", e.dir)
    eq(set(os.listdir(d)), {f.encode() for f in TENSOR_FILES}, "files")
    for fname, want in (("raw.tb", e.raw), ("weights.bin", e.weights), ("mask.bin", e.mask)):
        p = os.path.join(d, fname.encode())
        eq(read_all(p), want, fname)
        eq(os.stat(p).st_size, len(want), fname + " st_size")


def check_header(m, e, kind, remote=False):
    hj = read_json(m.p("tensors", e.dir, "header.json"))
    # a remote source's statistics are not waited for: null and why until they are known
    deadline = time.monotonic() + 30
    while remote and any("not known yet" in w for w in hj["warnings"]):
        check(time.monotonic() < deadline, "statistics not known after 30 s")
        time.sleep(0.05)
        hj = read_json(m.p("tensors", e.dir, "header.json"))
    h = e.h
    want = {
        "name": e.name, "dir": e.dir.decode("utf-8"), "shape": e.shape,
        "dtype": {0: "fp32", 1: "fp16", 2: "bf16", 3: "fp64"}[h["precision"]],
        "magic": "0x31304254", "version": 1, "nm_n": h["nm_n"], "nm_m": h["nm_m"],
        "num_weights": h["num_weights"], "num_mask_bytes": h["num_mask_bytes"],
        "weights_offset": h["weights_offset"], "masks_offset": h["masks_offset"],
        "precision": h["precision"], "offset": e.off if kind == "container" else 0,
    }
    for k, v in want.items():
        eq(hj.get(k, "<missing>"), v, k)
    kept, density, over, conflicts = e.stats
    eq(hj.get("kept"), kept, "kept")
    check(isinstance(hj.get("density"), (int, float)) and abs(hj["density"] - density) < 1e-9,
          "density: got %r, want %r" % (hj.get("density"), density))
    eq(hj.get("groups_over_n"), over, "groups_over_n")
    eq(hj.get("mask_conflicts"), conflicts, "mask_conflicts")
    eq(hj.get("problems"), [], "problems")
    warnings = hj.get("warnings")
    check(isinstance(warnings, list) and all(isinstance(w, str) for w in warnings),
          "warnings not an array of strings: %r" % (warnings,))
    if e.warn:
        check(warnings, "no warning for a tensor that disagrees with itself")
    else:
        eq(warnings, [], "warnings")
    if e.index_entry is not None:
        eq(hj.get("index"), e.index_entry, "index")


def root_of(kind):
    """The root's names: the container and manifest here are llama models, a bare .tb has no
    architecture."""
    return root_files(None if kind == "tb" else "llama")


def all_paths(m, expects, kind):
    paths = [m.path] + [m.p(f) for f in root_of(kind)]
    for e in expects:
        d = m.p("tensors", e.dir)
        paths += [d] + [os.path.join(d, f.encode()) for f in sorted(TENSOR_FILES)]
    return paths


def check_model_json(m, expects, kind, source, arch, config):
    mj = read_json(m.p("model.json"))
    eq(mj.get("format"), {"container": "tbm", "manifest": "manifest", "tb": "tb"}[kind], "format")
    check(mj.get("source") in (source, os.path.realpath(source)),
          "source: got %r, want %r" % (mj.get("source"), source))
    if arch is not None:
        eq(mj.get("architecture"), arch, "architecture")
        eq(mj.get("config"), config, "config")
    for k in ("architecture", "config"):
        check(k in mj, "no %r" % k)
    eq(mj.get("tensor_count"), len(expects), "tensor_count")
    eq(mj.get("total_weights"), sum(e.h["num_weights"] for e in expects), "total_weights")
    eq(mj.get("total_kept"), sum(e.stats[0] for e in expects), "total_kept")
    eq(mj.get("tensors_with_problems"), 0, "tensors_with_problems")
    eq(mj.get("problems"), [], "problems")
    eq(mj.get("kernels"), kernels_supported()[-1], "kernels")


def remount_rw(m):
    """Takes the kernel's read-only flag off the mount (no helper: -i), so that every write
    below reaches tbmfs's own handlers instead of being refused by the kernel first."""
    p = subprocess.run(["mount", "-i", "-o", "remount,rw", m.path], capture_output=True,
                       timeout=CMD_TIMEOUT)
    eq(p.returncode, 0, "mount -o remount,rw exit code (%s)" % p.stderr.decode().strip())
    with open("/proc/self/mountinfo", errors="surrogateescape") as f:
        opts = [line.split()[5] for line in f if line.split()[4] == m.path]
    eq(opts[-1].split(",")[0], "rw", "mount flags after remount")


def check_erofs(suite, m, kind, some_dir):
    suite.case("%s: remount read-write" % kind, lambda: remount_rw(m))
    f = m.p("index.json")
    t = m.p("tensors", some_dir)
    w = os.path.join(t, b"weights.bin")
    ops = [
        ("open O_WRONLY", lambda: os.open(f, os.O_WRONLY)),
        ("open O_RDWR", lambda: os.open(w, os.O_RDWR)),
        ("create", lambda: os.open(m.p("new.txt"), os.O_WRONLY | os.O_CREAT, 0o644)),
        ("create in tensor dir", lambda: os.open(os.path.join(t, b"x"), os.O_WRONLY | os.O_CREAT)),
        ("mkdir", lambda: os.mkdir(m.p("newdir"))),
        ("unlink", lambda: os.unlink(f)),
        ("unlink in tensor dir", lambda: os.unlink(w)),
        ("rmdir", lambda: os.rmdir(t)),
        ("rename", lambda: os.rename(f, m.p("renamed.json"))),
        ("chmod", lambda: os.chmod(f, 0o644)),
        ("truncate", lambda: os.truncate(m.p("model.json"), 0)),
        ("symlink", lambda: os.symlink("index.json", m.p("link"))),
        ("link", lambda: os.link(f, m.p("hard"))),
        ("mknod", lambda: os.mkfifo(m.p("fifo"))),
        ("setxattr", lambda: os.setxattr(f, "user.x", b"1")),
        ("removexattr", lambda: os.removexattr(f, "user.x")),
    ]
    for label, op in ops:
        suite.case("%s: %s -> EROFS" % (kind, label),
                   lambda op=op: eq(ename(errno_of(op)), "EROFS", "errno"))
    suite.case("%s: nothing changed after the refused writes" % kind, lambda: eq(
        sorted(os.listdir(m.path)), sorted(root_of(kind)), "root listing"))


def check_source(suite, kind, source, expects, index_check, mtime, arch=None, config=None):
    m = suite.mount(source, name="%s: mount %s" % (kind, os.path.basename(source)))
    with m:
        first_stats = {}

        def stat_all_first():
            for p in all_paths(m, expects, kind):
                first_stats[p] = os.lstat(p).st_ino

        suite.case("%s: root listing" % kind,
                   lambda: eq(set(os.listdir(m.path)), root_of(kind), "root"))
        suite.case("%s: tensors/ listing" % kind, lambda: eq(
            sorted(os.listdir(m.p(b"tensors"))), sorted(e.dir for e in expects), "tensors/"))
        suite.case("%s: first stat of every path" % kind, stat_all_first)
        suite.case("%s: index.json" % kind, lambda: index_check(read_all(m.p("index.json"))))
        for e in expects:
            suite.case("%s: %s: raw.tb weights.bin mask.bin" % (kind, shown(e.dir)),
                       lambda e=e: check_views(m, e))
            suite.case("%s: %s: header.json" % (kind, shown(e.dir)),
                       lambda e=e: check_header(m, e, kind,
                                                isinstance(source, str) and "://" in source))
        suite.case("%s: model.json" % kind,
                   lambda: check_model_json(m, expects, kind, source, arch, config))

        def sizes():
            for p in all_paths(m, expects, kind):
                if os.path.basename(p) in ("selftest", b"selftest") or os.path.isdir(p):
                    continue
                eq(os.stat(p).st_size, len(read_all(p)), "st_size of %r" % p[len(m.path):])

        suite.case("%s: st_size equals content length" % kind, sizes, timeout=60)

        def modes():
            for p in all_paths(m, expects, kind):
                st = os.lstat(p)
                want = (stat.S_IFDIR | 0o555) if os.path.isdir(p) else (stat.S_IFREG | 0o444)
                eq(oct(st.st_mode), oct(want), "mode of %r" % p[len(m.path):])

        suite.case("%s: modes 0555 / 0444" % kind, modes)

        def mtimes():
            for p in all_paths(m, expects, kind):
                eq(os.lstat(p).st_mtime_ns, mtime * 10**9, "mtime of %r" % p[len(m.path):])

        suite.case("%s: mtime is the source's" % kind, mtimes)

        def inodes():
            check(first_stats, "no first stats")
            for p, ino in first_stats.items():
                eq(os.lstat(p).st_ino, ino, "inode of %r" % p[len(m.path):])
            eq(len(set(first_stats.values())), len(first_stats), "distinct inode numbers")

        suite.case("%s: inode numbers stable" % kind, inodes)
        check_erofs(suite, m, kind, expects[0].dir)

        def unmount():
            r = m.unmount()
            eq(r.returncode, 0, "fusermount3 -u exit (%s)" % r.stderr.decode().strip())
            check(not mounted(m.path), "still in /proc/mounts")
            m.wait_exit(10)
            check(not m.alive(), "daemon still running after unmount")

        suite.case("%s: unmount is clean" % kind, unmount)


def exact(want):
    def check_bytes(got):
        eq(got, want, "index.json bytes")
    return check_bytes


def main(suite):
    global gen
    gen = harness.load_gen()
    tmp = suite.tmp
    tensors = (models.sound_tensors(gen) + models.warning_tensors(gen)
               + [models.warning_counts_tensor(gen)]
               + models.name_tensors(gen, models.SHORT_NAMES + models.LONG_NAMES))
    path = os.path.join(tmp, "model.tbm")
    cont, expects = models.write_container(gen, path, tensors, mtime=1234567890)
    check_source(suite, "container", path, expects, exact(cont.index_bytes), 1234567890,
                 "llama", {"hidden_size": 16, "num_layers": 1})

    mdir = os.path.join(tmp, "manifest")
    mt = (models.sound_tensors(gen)[:6] + models.warning_tensors(gen)
          + models.name_tensors(gen, ["a/b", "..", "dup", "dup", "\u00e9" * 130])
          + [gen.make_tensor("tail.after.mask", [4, 4], "bf16", (2, 4), 60, tail=b"trailing"),
             gen.make_tensor("tail.after.dense", [4], "fp64", (0, 0), 61, tail=b"x" * 5000)])
    manifest, mexpects = models.write_manifest(gen, mdir, mt, special={1: "symlink_in"})
    os.utime(os.path.join(mdir, "manifest.json"), (1111111111, 1111111111))
    os.utime(mdir, (1300000000, 1300000000))
    check_source(suite, "manifest", mdir, mexpects, exact(manifest), 1300000000, "llama",
                 {"hidden_size": 16})

    tb = os.path.join(tmp, "single.tb")
    single = gen.make_tensor("ignored", [16, 8], "fp16", (2, 4), 42, junk_bits=True)
    e = models.write_tb(gen, tb, single, mtime=1250000000)

    def bare_index(data):
        obj = json.loads(data)
        check(isinstance(obj, dict), "not an object")
        ts = obj.get("tensors")
        check(isinstance(ts, list) and len(ts) == 1, "tensors: %r" % (ts,))
        eq(ts[0].get("name"), "single", "tensor name")

    check_source(suite, "tb", tb, [e], bare_index, 1250000000)

    nul = [gen.make_tensor("nul\x00x", [4], "fp32", (0, 0), 1),
           gen.make_tensor("plain", [4], "fp32", (0, 0), 2)]
    npath = os.path.join(tmp, "nul.tbm")
    models.write_container(gen, npath, nul)
    m = suite.mount(npath, name="names: mount a container with a NUL in a name")
    with m:
        suite.case("names: NUL byte becomes %00", lambda: eq(
            sorted(os.listdir(m.p(b"tensors"))), sorted(dir_names([t.name for t in nul])),
            "tensors/"))
        suite.case("names: header.json keeps the true name with its NUL", lambda: eq(
            read_json(m.p("tensors", "nul%00x", "header.json")).get("name"), "nul\x00x", "name"))


if __name__ == "__main__":
    run("integration-tree", main)
