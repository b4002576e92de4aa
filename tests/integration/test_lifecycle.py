#!/usr/bin/python3
"""Integration test of the daemon's life: backgrounding by default only once the mount is
usable, -f staying in the foreground and exiting 0 on fusermount3 -u, SIGTERM and SIGINT,
the mount helper (mount -t fuse.tbmfs), -s, -V, -o max_read and max_threads, TBMFS_KERNELS
and clean unmounts."""

import mmap
import os
import signal
import subprocess
import threading
import time

import harness
import models
from harness import (CMD_TIMEOUT, TBMFS, Mount, check, direct_read, eq, kernels_supported, mounted,
                     pipes_of, read_all, read_json, run, run_tbmfs, settled_pipes)

gen = None


def background(suite, src, cont):
    m = Mount(suite, src)

    def start():
        eq(m.start(), 0, "exit code (%s)" % m.err.strip())
        # No wait at all: the command must return only once the mount serves requests.
        eq(read_all(m.p("index.json")), cont.index_bytes, "index.json right after return")
        check(mounted(m.path), "not in /proc/mounts")
        check(m.pid is not None and m.alive(), "no daemon process left serving the mount")
        with open("/proc/%d/stat" % m.pid) as f:
            ppid = int(f.read().split(")")[-1].split()[1])
        check(ppid != os.getpid(), "the daemon is still our child: not backgrounded")

    suite.case("background: returns once the mount is usable", start)

    def unmount():
        eq(m.unmount().returncode, 0, "fusermount3 -u exit")
        check(not mounted(m.path), "still mounted")
        m.wait_exit(10)
        check(not m.alive(), "daemon did not exit")

    suite.case("background: fusermount3 -u ends the daemon", unmount)
    m.stop()

    t = Mount(suite, src)

    def term():
        eq(t.start(), 0, "exit code (%s)" % t.err.strip())
        check(t.pid, "no daemon pid")
        os.kill(t.pid, signal.SIGTERM)
        t.wait_exit(10)
        check(not t.alive(), "daemon did not exit on SIGTERM")
        check(not mounted(t.path), "mount left behind after SIGTERM")

    suite.case("background: SIGTERM unmounts and exits", term)
    t.stop()


def foreground(suite, src, cont):
    for how in ("fusermount3 -u", "SIGTERM", "SIGINT"):
        m = Mount(suite, src, foreground=True)

        def go(m=m, how=how):
            rc = m.start()
            check(rc is None, "tbmfs -f exited %s: %s" % (rc, m.err.strip()))
            eq(read_all(m.p("index.json")), cont.index_bytes, "index.json")
            time.sleep(0.3)
            check(m.proc.poll() is None, "tbmfs -f left the foreground")
            if how == "fusermount3 -u":
                eq(m.unmount().returncode, 0, "fusermount3 -u exit")
            else:
                m.proc.send_signal(signal.SIGTERM if how == "SIGTERM" else signal.SIGINT)
            eq(m.wait_exit(10), 0, "tbmfs -f exit code")
            check(not mounted(m.path), "mount left behind")

        suite.case("foreground: -f exits 0 on %s" % how, go)
        m.stop()


def options(suite, src, cont):
    m = Mount(suite, src, args=["-s"])

    def single():
        eq(m.start(), 0, "exit code (%s)" % m.err.strip())
        eq(read_all(m.p("index.json")), cont.index_bytes, "index.json")

    suite.case("options: -s (single-threaded) mounts and serves", single)
    m.stop()

    def version():
        rc, out, err = run_tbmfs(["-V"])
        eq(rc, 0, "exit code")
        check("0.1.0" in out + err, "no version in %r" % (out + err))

    suite.case("options: -V prints the version", version)
    suite.case("options: -h exits 0", lambda: eq(run_tbmfs(["-h"])[0], 0, "exit code"))

    helper = Mount(suite, src)

    def mount_helper():
        # The fstab form fuse.tbmfs needs tbmfs installed where mount(8) looks; the
        # PROGRAM#SOURCE form runs the same helper (mount.fuse3) and calling convention.
        suite.mounts.append(helper)
        p = subprocess.run(["mount", "-t", "fuse", "-o", "ro", "%s#%s" % (TBMFS, src),
                            helper.path], capture_output=True, timeout=CMD_TIMEOUT,
                           stdin=subprocess.DEVNULL)
        helper.pid = helper.find_daemon()
        eq(p.returncode, 0, "mount exit (%s)" % p.stderr.decode().strip())
        eq(read_all(helper.p("index.json")), cont.index_bytes, "index.json")
        check(helper.pid is not None, "no daemon found")

    suite.case("options: mount -t fuse -o ro TBMFS#SOURCE (mount helper)", mount_helper)
    helper.stop()
    max_read(suite, suite.tmp)
    workers(suite, suite.tmp)


