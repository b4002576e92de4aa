"""Harness of the integration tests: named cases under a watchdog, real FUSE mounts of tbmfs
that are always taken down, and file helpers that report errno instead of raising."""

import errno
import importlib.util
import json
import mmap
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback

TBMFS = os.environ.get("TBMFS", "")
GEN = os.environ.get("GEN") or os.path.join(os.path.dirname(__file__), "..", "..", "scripts",
                                            "gen_model.py")
CMD_TIMEOUT = 30


def load_gen():
    spec = importlib.util.spec_from_file_location("gen_model", GEN)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["gen_model"] = mod
    spec.loader.exec_module(mod)
    return mod


class Failure(Exception):
    pass


class Skip(Exception):
    pass


def _short(v, limit=200):
    r = repr(v)
    return r if len(r) <= limit else r[:limit] + "...(%d chars)" % len(r)


def check(cond, msg):
    if not cond:
        raise Failure(msg)


def eq(got, want, what):
    if got != want:
        if isinstance(got, bytes) and isinstance(want, bytes) and len(got) == len(want):
            first = next(i for i in range(len(got)) if got[i] != want[i])
            raise Failure("%s: %d bytes differ from byte %d: got %s, want %s" % (
                what, sum(a != b for a, b in zip(got, want)), first,
                _short(got[first:first + 16]), _short(want[first:first + 16])))
        if isinstance(got, (list, set)) and isinstance(want, (list, set)):
            extra = [x for x in got if x not in want]
            missing = [x for x in want if x not in got]
            if extra or missing:
                raise Failure("%s: unexpected %s, missing %s" % (what, _short(extra),
                                                                 _short(missing)))
        raise Failure("%s: got %s, want %s" % (what, _short(got), _short(want)))


def mounted(path):
    """Whether path is a mount point in /proc/mounts."""
    # bytes: a source's name need not be UTF-8, and it is the first field
    with open("/proc/mounts", "rb") as f:
        return any(line.split()[1] == os.fsencode(path) for line in f)


