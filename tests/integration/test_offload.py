#!/usr/bin/python3
"""Integration test: work that reads whole tensors to answer (their statistics, for
user.tbm.density, header.json and the other rendered views) runs off the FUSE workers, as the
self-tests do, and so do reads that wait for a remote source's transfer, so that with every
worker asked for such work at once a file served from memory (index.json) is still answered at
once [v3: "a stalled transfer never delays a file that needs no transfer"]. The model is read from a slow server (nginx's
limit_rate: a 1 MiB range takes a second), so that a tensor's statistics take seconds."""

import errno
import os
import threading
import time

import harness
import httpserve
import models
from harness import CMD_TIMEOUT, check, eq, read_all, run

N = 4


def main(suite):
    gen = harness.load_gen()
    root = os.path.join(suite.tmp, "www")
    os.makedirs(root)
    big = [gen.make_tensor("big%d" % k, [512, 4096], "fp16", (2, 4), 40 + k)
           for k in range(2 * N)]
    models.write_container(gen, os.path.join(root, "big.tbm"), big)
    with httpserve.Nginx(os.path.join(suite.tmp, "nginx"), root) as nginx:
        # no read-ahead: each read below must wait for the slow server itself (a window
        # over 21 connections had fetched the next tensor before it was asked for)
        m = suite.mount(nginx.url("slow/big.tbm"), args=["-o", "max_threads=2,readahead=0"],
                        name="mount from a slow server, two FUSE workers")
        with m:
            def known(k):
                """big<k>'s density once known: on a remote mount nothing waits for the
                statistics, the first ask has them computed on the daemon's own threads and
                they are absent until then."""
                d = m.p("tensors", "big%d" % k)
                deadline = time.monotonic() + CMD_TIMEOUT
                while True:
                    try:
                        return float(os.getxattr(d, "user.tbm.density"))
                    except OSError as e:
                        if e.errno != errno.ENODATA:
                            raise
                    check(time.monotonic() < deadline, "big%d's density not known" % k)
                    time.sleep(0.05)

            def known_header(k):
                deadline = time.monotonic() + CMD_TIMEOUT
                while True:
                    h = harness.read_json(m.p("tensors", "big%d" % k, "header.json"))
                    if h["kept"] is not None:
                        return h
                    check(time.monotonic() < deadline, "big%d's header.json: %r" % (k, h))
                    time.sleep(0.05)

            def free():
                start = time.monotonic()
                density = known(0)
                alone = time.monotonic() - start
                check(0.4 < density < 0.6, "density of a 2:4 tensor: %r" % density)
                got = {}

                def ask(k):
                    try:
                        got[k] = known_header(k) if k == N - 1 else known(k)
                    except (OSError, harness.Failure) as e:
                        got[k] = e

                threads = [threading.Thread(target=ask, args=(k,)) for k in range(1, N)]
                for t in threads:
                    t.start()
                time.sleep(alone / 5)
                start = time.monotonic()
                read_all(m.p("index.json"))
                took = time.monotonic() - start
                for t in threads:
                    t.join(CMD_TIMEOUT)
                eq(sorted(got), list(range(1, N)), "every request answered")
                for k, v in got.items():
                    check(not isinstance(v, Exception), "big%d: %s" % (k, v))
                print("# index.json %.3f s, one tensor alone %.3f s" % (took, alone))
                check(took < alone / 2, "index.json took %.2f s while statistics were computed "
                      "(one tensor's alone: %.2f s): they held the workers" % (took, alone))

            suite.case("statistics leave the FUSE workers free", free, timeout=120)

            def reads():
                start = time.monotonic()
                first = read_all(m.p("tensors", "big%d" % N, "raw.tb"))
                alone = time.monotonic() - start
                got = {}

                def read(k):
                    got[k] = read_all(m.p("tensors", "big%d" % k, "raw.tb"))

                threads = [threading.Thread(target=read, args=(k,)) for k in range(N + 1, 2 * N)]
                for t in threads:
                    t.start()
                time.sleep(alone / 5)
                start = time.monotonic()
                read_all(m.p("index.json"))
                again = read_all(m.p("tensors", "big%d" % N, "raw.tb"))
                took = time.monotonic() - start
                for t in threads:
                    t.join(CMD_TIMEOUT)
                eq(again, first, "raw.tb read again from the cache")
                eq(sorted(got), list(range(N + 1, 2 * N)), "every read answered")
                for k in range(N + 1, 2 * N):
                    eq(len(got[k]), len(first), "raw.tb of big%d" % k)
                print("# index.json and a cached raw.tb %.3f s, one raw.tb alone %.3f s"
                      % (took, alone))
                check(took < alone / 2, "index.json and a cached file took %.2f s while reads "
                      "waited for the server (one alone: %.2f s): they held the workers"
                      % (took, alone))

            suite.case("reads waiting for a slow server leave the FUSE workers free", reads,
                       timeout=120)
        m.stop()


if __name__ == "__main__":
    run("integration-offload", main)