def mount_options(path):
    with open("/proc/mounts", errors="surrogateescape") as f:
        for line in f:
            fields = line.split()
            if fields[1] == path:
                return fields[3].split(",")
    raise harness.Failure("%s is not in /proc/mounts" % path)


SPLICED = ("raw.tb", "weights.bin", "mask.bin", "dense.f32", "dense.npy")


def source_views(m):
    """The views of every tensor that can be spliced from the source."""
    return {(name, view): direct_read(m.p("tensors", name, view))
            for name in sorted(os.listdir(m.p("tensors"))) for view in SPLICED}


def max_read(suite, tmp):
    # Replies of 512 KiB are spliced from the source; 4 KiB ones are copied by libfuse;
    # 1 MiB ones (too large for an unprivileged pipe) and -o nosplice are read by the
    # daemon. The 1 MiB views of the large tensors take whole 512 KiB replies. The plain
    # tensor's dense views are its weights, spliced too (past the .npy header); those of
    # "large" (pruned values stored non-zero) and of "m40" (a mask the contract's rule makes
    # unusable: shown unmasked) are computed.
    src = os.path.join(tmp, "reads.tbm")
    tensors = models.sound_tensors(gen)[:3] + [
        gen.make_tensor("large", [512, 512], "fp32", (2, 4), 41, conflicts=4096),
        gen.make_tensor("plain", [512, 512], "fp32", (0, 0), 42),
        gen.make_tensor("m40", [512, 520], "fp32", (2, 40), 43, prune=False)]
    with open("/proc/sys/fs/pipe-max-size") as f:
        spliced = 524288 + 4 * 4096 <= int(f.read())
    models.write_container(gen, src, tensors)
    mounts = {"default": Mount(suite, src),
              "small": Mount(suite, src, args=["-o", "max_read=4096"]),
              "large": Mount(suite, src, args=["-o", "max_read=1048576"]),
              "nosplice": Mount(suite, src, args=["-o", "nosplice"]),
              "dense": Mount(suite, src)}
    options = {"default": "max_read=524288", "small": "max_read=4096",
               "large": "max_read=1048576", "nosplice": "max_read=524288",
               "dense": "max_read=524288"}

    def requests():
        for key, m in mounts.items():
            eq(m.start(), 0, "%s: exit code (%s)" % (key, m.err.strip()))
            check(options[key] in mount_options(m.path),
                  "%s: options %s lack %s" % (key, mount_options(m.path), options[key]))
            eq(settled_pipes(m.pid), 0, "%s: pipes before any read" % key)
        want = source_views(mounts["nosplice"])
        check(len(want[("large", "raw.tb")]) > 1 << 20, "large raw.tb is too small")
        eq(want[("plain", "dense.f32")], want[("plain", "weights.bin")], "plain dense.f32")
        check(want[("large", "dense.f32")] != want[("large", "weights.bin")],
              "large: the mask changes nothing")
        for key in ("default", "small", "large"):
            eq(source_views(mounts[key]), want, "%s: views" % key)
        eq(pipes_of(mounts["default"].pid) > 0, spliced, "default: spliced")
        eq(direct_read(mounts["dense"].p("tensors", "plain", "dense.npy")),
           want[("plain", "dense.npy")], "plain dense.npy alone")
        eq(pipes_of(mounts["dense"].pid) > 0, spliced, "plain dense.npy spliced")
        for key in ("large", "nosplice"):
            eq(pipes_of(mounts[key].pid), 0, "%s: pipes after reading" % key)

    suite.case("options: -o max_read=N sets the request size, 512 KiB by default; views are "
               "spliced unless -o nosplice or max_read is too large for a pipe", requests)
    for m in mounts.values():
        m.stop()

    def refused():
        for bad in ("lots", "100", "+8192"):
            rc, _, err = run_tbmfs([src, tmp, "-o", "max_read=" + bad])
            eq(rc, 2, "max_read=%s: exit code" % bad)
            check("max_read=" + bad in err, "message %r does not name the option" % err)

    suite.case("options: -o max_read=lots, =100, =+8192 are refused", refused)


