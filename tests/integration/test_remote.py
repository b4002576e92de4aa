#!/usr/bin/python3
"""Integration test of what every remote source owes its user whatever the server does: secrets
out of sight (a URL's user:password@ and ?query, a header's token), headers sent only to the
source's own origin, a server's words cleaned before they are quoted, a private certificate
authority for https:// and s3://, no read that waits for ever on a trickling server, and
another user's files served from memory at once while one user's reads wait on it."""

import errno
import json
import os
import signal
import struct
import subprocess
import sys
import threading
import time

import harness
import httpserve
import models
from harness import Mount, check, eq, mounted, read_all, run_tbmfs
from test_http import read_direct
from test_s3 import errno_name, finish, start

# two users with no other rights on an allow_other mount; setresuid needs no passwd entry
WAITER, VICTIM = 65534, 65533

# Run as a user: "wait PATH N" reads 1 MiB with O_DIRECT at each of N offsets of PATH, one
# thread each, all at once; "time PATH..." reads each PATH whole with O_DIRECT in turn and
# prints one JSON line of their seconds; "known PATH" reads the header.json PATH until its
# statistics are known and prints the seconds that took, as a JSON list.
CHILD = r"""
import json, mmap, os, sys, threading, time
def direct(path, off, n):
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    buf = mmap.mmap(-1, n)
    try:
        return os.preadv(fd, [buf], off)
    finally:
        buf.close()
        os.close(fd)
if sys.argv[1] == "known":
    t0 = time.monotonic()
    while json.load(open(sys.argv[2]))["kept"] is None:
        time.sleep(0.02)
    print(json.dumps([time.monotonic() - t0]))
    sys.exit(0)
if sys.argv[1] == "wait":
    def one(k):
        try:
            direct(sys.argv[2], k << 20, 1 << 20)
        except OSError:
            pass
    ts = [threading.Thread(target=one, args=(k,)) for k in range(int(sys.argv[3]))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    sys.exit(0)
secs = []
for p in sys.argv[2:]:
    t0 = time.monotonic()
    off = 0
    while True:
        n = direct(p, off, 1 << 20)
        if n <= 0:
            break
        off += n
    secs.append(time.monotonic() - t0)
print(json.dumps(secs))
"""


# Maps the file PATH and touches one byte of each of its pages in turn.
MAP_READER = r"""
import mmap, sys
with open(sys.argv[1], "rb") as f:
    m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
    sum(m[i] for i in range(0, len(m), 4096))
"""


def as_user(uid, args):
    return subprocess.Popen([sys.executable, "-c", CHILD] + args, user=uid, group=uid,
                            extra_groups=[], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)

PASSWORD, TOKEN, API_KEY = "PASSWORDpw01", "TOKENqs02", "APIKEYhdr03"
SECRETS = [PASSWORD, TOKEN, API_KEY]


def no_secret(where, text):
    for s in SECRETS:
        check(s not in text, "a secret in %s" % where)


