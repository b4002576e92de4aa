#!/usr/bin/python3
"""Integration test of what one reader can make the daemon do for, or to, the others, on an
allow_other mount read by unprivileged users: 300 descriptors on the root self-test report
hold it once; one user's 30 loops of self-test opens leave another user's first self-test
within twice its time alone (the queue takes users in turn); a shared result already rendered
is answered without the queue; 300 descriptors on a 2 MiB header.json hold it once; and a
manifest.json that is a symlink leaving the directory, one
to /dev/zero, or a FIFO, is refused by --check."""

import json
import os
import subprocess
import sys
import time

import harness
import models
from harness import CMD_TIMEOUT, Skip, check, eq, run

gen = None
LOOPS = 30
PER_LOOP = 4
# two users with no other rights; setresuid needs no passwd entry
LOOPER, OTHER = 65534, 65533

# Run as an unprivileged user: "loops LISTS" opens each path of each list of the JSON LISTS in
# turn, one thread per list (all at once), reads it whole (it must not be empty), and prints
# one JSON line {"seconds": [...], "errors": [...]} per list, in order. "hold N PATH" instead opens PATH N times, prints the SHA-256 of every
# descriptor's bytes, waits for a line on stdin, then closes them.
CHILD = r"""
import hashlib, json, os, sys, threading, time
def read_fd(fd):
    out = []
    while True:
        b = os.read(fd, 1 << 20)
        if not b:
            return b"".join(out)
        out.append(b)
if sys.argv[1] == "hold":
    fds = [os.open(sys.argv[3], os.O_RDONLY) for _ in range(int(sys.argv[2]))]
    digests = sorted({hashlib.sha256(read_fd(fd)).hexdigest() for fd in fds})
    print(json.dumps({"fds": len(fds), "digests": digests}), flush=True)
    sys.stdin.readline()
    for fd in fds:
        os.close(fd)
    sys.exit(0)
lists = json.loads(sys.argv[2])
results = [None] * len(lists)
def loop(k):
    secs, errs = [], []
    for p in lists[k]:
        start = time.monotonic()
        try:
            fd = os.open(p, os.O_RDONLY)
            try:
                if not read_fd(fd):
                    raise ValueError("empty")
            finally:
                os.close(fd)
        except Exception as e:
            errs.append("%s: %s" % (p, e))
        secs.append(time.monotonic() - start)
    results[k] = {"seconds": secs, "errors": errs}
threads = [threading.Thread(target=loop, args=(k,)) for k in range(len(lists))]
for t in threads:
    t.start()
for t in threads:
    t.join()
for r in results:
    print(json.dumps(r))
"""


