#!/usr/bin/python3
"""Integration test of the extended attributes: user.tbm.name, shape, dtype, nm and density on
every tensor directory and each of its files, against the generator's own values; ENODATA for
any other name and on the root's files; getfattr -d as a user sees it."""

import os
import shutil
import subprocess

import harness
import models
from harness import CMD_TIMEOUT, check, ename, eq, errno_of, run
from tbmref import DTYPE_NAMES, TENSOR_FILES

NAMES = ["user.tbm.name", "user.tbm.shape", "user.tbm.dtype", "user.tbm.nm", "user.tbm.density"]


def expected(e):
    h = e.h
    return {
        "user.tbm.name": e.name.encode() if isinstance(e.name, str) else e.name,
        "user.tbm.shape": ",".join(str(d) for d in e.shape).encode(),
        "user.tbm.dtype": DTYPE_NAMES[h["precision"]].encode(),
        "user.tbm.nm": ("%d:%d" % (h["nm_n"], h["nm_m"])).encode(),
        "user.tbm.density": repr(float(e.stats[1])).encode(),
    }


def check_tensor(m, e):
    d = m.p(b"tensors", e.dir)
    want = expected(e)
    for p in [d] + [os.path.join(d, f.encode()) for f in TENSOR_FILES]:
        eq(os.listxattr(p), NAMES, "listxattr %s" % p)
        for n in NAMES:
            got = os.getxattr(p, n)
            if n == "user.tbm.density":
                eq(float(got), float(want[n]), "%s of %s" % (n, p))
            else:
                eq(got, want[n], "%s of %s" % (n, p))


def check_missing(m, some_dir):
    d = m.p(b"tensors", some_dir)
    for n in ("user.tbm.nope", "user.other", "trusted.tbm.name", "user.tbm.", "user.tbm.names"):
        eq(ename(errno_of(os.getxattr, d, n)), "ENODATA", "getxattr %s" % n)
    for p in (m.p("index.json"), m.p("model.json"), m.p("tensors"), m.path):
        eq(os.listxattr(p), [], "listxattr of %s" % p)
        eq(ename(errno_of(os.getxattr, p, "user.tbm.name")), "ENODATA", "getxattr on %s" % p)


def check_small_buffer(m, some_dir):
    """A buffer one byte short gets ERANGE, never a cut value (libc asks with size 0 first,
    so the raw syscall is made through ctypes)."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    path = m.p(b"tensors", some_dir)
    need = libc.getxattr(path, b"user.tbm.name", None, 0)
    check(need == len(some_dir), "size query: %d" % need)
    buf = ctypes.create_string_buffer(need)
    eq(libc.getxattr(path, b"user.tbm.name", buf, need - 1), -1, "short buffer result")
    eq(ename(ctypes.get_errno()), "ERANGE", "short buffer errno")
    eq(libc.getxattr(path, b"user.tbm.name", buf, need), need, "exact buffer")
    eq(buf.raw, some_dir, "exact buffer bytes (the name is the directory's here)")


def check_getfattr(m, e):
    if not shutil.which("getfattr"):
        raise harness.Skip("getfattr is not installed (Debian's attr)")
    p = subprocess.run(["getfattr", "-d", "--absolute-names", m.p(b"tensors", e.dir, b"dense.npy")],
                       capture_output=True, timeout=CMD_TIMEOUT)
    eq(p.returncode, 0, "getfattr exit (%s)" % p.stderr.decode().strip())
    lines = p.stdout.decode().splitlines()
    check(lines[0].endswith("dense.npy"), "first line names the file: %r" % lines[0])
    eq(lines[1:6], sorted(['user.tbm.name="%s"' % e.name,
                    'user.tbm.shape="%s"' % ",".join(str(d) for d in e.shape),
                    'user.tbm.dtype="%s"' % DTYPE_NAMES[e.h["precision"]],
                    'user.tbm.nm="%d:%d"' % (e.h["nm_n"], e.h["nm_m"]),
                    'user.tbm.density="%s"' % repr(float(e.stats[1]))]), "getfattr -d lines")


def main(suite):
    gen = harness.load_gen()
    tensors = models.sound_tensors(gen)
    src = os.path.join(suite.tmp, "x.tbm")
    _, expects = models.write_container(gen, src, tensors)
    m = suite.mount(src)
    with m:
        for e in expects:
            suite.case("%s: attributes of the directory and every file" % e.dir,
                       lambda e=e: check_tensor(m, e))
        suite.case("other names and the root: ENODATA", lambda: check_missing(m, expects[1].dir))
        suite.case("short buffer: ERANGE", lambda: check_small_buffer(m, expects[1].dir))
        suite.case("getfattr -d", lambda: check_getfattr(m, expects[1]))


if __name__ == "__main__":
    run("integration-xattr", main)