def busy_tasks(m, path):
    """The daemon's threads after 16 readers have kept O_DIRECT reads of path going for a
    second: each a request a worker computes, so libfuse starts all the workers it may."""
    stop = time.monotonic() + 1.0
    errors = []

    def reader(k):
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
            try:
                with mmap.mmap(-1, 65536) as buf:
                    i = k
                    while time.monotonic() < stop:
                        os.preadv(fd, [buf], (i % 16) * 65536)
                        i += 1
            finally:
                os.close(fd)
        except OSError as e:
            errors.append(e)

    threads = [threading.Thread(target=reader, args=(k,)) for k in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    eq(errors, [], "reads of %s" % path)
    return len(os.listdir("/proc/%d/task" % m.pid))


def workers(suite, tmp):
    # At most twice the CPUs the daemon may run on (4 to 10) FUSE workers, unless
    # -o max_threads says. The daemons are started on one CPU, so that the default is 4 on
    # any machine; besides its workers a daemon has its main thread, the self-tests' thread,
    # the statistics' four (STATS_THREADS in src/cli/mount.c), and the one that watches its
    # file.
    # The mount with 10 shows that the load would have had more workers than 4.
    src = os.path.join(tmp, "workers.tbm")
    models.write_container(gen, src, [
        gen.make_tensor("large", [512, 512], "fp32", (2, 4), 41, conflicts=4096)])
    mounts = {"one": Mount(suite, src, args=["-o", "max_threads=1"]),
              "default": Mount(suite, src),
              "ten": Mount(suite, src, args=["-o", "max_threads=10"])}

    def capped():
        cpus = os.sched_getaffinity(0)
        os.sched_setaffinity(0, {min(cpus)})
        try:
            for key, m in mounts.items():
                eq(m.start(), 0, "%s: exit code (%s)" % (key, m.err.strip()))
        finally:
            os.sched_setaffinity(0, cpus)
        workers = {key: busy_tasks(m, m.p("tensors", "large", "dense.f32")) - (1 + 1 + 4 + 1)
                   for key, m in mounts.items()}
        eq(workers["one"], 1, "-o max_threads=1: workers")
        check(1 <= workers["default"] <= 4, "default: %d workers, not 1 to 4" % workers["default"])
        check(workers["ten"] > 4, "-o max_threads=10: only %d workers under the load" %
              workers["ten"])

    suite.case("options: FUSE workers are at most twice the CPUs (4 to 10) unless "
               "-o max_threads=N", capped, timeout=90)
    for m in mounts.values():
        m.stop()


def kernels(suite, src):
    for k in ("scalar", "avx2", "avx512"):
        if k not in kernels_supported():
            continue
        m = Mount(suite, src, env={"TBMFS_KERNELS": k})

        def forced(m=m, k=k):
            eq(m.start(), 0, "exit code (%s)" % m.err.strip())
            eq(read_json(m.p("model.json")).get("kernels"), k, "model.json kernels")

        suite.case("kernels: TBMFS_KERNELS=%s is used" % k, forced)
        m.stop()
    m = Mount(suite, src)

    def best():
        eq(m.start(), 0, "exit code (%s)" % m.err.strip())
        eq(read_json(m.p("model.json")).get("kernels"), kernels_supported()[-1], "kernels")

    suite.case("kernels: the best level by default", best)
    m.stop()
    bad = Mount(suite, src, env={"TBMFS_KERNELS": "sse9"})

    def refused():
        rc = bad.start()
        check(rc not in (0, None), "mounted with TBMFS_KERNELS=sse9")
        check("sse9" in bad.err or "TBMFS_KERNELS" in bad.err, "unclear error %r" % bad.err)
        check(not mounted(bad.path), "mount left behind")

    suite.case("kernels: TBMFS_KERNELS=sse9 is refused", refused)
    bad.stop()


def main(suite):
    global gen
    gen = harness.load_gen()
    src = os.path.join(suite.tmp, "life.tbm")
    cont, _ = models.write_container(gen, src, models.sound_tensors(gen)[:4])
    background(suite, src, cont)
    foreground(suite, src, cont)
    options(suite, src, cont)
    kernels(suite, src)


if __name__ == "__main__":
    run("integration-lifecycle", main)