def as_user(uid, args, stdin=subprocess.PIPE):
    return subprocess.Popen([sys.executable, "-c", CHILD] + args, user=uid, group=uid,
                            extra_groups=[], stdin=stdin, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def opens_as(uid, lists, timeout=CMD_TIMEOUT):
    """Each list of paths opened in turn by its own thread of one process of uid: their
    seconds per open. Fails on any error."""
    p = as_user(uid, ["loops", json.dumps(lists)], stdin=subprocess.DEVNULL)
    out, err = p.communicate(timeout=timeout)
    eq(p.returncode, 0, "opener exit (%s)" % err.strip()[-300:])
    res = [json.loads(line) for line in out.splitlines()]
    errors = [e for r in res for e in r["errors"]]
    check(not errors, "opens as uid %d failed: %s" % (uid, errors[:3]))
    return [r["seconds"] for r in res]


def vm_kib(pid, field):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise harness.Failure("no %s for pid %d" % (field, pid))


def readable_tmp(suite):
    # the users' opens must reach the mount points below it
    os.chmod(suite.tmp, 0o755)


def hold(m, path, what):
    """300 descriptors of LOOPER on path: the daemon's VmRSS grows by less than 64 MiB while
    they are held, and they all read the same bytes."""
    if os.environ.get("TBMFS_SANITIZED"):
        raise Skip("sanitized build: resident memory says nothing here")
    before = vm_kib(m.pid, "VmRSS")
    p = as_user(LOOPER, ["hold", "300", path])
    try:
        line = p.stdout.readline()
        check(line, "holder said nothing (%s)" % p.stderr.read(2000).strip()
              if p.poll() is not None else "holder said nothing")
        got = json.loads(line)
        during = vm_kib(m.pid, "VmRSS")
        p.stdin.write("\n")
        p.stdin.flush()
        eq(p.wait(CMD_TIMEOUT), 0, "holder exit")
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(CMD_TIMEOUT)
    eq(got["fds"], 300, "descriptors held")
    grew = during - before
    print("# 300 descriptors on %s: VmRSS %d -> %d KiB (+%.1f MiB)" % (
        what, before, during, grew / 1024), flush=True)
    check(grew < 64 << 10, "VmRSS grew %.1f MiB with 300 descriptors on %s (%d -> %d KiB)" % (
        grew / 1024, what, before, during))
    eq(len(got["digests"]), 1, "distinct contents among the 300 descriptors")


def held(suite):
    src = os.path.join(suite.tmp, "many.tbm")
    eq(gen.main(["many", src, "--count", "10000"]), 0, "gen_model.py many")
    m = suite.mount(src, args=["-o", "allow_other"], name="10,000 tensors: mount (allow_other)")
    with m:
        suite.case("300 descriptors of another user on the root report of 10,000 tensors: "
                   "one copy (VmRSS +< 64 MiB), the same bytes",
                   lambda: hold(m, m.p("selftest"), "the root report of 10,000 tensors"),
                   timeout=240)
    # a 1 MiB name is in header.json twice (name, index): 2 MiB a copy
    t = gen.make_tensor("n" * (1 << 20), [4, 8], "fp32", (2, 4), 60)
    src = os.path.join(suite.tmp, "long-name.tbm")
    models.write_container(gen, src, [t])
    m = suite.mount(src, args=["-o", "allow_other"], name="1 MiB name: mount (allow_other)")
    with m:
        d = os.listdir(m.p("tensors"))[0]
        suite.case("300 descriptors of another user on a 2 MiB header.json: one copy (VmRSS "
                   "+< 64 MiB), the same bytes",
                   lambda: hold(m, m.p("tensors", d, "header.json"), "a 2 MiB header.json"),
                   timeout=120)


def fair_queue(suite):
    """One user's 30 loops of self-test opens, each on tensors not yet tested so that they all
    queue, and another user's first self-test: it waits for at most the one under way, not
    for the 30 before it. Every measurement takes tensors not tested yet (results are cached
    per mount). The looper's self-tests take about an eighth of the other's, so that the
    queue taken in turn gives about 1.1 times the time alone and a plain FIFO about 4."""
    src = os.path.join(suite.tmp, "fair.tbm")
    mk = gen.make_tensor
    small = [mk("loop%03d" % k, [512, 512], "fp16", (2, 4), 1000 + k)
             for k in range(LOOPS * PER_LOOP + 1)]
    big = [mk("other%d" % k, [2048, 1024], "fp16", (2, 4), 50 + k) for k in range(2)]
    models.write_container(gen, src, small + big)
    # batch 64 makes each self-test costly for its bytes, so the model stays small
    m = suite.mount(src, args=["-o", "allow_other,selftest_batch=64"],
                    name="fairness: mount (allow_other)")
    st = [m.p("tensors", t.name, "selftest") for t in small]
    alone_path, contended_path = (m.p("tensors", t.name, "selftest") for t in big)
    with m:
        def fair():
            if os.environ.get("TBMFS_SANITIZED"):
                raise Skip("sanitized build: self-test times are not comparable there")
            # one self-test of the looper first, so that it has been served once
            opens_as(LOOPER, [[st[-1]]])
            alone = opens_as(OTHER, [[alone_path]])[0][0]
            lists = [st[k * PER_LOOP:(k + 1) * PER_LOOP] for k in range(LOOPS)]
            p = as_user(LOOPER, ["loops", json.dumps(lists)], stdin=subprocess.DEVNULL)
            try:
                time.sleep(0.3)  # the 30 loops' first opens queued (and more)
                contended = opens_as(OTHER, [[contended_path]])[0][0]
                out, err = p.communicate(timeout=CMD_TIMEOUT * 2)
            finally:
                if p.poll() is None:
                    p.kill()
                    p.wait(CMD_TIMEOUT)
            eq(p.returncode, 0, "looper exit (%s)" % err.strip()[-300:])
            loops = [json.loads(line) for line in out.splitlines()]
            errors = [e for r in loops for e in r["errors"]]
            check(not errors, "the looper's opens failed: %s" % errors[:3])
            secs = [s for r in loops for s in r["seconds"]]
            print("# another user's first self-test: %.3f s alone, %.3f s behind %d loops of "
                  "opens (%.2fx); the loops' opens %.3f s on average, %.3f s at most" % (
                      alone, contended, LOOPS, contended / alone, sum(secs) / len(secs),
                      max(secs)), flush=True)
            check(contended < 2 * alone, "another user's self-test took %.3f s behind one "
                  "user's %d loops, %.3f s alone" % (contended, LOOPS, alone))

        suite.case("one user's %d loops of self-test opens: another user's first self-test "
                   "within twice its time alone" % LOOPS, fair, timeout=180)

        def ready():
            if os.environ.get("TBMFS_SANITIZED"):
                raise Skip("sanitized build: self-test times are not comparable there")
            # the root report (never opened yet) keeps the queue's thread busy; the looper's
            # self-test done above must not wait for it
            p = as_user(OTHER, ["loops", json.dumps([[m.p("selftest")]])],
                        stdin=subprocess.DEVNULL)
            try:
                time.sleep(0.3)
                took = opens_as(LOOPER, [[st[0]]])[0][0]
                out, err = p.communicate(timeout=CMD_TIMEOUT * 2)
            finally:
                if p.poll() is None:
                    p.kill()
                    p.wait(CMD_TIMEOUT)
            eq(p.returncode, 0, "report reader exit (%s)" % err.strip()[-300:])
            report = json.loads(out.splitlines()[0])["seconds"][0]
            print("# a self-test already done reopened in %.3f s while the root report "
                  "(%.3f s) ran" % (took, report), flush=True)
            check(report > 0.5, "the root report took %.3f s: too short to tell" % report)
            check(took < report / 4, "reopening a self-test already done took %.3f s while the "
                  "root report ran (%.3f s): it waited in the queue" % (took, report))

        suite.case("a self-test already done is reopened at once while another runs", ready,
                   timeout=120)


def manifest_refused(suite):
    t = gen.make_tensor("t", [4, 8], "fp32", (2, 4), 1)
    outside = os.path.join(suite.tmp, "outside")
    gen.write_manifest(outside, [t])
    cases = {
        "a symlink leaving the directory": (
            lambda p: os.symlink(os.path.join("..", "outside", "manifest.json"), p),
            "resolves outside the model directory"),
        "a symlink to /dev/zero": (lambda p: os.symlink("/dev/zero", p),
                                   "resolves outside the model directory"),
        "a FIFO": (os.mkfifo, "not a regular file"),
    }
    for k, (label, (make, reason)) in enumerate(cases.items()):
        d = os.path.join(suite.tmp, "manifest-%d" % k)
        gen.write_manifest(d, [t])
        os.unlink(os.path.join(d, "manifest.json"))
        make(os.path.join(d, "manifest.json"))

        def go(d=d, reason=reason):
            code, out, err = harness.run_tbmfs(["--check", d])
            eq(code, 2, "--check exit (stdout %r, stderr %r)" % (out, err))
            lines = [x for x in (out + err).splitlines() if "manifest.json" in x]
            check(any(reason in x for x in lines), "no line names manifest.json and says %r: "
                  "stdout %r, stderr %r" % (reason, out, err))

        suite.case("--check: manifest.json that is %s is refused" % label, go)


def main(suite):
    global gen
    gen = harness.load_gen()
    readable_tmp(suite)
    manifest_refused(suite)
    fair_queue(suite)
    held(suite)


if __name__ == "__main__":
    run("integration-fairness", main)