def read_all(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        chunks = []
        while True:
            b = os.read(fd, 1 << 20)
            if not b:
                return b"".join(chunks)
            chunks.append(b)
    finally:
        os.close(fd)


def pread(path, offset, size):
    fd = os.open(path, os.O_RDONLY)
    try:
        out = b""
        while len(out) < size:
            b = os.pread(fd, size - len(out), offset + len(out))
            if not b:
                break
            out += b
        return out
    finally:
        os.close(fd)


def direct_read(path):
    """The whole file, read with O_DIRECT in 1 MiB reads."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    try:
        buf = mmap.mmap(-1, 1 << 20)
        chunks = []
        while True:
            n = os.readv(fd, [buf])
            if n == 0:
                break
            chunks.append(buf[:n])
        return b"".join(chunks)
    finally:
        os.close(fd)


def pipes_of(pid):
    """How many pipes the process holds: libfuse gives each worker that splices one."""
    n = 0
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            n += os.readlink("/proc/%d/fd/%s" % (pid, fd)).startswith("pipe:")
        except FileNotFoundError:  # closed since the listing
            pass
    return n


def settled_pipes(pid):
    """pipes_of once fuse_daemonize's own pipe, which the daemon closes only after its parent
    has returned, is gone: up to a second."""
    deadline = time.monotonic() + 1
    while pipes_of(pid) and time.monotonic() < deadline:
        time.sleep(0.01)
    return pipes_of(pid)


def errno_of(fn, *args):
    """The errno fn(*args) fails with, 0 when it succeeds."""
    try:
        r = fn(*args)
        if isinstance(r, int) and fn is os.open:
            os.close(r)
        return 0
    except OSError as e:
        return e.errno


def ename(n):
    """The errno name of n ("EIO"), or n as text for one that has none (0)."""
    return errno.errorcode.get(n, str(n))


def expect_eio(path, what):
    eq(ename(errno_of(read_all, path)), "EIO", "%s read errno" % what)


def read_json(path):
    return json.loads(read_all(path))


def cpu_flags():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    return set()


def kernels_supported():
    """The TBMFS_KERNELS levels this CPU runs, best last."""
    flags = cpu_flags()
    out = ["scalar"]
    if {"avx2", "f16c", "fma"} <= flags:
        out.append("avx2")
        if {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= flags:
            out.append("avx512")
    return out


def run_tbmfs(args, env=None, timeout=CMD_TIMEOUT):
    """Runs tbmfs to completion; (exit code, stdout, stderr)."""
    p = subprocess.run([TBMFS] + list(args), capture_output=True, timeout=timeout,
                       env=_env(env), stdin=subprocess.DEVNULL)
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def _env(extra):
    env = dict(os.environ)
    env.pop("TBMFS_KERNELS", None)
    env.update(extra or {})
    return env


class Mount:
    """One tbmfs mount of source on a fresh mount point. start() mounts (in the background as
    the daemon does by default, or with -f under our own Popen); stop() always takes it down."""

    def __init__(self, suite, source, args=(), env=None, foreground=False):
        self.suite = suite
        self.source = source
        self.args = list(args)
        self.env = env
        self.foreground = foreground
        self.path = tempfile.mkdtemp(dir=suite.tmp, prefix="mnt-")
        self.proc = None
        self.pid = None
        self.rc = None
        self.out = self.err = ""

    def start(self):
        cmd = [TBMFS] + self.args + (["-f"] if self.foreground else []) + [self.source, self.path]
        self.suite.mounts.append(self)
        if self.foreground:
            self.proc = subprocess.Popen(cmd, env=_env(self.env), stdin=subprocess.DEVNULL,
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            self.pid = self.proc.pid
            deadline = time.monotonic() + CMD_TIMEOUT
            while not mounted(self.path) and self.proc.poll() is None:
                if time.monotonic() > deadline:
                    raise Failure("tbmfs -f did not mount within %ds" % CMD_TIMEOUT)
                time.sleep(0.02)
            if self.proc.poll() is not None:
                self.rc = self.proc.returncode
                self.out, self.err = (s.decode("utf-8", "replace") for s in self.proc.communicate())
            return self.rc
        p = subprocess.run(cmd, env=_env(self.env), capture_output=True, timeout=CMD_TIMEOUT,
                           stdin=subprocess.DEVNULL)
        self.rc = p.returncode
        self.out = p.stdout.decode("utf-8", "replace")
        self.err = p.stderr.decode("utf-8", "replace")
        # another live mount on the same point (one stacked on it) is not this one's daemon
        self.pid = self.find_daemon(skip={x.pid for x in self.suite.mounts if x is not self})
        return self.rc

    def find_daemon(self, skip=()):
        """Pid of the backgrounded daemon serving this mount point (started by this test), other
        than those in skip."""
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open("/proc/%s/cmdline" % entry, "rb") as f:
                    argv = f.read().split(b"\0")[:-1]
            except OSError:
                continue
            if (argv and os.path.basename(argv[0]) == b"tbmfs" and self.path.encode() in argv
                    and int(entry) != os.getpid() and int(entry) not in skip):
                return int(entry)
        return None

    def alive(self):
        if self.proc is not None:
            return self.proc.poll() is None
        if self.pid is None:
            return False
        try:
            with open("/proc/%d/stat" % self.pid) as f:
                return f.read().split(")")[-1].split()[0] != "Z"
        except OSError:
            return False

    def kill(self):
        if self.alive():
            os.kill(self.pid, signal.SIGKILL)

    def wait_exit(self, timeout):
        """Waits for the daemon to end; its exit code when it was our child, else None."""
        if self.proc is not None:
            try:
                return self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                return None
        deadline = time.monotonic() + timeout
        while self.alive() and time.monotonic() < deadline:
            time.sleep(0.02)
        return None

    def unmount(self):
        """fusermount3 -u; the result of that command."""
        return subprocess.run(["fusermount3", "-u", self.path], capture_output=True,
                              timeout=CMD_TIMEOUT)

    def stop(self):
        if mounted(self.path):
            self.unmount()
        if mounted(self.path):
            subprocess.run(["umount", "-l", self.path], capture_output=True, timeout=CMD_TIMEOUT)
        self.wait_exit(10)
        if self.alive():
            os.kill(self.pid, signal.SIGKILL)
            self.wait_exit(10)
        if self.proc is not None:
            for pipe in (self.proc.stdout, self.proc.stderr):
                pipe.close()
        if self in self.suite.mounts:
            self.suite.mounts.remove(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    def p(self, *parts):
        """Path inside the mount; bytes when any part is bytes."""
        if any(isinstance(x, bytes) for x in parts):
            return os.path.join(self.path.encode(), *[x if isinstance(x, bytes) else x.encode()
                                                      for x in parts])
        return os.path.join(self.path, *parts)


class Suite:
    """Runs named cases, each under a watchdog that kills the daemons of live mounts when the
    case overruns (so a hung FUSE request fails the case instead of the whole run), prints one
    line per case and finally 'N passed, N failed'."""

    def __init__(self, title):
        if not TBMFS or not os.access(TBMFS, os.X_OK):
            print("FAIL %s: TBMFS=%r is not an executable" % (title, TBMFS))
            print("0 passed, 1 failed", flush=True)
            sys.exit(1)
        self.title = title
        self.tmp = tempfile.mkdtemp(prefix="tbmfs-it-")
        self.mounts = []
        self.passed = self.failed = self.skipped = 0
        self.started = time.monotonic()

    def case(self, name, fn, timeout=30):
        expired = []

        def expire():
            expired.append(True)
            for m in list(self.mounts):
                m.kill()

        timer = threading.Timer(timeout, expire)
        timer.start()
        began = time.monotonic()
        try:
            fn()
            self.passed += 1
            took = time.monotonic() - began
            # The slow cases, named in every run: what keeps the suite's time in view.
            print("ok   %s%s" % (name, " (%.1fs)" % took if took >= 1 else ""), flush=True)
        except Skip as e:
            self.skipped += 1
            print("skip %s: %s" % (name, e), flush=True)
        except Failure as e:
            self.failed += 1
            print("FAIL %s: %s" % (name, e), flush=True)
        except Exception as e:  # an unexpected error fails only this case
            self.failed += 1
            where = traceback.extract_tb(e.__traceback__)[-1]
            print("FAIL %s: %s: %s (%s:%d)%s" % (name, type(e).__name__, _short(str(e), 300),
                                                 os.path.basename(where.filename), where.lineno,
                                                 " after the %ds watchdog" % timeout
                                                 if expired else ""), flush=True)
        finally:
            timer.cancel()

    def mount(self, source, args=(), env=None, foreground=False, name=None):
        """A started mount, with a case that checks that it mounted."""
        m = Mount(self, source, args, env, foreground)

        def go():
            rc = m.start()
            check(rc in (0, None), "tbmfs exit %s: %s" % (rc, m.err.strip()[:300]))
            check(mounted(m.path), "not in /proc/mounts")

        self.case(name or "mount %s" % os.path.basename(source), go)
        return m

    def finish(self):
        for m in list(self.mounts):
            m.stop()
        with open("/proc/mounts", errors="surrogateescape") as f:
            left = [line.split()[1] for line in f if line.split()[1].startswith(self.tmp + "/")]
        if left:
            self.failed += 1
            print("FAIL %s: still mounted, %s kept: %s" % (self.title, self.tmp, left))
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)
        line = "%d passed, %d failed" % (self.passed, self.failed)
        if self.skipped:
            line += ", %d skipped" % self.skipped
        print("# %s: %.1fs" % (self.title, time.monotonic() - self.started))
        print(line, flush=True)
        sys.exit(1 if self.failed else 0)


def run(title, main):
    """Runs main(suite); an error outside the cases counts as one failure; mounts always go."""
    suite = Suite(title)
    try:
        main(suite)
    except Exception:
        traceback.print_exc()
        print("FAIL %s: aborted outside a case" % title, flush=True)
        suite.failed += 1
    finally:
        suite.finish()
