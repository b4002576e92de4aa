#!/usr/bin/python3
"""Measures the splice window: how often a spliced reply (raw.tb, read with O_DIRECT so that
every read reaches the daemon) carries bytes of a file rewritten in place during the read,
where the contract wants EIO. Each trial mounts a fresh 4 MiB container, reads raw.tb in
512 KiB requests in a loop while another thread rewrites the file in place, and counts the
trial as a leak when any reply holds a byte of the rewrite. Not a test: a race, measured.

Usage: scripts/splice_window.py [TRIALS [OPTION...]] (default 1000; options go to tbmfs, e.g.
-o nosplice); TBMFS= picks the binary."""

import mmap
import os
import random
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TBMFS = os.environ.get("TBMFS", os.path.join(ROOT, "build", "src", "tbmfs"))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
import harness  # noqa: E402

REQ = 512 * 1024


def make(gen, path, seed):
    t = gen.make_tensor("w", [1024, 1024], "fp32", (0, 0), seed)
    cont = gen.container([t])
    with open(path, "wb") as f:
        f.write(cont.data)
    return cont.data


def trial(work, a, b, rng):
    src = os.path.join(work, "m.tbm")
    mnt = os.path.join(work, "mnt")
    with open(src, "wb") as f:
        f.write(a)
    subprocess.run([TBMFS] + sys.argv[2:] + [src, mnt], check=True, timeout=30)
    leaked = False
    try:
        path = os.path.join(mnt, "tensors", "w", "raw.tb")
        size = os.path.getsize(path)
        fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
        buf = mmap.mmap(-1, REQ)

        def rewrite():
            time.sleep(rng.uniform(0, 0.004))
            with open(src, "r+b") as f:
                f.write(b)

        w = threading.Thread(target=rewrite)
        w.start()
        try:
            for _ in range(200):
                off = rng.randrange(0, size // REQ) * REQ
                try:
                    n = os.preadv(fd, [buf], off)
                except OSError:
                    break  # EIO: the change was seen
                if buf[:n] != a[off:off + n]:
                    leaked = True
                    break
        finally:
            w.join()
            os.close(fd)
    finally:
        subprocess.run(["fusermount3", "-u", mnt], timeout=30)
    return leaked


def main():
    trials = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    gen = harness.load_gen()
    rng = random.Random(1)
    with tempfile.TemporaryDirectory() as work:
        os.makedirs(os.path.join(work, "mnt"))
        a = make(gen, os.path.join(work, "a.tbm"), 1)
        b = make(gen, os.path.join(work, "b.tbm"), 2)
        assert len(a) == len(b)
        leaks = sum(trial(work, a, b, rng) for _ in range(trials))
    print("%s %s: %d of %d trials sent bytes of the rewrite"
          % (TBMFS, " ".join(sys.argv[2:]), leaks, trials))


if __name__ == "__main__":
    main()