def safetensors_metadata(m):
    with open(m.p("model.safetensors"), "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(n)).get("__metadata__", {})


def largest(m, names):
    return max(names, key=lambda d: os.stat(m.p("tensors", d, "raw.tb")).st_size)


def secrets(suite, model_bytes):
    header_file = os.path.join(suite.tmp, "headers")
    with open(header_file, "w") as f:
        f.write("# the service's key\nX-Api-Key: %s\n\n" % API_KEY)

    def go():
        with httpserve.Hostile(model_bytes) as server:
            server.etag = '"one\x1b[31m\r\xff"'
            url = "http://alice:%s@127.0.0.1:%d/m.tbm?token=%s" % (PASSWORD, server.port, TOKEN)
            # no read-ahead: the read after the change must find its bytes not cached yet
            m = start(suite, url, {}, ["-o", "http_header_file=" + header_file,
                                       "-o", "readahead=0"])
            try:
                shown = "http://127.0.0.1:%d/m.tbm?\u2026" % server.port
                with open("/proc/mounts") as f:
                    mounts = f.read()
                check(shown.replace(" ", "\\040") in mounts, "the source not in /proc/mounts")
                no_secret("/proc/mounts", mounts)
                # the header file's token is not there, and the URL's secrets are masked
                with open("/proc/%d/cmdline" % m.pid, "rb") as f:
                    cmdline = f.read().decode()
                check(API_KEY not in cmdline, "the token in the command line")
                no_secret("/proc/PID/cmdline", cmdline)
                check(any(h.get("X-Api-Key") == API_KEY for _, h in server.seen),
                      "the header of the file was not sent")
                eq(safetensors_metadata(m).get("source"), "m.tbm?\u2026",
                   "model.safetensors' source")
                # the server's ETag changes, escapes and all: the change is said, cleaned
                names = sorted(os.listdir(m.p("tensors")))
                server.etag = '"two\x1b]0;title\x07"'
                eq(errno_name(m.p("tensors", largest(m, names), "raw.tb")), "EIO",
                   "a read after the change")
                eq(harness.read_json(m.p("model.json"))["source"], shown, "model.json's source")
                for path in (m.p("model.json"), m.p("tensors.json")):
                    no_secret(path, read_all(path).decode())
            finally:
                err = finish(m)
        no_secret("the messages", err)
        check("changed on the server" in err, "no change line: %r" % err[-300:])
        for bad in ("\x1b", "\r", "\x07", "\ufffd"):
            check(bad not in err, "%r in the messages: %r" % (bad, err[-300:]))

    suite.case("secrets: user:password@, ?query and a header file's token out of sight; an "
               "ETag's escapes cleaned", go, 60)


def redirects(suite, model_bytes):
    def go():
        with httpserve.Hostile(model_bytes) as other, httpserve.Hostile(model_bytes) as home:
            home.jump_to = other.url("")
            m = start(suite, home.url("jump/m.tbm"), {},
                      ["-o", "http_header=X-Api-Key: " + API_KEY])
            try:
                with open("/proc/%d/cmdline" % m.pid, "rb") as f:
                    check(API_KEY not in f.read().decode(), "-o http_header's value in ps")
                names = sorted(os.listdir(m.p("tensors")))
                eq(len(read_all(m.p("tensors", largest(m, names), "raw.tb"))) > 0, True,
                   "a read through the redirect")
            finally:
                finish(m)
            check(home.seen and all(h.get("X-Api-Key") == API_KEY for _, h in home.seen),
                  "the header was not sent to the source's own origin")
            check(other.seen, "the redirect was not followed")
            leaked = [p for p, h in other.seen if "X-Api-Key" in h]
            eq(leaked, [], "requests to another port that carried the header")

    suite.case("redirects: the header goes to the source's origin only, not another port", go,
               60)


def private_ca(suite, model_path):
    root = os.path.join(suite.tmp, "www")
    os.makedirs(os.path.join(root, "bucket"))
    os.link(model_path, os.path.join(root, "m.tbm"))
    os.link(model_path, os.path.join(root, "bucket", "m.tbm"))
    nginx = httpserve.Nginx(os.path.join(suite.tmp, "nginx"), root, ca=True).start()
    try:
        def verified():
            with Mount(suite, nginx.tls_url("m.tbm"), ["-o", "ca_file=" + nginx.ca_file]) as m:
                eq(m.start(), 0, "exit (%s)" % m.err.strip())
                check(mounted(m.path), "not mounted")
                eq(harness.read_json(m.p("model.json"))["tensor_count"] > 0, True, "tensors")
                names = sorted(os.listdir(m.p("tensors")))
                with open(model_path, "rb") as f:
                    whole = f.read()
                raw = read_all(m.p("tensors", largest(m, names), "raw.tb"))
                check(raw in whole, "raw.tb is not bytes of the model")

        def refused():
            mnt = os.path.join(suite.tmp, "refused")
            os.makedirs(mnt, exist_ok=True)
            rc, out, err = run_tbmfs([nginx.tls_url("m.tbm"), mnt])
            eq(rc, 1, "exit without ca_file")
            check(not mounted(mnt), "mounted without ca_file")
            eq(len(err.strip().splitlines()), 1, "lines: %r" % err)
            check(nginx.tls_url("m.tbm") in err and "certificate" in err, "the line: %r" % err)

        def s3_bundle():
            env = {"AWS_ENDPOINT_URL": "https://127.0.0.1:%d" % nginx.tls_port,
                   "AWS_CA_BUNDLE": nginx.ca_file, "HOME": "/nonexistent"}
            env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")} | env
            rc, out, err = run_tbmfs(["--check", "s3://bucket/m.tbm"], env=env)
            eq(rc, 0, "--check exit with AWS_CA_BUNDLE (%s)" % err.strip()[:200])
            env.pop("AWS_CA_BUNDLE")
            rc, out, err = run_tbmfs(["--check", "s3://bucket/m.tbm"], env=env)
            eq(rc, 2, "--check exit without AWS_CA_BUNDLE")
            check("s3://bucket/m.tbm" in err and "certificate" in err, "the line: %r" % err)

        suite.case("https: -o ca_file trusts a private CA", verified, 60)
        suite.case("https: without ca_file, a private CA's certificate is refused", refused, 60)
        suite.case("s3: AWS_CA_BUNDLE trusts a private CA", s3_bundle, 60)
    finally:
        nginx.stop()


def readers(m, names):
    """Reads each tensor's raw.tb on a thread of its own; (threads, results: name -> errno
    name and seconds)."""
    results = {}

    def read(d):
        # O_DIRECT: each read is one request, not a readahead the kernel asks again page by
        # page once it failed
        t0 = time.monotonic()
        try:
            read_direct(m.p("tensors", d, "raw.tb"))
            err = "0"
        except OSError as e:
            err = errno.errorcode.get(e.errno, str(e.errno))
        results[d] = (err, time.monotonic() - t0)

    threads = [threading.Thread(target=read, args=(d,), daemon=True) for d in names]
    for t in threads:
        t.start()
    return threads, results


def trickle(suite, model_bytes):
    def bounded():
        with httpserve.Hostile(model_bytes) as server:
            # -o http_timeout=2: reads wait 2 + 10 s in all, whatever the server sends
            m = start(suite, server.url("m.tbm"), {}, ["-o", "http_timeout=2"])
            try:
                names = sorted(os.listdir(m.p("tensors")),
                               key=lambda d: -os.stat(m.p("tensors", d, "raw.tb")).st_size)[:5]
                # a byte every 0.5 s: twice what libcurl's stall rule (1 byte/s over the
                # 2 s of http_timeout) needs, so only the deadline ends these reads
                server.trickle, server.trickle_before = 0.5, len(model_bytes)
                threads, results = readers(m, names)
                for t in threads:
                    t.join(40)
                eq(sorted(results), sorted(names), "readers that returned within 40 s")
                for d, (err, secs) in results.items():
                    eq(err, "EIO", "%s read from a trickling server" % d)
                    check(secs < 20, "%s waited %.1f s" % (d, secs))
                check(m.alive(), "the daemon died")
                server.trickle = None
                time.sleep(3.5)  # the failures are remembered 3 s (TBM_HTTP_FAIL_MEMORY_MS)
                eq(len(read_all(m.p("tensors", names[0], "raw.tb"))) > 0, True,
                   "a read once the server answers again")
            finally:
                err = finish(m)
            check("the transfer timed out" in err, "the reason: %r" % err[-400:])

    def sigterm():
        # The files the readers hold open are never released once the session ends under
        # them (LeakSanitizer: tbm_file_open's state): not what this case is about.
        env = {}
        if os.environ.get("TBMFS_SANITIZED"):
            env["ASAN_OPTIONS"] = "detect_leaks=0:abort_on_error=1"
        with httpserve.Hostile(model_bytes) as server:
            m = start(suite, server.url("m.tbm"), env)
            try:
                names = sorted(os.listdir(m.p("tensors")),
                               key=lambda d: -os.stat(m.p("tensors", d, "raw.tb")).st_size)[:5]
                server.trickle, server.trickle_before = 0.9, len(model_bytes)
                threads, results = readers(m, names)
                time.sleep(3)
                eq(results, {}, "readers done before SIGTERM")
                t0 = time.monotonic()
                os.kill(m.pid, signal.SIGTERM)
                rc = m.wait_exit(20)
                took = time.monotonic() - t0
                eq(rc, 0, "exit status after SIGTERM (%.1f s)" % took)
                check(took < 10, "the daemon took %.1f s to end" % took)
                check(not mounted(m.path), "still mounted after SIGTERM")
                for t in threads:
                    t.join(10)
                eq(sorted(results), sorted(names), "readers that returned")
            finally:
                m.stop()

    def page_readers():
        # A buffered cat and a reader of a mapping: the kernel asks a failed read-ahead again
        # page by page, and each retry waited a whole deadline (24 s and more here, 180 s
        # and 270 s with the defaults); a failure remembered for a few seconds fails them
        # at once, so each reader has its EIO (SIGBUS) one deadline after it asked.
        with httpserve.Hostile(model_bytes) as server:
            m = start(suite, server.url("m.tbm"), {}, ["-o", "http_timeout=2"])
            procs = []
            try:
                names = sorted(os.listdir(m.p("tensors")),
                               key=lambda d: -os.stat(m.p("tensors", d, "raw.tb")).st_size)[:2]
                server.trickle, server.trickle_before = 0.5, len(model_bytes)
                t0 = time.monotonic()
                procs = [subprocess.Popen(["cat", m.p("tensors", names[0], "raw.tb")],
                                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE),
                         subprocess.Popen([sys.executable, "-c", MAP_READER,
                                           m.p("tensors", names[1], "raw.tb")],
                                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)]
                took = []
                for p in procs:
                    p.wait(60)
                    took.append(time.monotonic() - t0)
                print("# cat %.1f s, mmap %.1f s (the deadline: 12 s)" % tuple(took), flush=True)
                cat_err = procs[0].stderr.read().decode()
                check(procs[0].returncode != 0 and "Input/output error" in cat_err,
                      "cat: exit %s, %r" % (procs[0].returncode, cat_err))
                eq(procs[1].returncode, -signal.SIGBUS, "the mapping's reader")
                for what, secs in zip(("cat", "mmap"), took):
                    check(secs < 20, "%s waited %.1f s for its EIO" % (what, secs))
                check(m.alive(), "the daemon died")
            finally:
                for p in procs:
                    if p.poll() is None:
                        p.kill()
                        p.wait()
                    p.stderr.close()
                server.done.set()
                err = finish(m)
        url = server.url("m.tbm")
        check(url + ": bytes " in err and "the transfer timed out" in err,
              "no line naming %s and the time-out: %r" % (url, err[-600:]))
        check("shrank" not in err and "changed" not in err, "a change blamed: %r" % err[-600:])

    suite.case("trickle: a byte every 0.5 s: reads fail within the deadline, the daemon lives",
               bounded, 90)
    suite.case("trickle: buffered cat and mmap get EIO within one deadline, said as a time-out",
               page_readers, 90)
    suite.case("trickle: SIGTERM ends the daemon and its mount while reads wait", sigterm, 90)


def failed_transfer(suite, model_bytes, model_path):
    def go():
        local = Mount(suite, model_path)
        with httpserve.Hostile(model_bytes) as server, local:
            eq(local.start(), 0, "the local mount")
            m = start(suite, server.url("m.tbm"), {}, ["-o", "http_timeout=2"])
            try:
                names = sorted(os.listdir(m.p("tensors")),
                               key=lambda d: -os.stat(m.p("tensors", d, "raw.tb")).st_size)
                big = names[0]
                seen = len(server.seen)
                server.fail = 503  # down for a moment
                # nothing waits for the statistics: null, and why
                got = harness.read_json(m.p("tensors", big, "header.json"))
                eq(got["kept"], None, "header.json's kept while the server is down")
                check(any("not known yet" in w for w in got["warnings"]),
                      "header.json's warnings: %r" % got["warnings"])
                eq(harness.read_json(m.p("model.json"))["total_kept"], None,
                   "model.json's total_kept while the server is down")
                # the transfer for them fails: its 3 tries refused, then a moment to give up
                deadline = time.monotonic() + 30
                while len(server.seen) < seen + 3:
                    check(time.monotonic() < deadline, "no transfer tried for the statistics")
                    time.sleep(0.1)
                time.sleep(1)
                server.fail = None
                time.sleep(3.5)  # the failures are remembered 3 s (TBM_HTTP_FAIL_MEMORY_MS)
                got = known_header(m, big)
                want = harness.read_json(local.p("tensors", big, "header.json"))
                for k in ("kept", "density", "warnings"):
                    eq(got.get(k), want.get(k), "header.json's %s once the server is back" % k)
                # every tensor's statistics, each asked again on a thread of its own
                eq(known(m.p("model.json"), "total_kept")["total_kept"],
                   harness.read_json(local.p("model.json"))["total_kept"], "total_kept")
            finally:
                err = finish(m)
        check("transfer failed" in err, "no transfer failure said: %r" % err[-300:])
        check("changed" not in err, "a change blamed: %r" % err[-300:])

    suite.case("a failed transfer is not a change: the statistics are computed again", go, 90)


def small_and_big(suite):
    """A container of a 64x64 tensor "small" and a 4096x4096 fp32 "big" (a raw.tb over 31 MiB),
    both 2:4: its bytes and each tensor's expectation by name."""
    gen = harness.load_gen()
    path = os.path.join(suite.tmp, "fair.tbm")
    big = gen.make_tensor("big", [4096, 4096], "fp32", (2, 4), 7)
    small = gen.make_tensor("small", [64, 64], "fp32", (2, 4), 8)
    _, expects = models.write_container(gen, path, [small, big])
    with open(path, "rb") as f:
        return f.read(), {e.name: e for e in expects}


def known(path, key, within=30):
    """The JSON file at path once its key is known (statistics are computed on the daemon's
    own threads, asked by the first read that shows them)."""
    deadline = time.monotonic() + within
    while True:
        h = harness.read_json(path)
        if h[key] is not None:
            return h
        check(time.monotonic() < deadline, "%s's %s not known after %d s" % (path, key, within))
        time.sleep(0.1)


def known_header(m, d, within=30):
    """Tensor d's header.json once its statistics are known."""
    return known(m.p("tensors", d, "header.json"), "kept", within)


def fairness(suite, data):
    """One user's 30 O_DIRECT reads of blocks not cached, on a trickling server, and another
    user's O_DIRECT reads of index.json, of a header.json whose statistics are known and of a
    raw.tb whose blocks are cached: each under 0.2 s. The kernel's default of 12 background
    requests a connection, held by the parked reads, made them wait for the deadline."""
    os.chmod(suite.tmp, 0o755)

    def go():
        with httpserve.Hostile(data) as server:
            m = start(suite, server.url("m.tbm"), {}, ["-o", "allow_other"])
            waiter = None
            try:
                mine = [m.p("index.json"), m.p("tensors", "small", "header.json"),
                        m.p("tensors", "small", "raw.tb")]
                known_header(m, "small")
                for p in mine:  # statistics known, blocks cached
                    read_direct(p)
                raw = m.p("tensors", "big", "raw.tb")
                check(os.stat(raw).st_size > 31 << 20, "big's raw.tb is too small")
                server.trickle, server.trickle_before = 0.5, len(data)
                waiter = as_user(WAITER, ["wait", raw, "30"])
                time.sleep(1)  # the 30 reads parked
                check(waiter.poll() is None, "the waiter's reads ended: %s" % (
                    waiter.stderr.read()[-300:] if waiter.poll() is not None else ""))
                victim = as_user(VICTIM, ["time"] + mine)
                out, err = victim.communicate(timeout=harness.CMD_TIMEOUT)
                eq(victim.returncode, 0, "the other user's reads (%s)" % err.strip()[-300:])
                secs = json.loads(out)
                print("# while 30 reads wait: index.json %.3f s, header.json %.3f s, cached "
                      "raw.tb %.3f s" % tuple(secs), flush=True)
                for p, t in zip(("index.json", "header.json", "raw.tb"), secs):
                    check(t < 0.2, "%s took %.3f s while another user's reads wait" % (p, t))
            finally:
                server.done.set()  # the trickles end, their reads fail at once
                if waiter:
                    try:
                        waiter.wait(harness.CMD_TIMEOUT)
                    finally:
                        if waiter.poll() is None:
                            waiter.kill()
                            waiter.wait()
                        waiter.stdout.close()
                        waiter.stderr.close()
                finish(m)

    suite.case("fairness: one user's 30 reads wait on a trickle, another's index.json, "
               "header.json and cached raw.tb under 0.2 s", go, 90)


def no_wait_for_statistics(suite, data, expects):
    """model.json, tensors.json, a header.json and user.tbm.density need no transfer: on a
    server that trickles every byte, each answers in under 1 s, what needs the statistics null
    (absent for the attribute) and a warning saying why; once the server answers again, the
    statistics come, computed on the daemon's own threads. They waited for every tensor's
    statistics: model.json gave EIO after the transfer deadline."""
    def ask(m):
        """Each file's answer, or OSError, and its seconds, in order, on a thread of its own:
        an answer that does not come within 10 s is missing."""
        big = m.p("tensors", "big")
        asks = [("model.json", lambda: harness.read_json(m.p("model.json"))),
                ("tensors.json", lambda: harness.read_json(m.p("tensors.json"))),
                ("header.json", lambda: harness.read_json(os.path.join(big, "header.json"))),
                ("listxattr", lambda: os.listxattr(big)),
                ("user.tbm.density", lambda: os.getxattr(big, "user.tbm.density"))]
        got = {}

        def run():
            for name, fn in asks:
                t0 = time.monotonic()
                try:
                    v = fn()
                except OSError as e:
                    v = e
                got[name] = (v, time.monotonic() - t0)

        th = threading.Thread(target=run, daemon=True)
        th.start()
        th.join(10)
        print("# while transfers trickle: " + ", ".join(
            "%s %.3f s" % (k, got[k][1]) for k, _ in asks if k in got), flush=True)
        for name, _ in asks:
            check(name in got, "%s: no answer within 10 s while transfers trickle" % name)
            check(got[name][1] < 1, "%s took %.1f s while transfers trickle" % (
                name, got[name][1]))
        return {k: v for k, (v, _) in got.items()}

    def go():
        with httpserve.Hostile(data) as server:
            m = start(suite, server.url("m.tbm"), {}, ["-o", "http_timeout=2"])
            try:
                # what ls -l asks of every file has nothing computed
                seen = len(server.seen)
                os.listxattr(m.p("tensors", "big"))
                for name in ("system.posix_acl_access", "security.selinux", "user.tbm.name"):
                    try:
                        os.getxattr(m.p("tensors", "big"), name)
                    except OSError:
                        pass
                time.sleep(0.5)
                eq(server.seen[seen:], [], "requests made for other attributes")
                server.trickle, server.trickle_before = 0.5, len(data)
                got = ask(m)
                model, tensors, header = got["model.json"], got["tensors.json"], got["header.json"]
                for name in ("model.json", "tensors.json", "header.json"):
                    check(not isinstance(got[name], OSError), "%s: %s" % (name, got[name]))
                eq(model["total_kept"], None, "model.json's total_kept")
                # big's warning counted (small's statistics may be known by now or not: its
                # bytes came with the headers)
                check(model["warnings"] >= 1, "model.json's warnings: %r" % model["warnings"])
                for k in ("kept", "density", "groups_over_n", "mask_conflicts"):
                    eq(header[k], None, "header.json's %s" % k)
                why = [w for w in header["warnings"] if "not known yet" in w]
                eq(len(why), 1, "header.json's warning saying why: %r" % header["warnings"])
                row = {t["dir"]: t for t in tensors}["big"]
                eq(row["density"], None, "tensors.json's density")
                eq(row["warnings"], len(header["warnings"]), "tensors.json's warnings count")
                check("user.tbm.density" not in got["listxattr"],
                      "listxattr: %r" % got["listxattr"])
                check(isinstance(got["user.tbm.density"], OSError) and
                      got["user.tbm.density"].errno == errno.ENODATA,
                      "user.tbm.density: %r" % got["user.tbm.density"])
                check(m.alive(), "the daemon died")
                # the server answers again: the parked transfers fail at once, the next asks
                # have the statistics computed
                server.trickle = None
                server.done.set()
                for d, e in expects.items():
                    h = known_header(m, d)
                    eq((h["kept"], h["density"]), tuple(e.stats[:2]), "%s's kept, density" % d)
                    check(not any("not known yet" in w for w in h["warnings"]),
                          "%s still says: %r" % (d, h["warnings"]))
                eq(float(os.getxattr(m.p("tensors", "big"), "user.tbm.density")),
                   expects["big"].stats[1], "user.tbm.density once known")
                eq(harness.read_json(m.p("model.json"))["total_kept"],
                   sum(e.stats[0] for e in expects.values()), "model.json's total_kept")
            finally:
                server.done.set()
                err = finish(m)
        check("changed" not in err, "a change blamed: %r" % err[-300:])

    suite.case("statistics: model.json, tensors.json, header.json and user.tbm.density answer "
               "at once on a trickle, null and why, then the values", go, 90)


def statistics_fairness(suite):
    """One user has the statistics of four tensors asked (their header.json, model.json) on a
    trickling server; another user's header.json of a tensor whose bytes are cached gets its
    statistics in under 1 s: the statistics' threads are several, and one user's work holds
    one of them at most. Behind the one thread, it waited for the deadline."""
    gen = harness.load_gen()
    os.chmod(suite.tmp, 0o755)
    path = os.path.join(suite.tmp, "four.tbm")
    bigs = [gen.make_tensor("big%d" % k, [1024, 1024], "fp32", (2, 4), 20 + k) for k in range(4)]
    small = gen.make_tensor("small", [64, 64], "fp32", (2, 4), 30)
    _, expects = models.write_container(gen, path, bigs + [small])
    with open(path, "rb") as f:
        data = f.read()
    # the cache's block holding small's blob (1 MiB blocks), and every block after, at full
    # speed: the mount has read them already for the headers and the index
    fast_from = expects[-1].off >> 20 << 20
    check(fast_from >= 4 << 20, "small's block is one of big3's only")

    def go():
        with httpserve.Hostile(data) as server:
            m = start(suite, server.url("m.tbm"), {}, ["-o", "allow_other"])
            try:
                server.trickle, server.trickle_before = 0.5, fast_from
                asks = [m.p("tensors", "big%d" % k, "header.json") for k in range(4)]
                waiter = as_user(WAITER, ["time"] + asks + [m.p("model.json")])
                out, err = waiter.communicate(timeout=harness.CMD_TIMEOUT)
                eq(waiter.returncode, 0, "the first user's asks (%s)" % err.strip()[-300:])
                time.sleep(0.5)  # its computations started, and wait on the trickle
                victim = as_user(VICTIM, ["known", m.p("tensors", "small", "header.json")])
                out, err = victim.communicate(timeout=harness.CMD_TIMEOUT)
                eq(victim.returncode, 0, "the other user's header.json (%s)" % err.strip()[-300:])
                secs = json.loads(out)[0]
                print("# small's statistics for another user in %.3f s" % secs, flush=True)
                check(secs < 1, "small's statistics took %.3f s" % secs)
            finally:
                server.done.set()
                finish(m)

    suite.case("statistics: one user's four on a trickle, another's computed within 1 s", go, 90)


def main(suite):
    model = os.path.join(suite.tmp, "model.tbm")
    subprocess.run(["/usr/bin/python3", harness.GEN, "llama", model], check=True, timeout=120)
    with open(model, "rb") as f:
        data = f.read()
    fair, expects = small_and_big(suite)
    no_wait_for_statistics(suite, fair, expects)
    fairness(suite, fair)
    statistics_fairness(suite)
    secrets(suite, data)
    redirects(suite, data)
    private_ca(suite, model)
    trickle(suite, data)
    failed_transfer(suite, data, model)
    for m in list(suite.mounts):
        m.stop()


if __name__ == "__main__":
    harness.run("integration-remote", main)
