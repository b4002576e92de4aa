#!/usr/bin/python3
"""Integration test of the message channel: an HTTP source whose server dies in the middle of a
read makes that read fail with EIO, and the line that names the URL and the byte range reaches
syslog when the daemon is in the background, stderr with -f, and the file of -o logfile in both.

The server is this script's own (run again with --serve: a Range-capable HTTP/1.1 server on
127.0.0.1 that stalls any range starting past the first MiB half-way through its body), killed
by its pid once a read stalls. The machine runs no syslog daemon: the test binds its own
datagram socket at /dev/log when there is none, and removes it when done."""

import calendar
import mmap
import os
import re
import select
import signal
import socket
import stat
import subprocess
import sys
import threading
import time

import harness
import models
from harness import Mount, check, eq, ename, mounted, run

STALL_FROM = 1 << 20  # ranges starting here or later stall: the tail and headers come first
READ_AT = 2 << 20  # the read that the server's death fails: block 2 of the source
WANT_RANGE = "bytes %d-%d" % (READ_AT, READ_AT + (1 << 20) - 1)
DEV_LOG = "/dev/log"
gen = None


def serve(path):
    """The server of --serve: prints its port, then 'stalled' each time a range stalls."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    with open(path, "rb") as f:
        data = f.read()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def do_GET(self):
            m = re.fullmatch(r"bytes=(\d*)-(\d*)", self.headers.get("Range", ""))
            if not m or not (m.group(1) or m.group(2)):
                self.send_error(400)
                return
            if m.group(1):
                first = int(m.group(1))
                last = min(int(m.group(2)) if m.group(2) else len(data) - 1, len(data) - 1)
            else:
                first, last = max(0, len(data) - int(m.group(2))), len(data) - 1
            body = data[first:last + 1]
            self.send_response(206)
            self.send_header("Content-Range", "bytes %d-%d/%d" % (first, last, len(data)))
            self.send_header("Content-Length", str(len(body)))
            self.send_header("ETag", '"messages-1"')
            self.send_header("Last-Modified", "Tue, 01 Dec 2026 00:00:00 GMT")
            self.end_headers()
            if m.group(1) and first >= STALL_FROM:
                self.wfile.write(body[:len(body) // 2])
                self.wfile.flush()
                print("stalled %d" % first, flush=True)
                time.sleep(3600)  # until the test kills the server
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    print("port %d" % server.server_address[1], flush=True)
    server.serve_forever()


class Server:
    """The --serve server as a child process, killed by its pid."""

    def __init__(self, path):
        self.proc = subprocess.Popen(["/usr/bin/python3", __file__, "--serve", path],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
        self.buf = b""
        try:
            self.port = int(self.wait_line("port ", 10).split()[1])
        except BaseException:  # SIGTERM's exit included
            self.stop()
            raise

    def wait_line(self, prefix, timeout):
        """The first line of the server's output starting with prefix, waited for."""
        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        while True:
            lines = self.buf.split(b"\n")
            for i, line in enumerate(lines[:-1]):
                if line.decode().startswith(prefix):
                    self.buf = b"\n".join(lines[i + 1:])
                    return line.decode()
            left = deadline - time.monotonic()
            check(left > 0, "the server did not say %r within %ds" % (prefix, timeout))
            if select.select([fd], [], [], left)[0]:
                chunk = os.read(fd, 4096)
                check(chunk, "the server ended before saying %r" % prefix)
                self.buf += chunk

    def url(self):
        return "http://127.0.0.1:%d/model.tbm" % self.port

    def kill(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self):
        self.kill()
        self.proc.stdout.close()


class Syslog:
    """A datagram socket at /dev/log, bound by the test (none existed), collecting what is sent
    to it; removed by stop()."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(DEV_LOG)
        self.raw = True  # lines as sent: the priority and ident can be checked
        self.lines = []
        self.lock = threading.Lock()
        self.running = True
        self.thread = threading.Thread(target=self.collect, daemon=True)
        self.thread.start()

    def collect(self):
        while self.running:
            if select.select([self.sock], [], [], 0.1)[0]:
                data = self.sock.recv(65536)
                with self.lock:
                    self.lines.append(data.decode("utf-8", "replace"))

    def matching(self, *words):
        with self.lock:
            return [line for line in self.lines if all(w in line for w in words)]

    def stop(self):
        self.running = False
        self.thread.join(5)
        self.sock.close()
        os.unlink(DEV_LOG)


class SystemSyslog:
    """The syslog daemon that owns /dev/log, read back through the journal or its files."""

    raw = False  # lines as the daemon stored them, not as sent

    def matching(self, *words):
        if os.path.exists("/usr/bin/journalctl"):
            p = subprocess.run(["journalctl", "-q", "-t", "tbmfs", "-n", "1000"],
                               capture_output=True, timeout=30)
            text = p.stdout.decode("utf-8", "replace")
        else:
            text = ""
            for name in ("/var/log/syslog", "/var/log/daemon.log", "/var/log/messages"):
                try:
                    with open(name, errors="replace") as f:
                        text += f.read()
                except OSError:
                    pass
        return [line for line in text.splitlines() if all(w in line for w in words)]

    def stop(self):
        pass


def write_model(root):
    """One dense fp32 tensor of 4 MiB at offset 0: its raw.tb is the source's first bytes."""
    path = os.path.join(root, "model.tbm")
    models.write_container(gen, path, [gen.make_tensor("big", [1024, 1024], "fp32", (0, 0), 1)])
    return path


def failed_read(suite, path, args=(), foreground=False, env=None):
    """Mounts a fresh server's URL, reads block 2 while the server stalls in its answer, kills
    the server: the read must fail with EIO. The stopped mount (its stderr read when -f) and
    the URL."""
    server = Server(path)
    m = Mount(suite, server.url(), ["-o", "http_timeout=2"] + list(args), env=env,
              foreground=foreground)
    try:
        eq(m.start(), 0 if not foreground else None, "tbmfs exit (%s)" % m.err.strip())
        check(mounted(m.path), "not mounted")
        result = []

        def reader():
            fd = os.open(m.p("tensors", "big", "raw.tb"), os.O_RDONLY | os.O_DIRECT)
            buf = mmap.mmap(-1, 4096)
            try:
                os.preadv(fd, [buf], READ_AT)
                result.append("0")
            except OSError as e:
                result.append(ename(e.errno))
            finally:
                buf.close()
                os.close(fd)

        t = threading.Thread(target=reader, daemon=True)
        t.start()
        server.wait_line("stalled %d" % READ_AT, 10)
        server.kill()
        t.join(20)
        eq(result, ["EIO"], "the read's errno once the server died")
        check(m.alive(), "the daemon died")
        if foreground:
            m.unmount()
            m.wait_exit(10)
            m.err = m.proc.stderr.read().decode("utf-8", "replace")
        return m, server.url()
    finally:
        m.stop()
        server.stop()


def in_syslog(suite, path, log):
    def go():
        m, url = failed_read(suite, path)
        deadline = time.monotonic() + 5
        while not log.matching(url, WANT_RANGE) and time.monotonic() < deadline:
            time.sleep(0.05)
        lines = log.matching(url, WANT_RANGE)
        check(lines, "no line naming %s and %s in syslog; from tbmfs: %r"
              % (url, WANT_RANGE, log.matching("tbmfs")))
        # <27>: LOG_DAEMON | LOG_ERR; the ident and the daemon's pid
        check(not log.raw or lines[0].startswith("<27>"), "not daemon.err: %r" % lines[0])
        check(("tbmfs[%d]: " % m.pid) in lines[0], "not ident tbmfs: %r" % lines[0])
        check(url not in m.err, "the line went to the mounting command's stderr: %r" % m.err)
        print("# syslog: %s" % lines[0], flush=True)

    suite.case("background: a read the server dies in is EIO, the line naming the URL and the "
               "range in syslog (daemon.err, ident tbmfs)", go)


def on_stderr(suite, path, log):
    def go():
        m, url = failed_read(suite, path, foreground=True)
        lines = [line for line in m.err.splitlines() if url in line and WANT_RANGE in line]
        check(lines, "no line naming %s and %s on stderr: %r" % (url, WANT_RANGE, m.err))
        check(lines[0].startswith("tbmfs: "), "line %r" % lines[0])
        print("# stderr: %s" % lines[0], flush=True)
        check(not log.matching(url), "in syslog too: %r" % log.matching(url))

    suite.case("foreground (-f): the line on stderr, not in syslog", go)


def stamped_lines(logfile, url):
    """The log file's lines naming url and the range, each checked for its UTC timestamp."""
    with open(logfile) as f:
        text = f.read()
    lines = [line for line in text.splitlines() if url in line and WANT_RANGE in line]
    check(lines, "no line naming %s and %s in the log file: %r" % (url, WANT_RANGE, text))
    now = time.time()
    for line in lines:
        stamp = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ) ", line)
        check(stamp, "no ISO 8601 UTC timestamp leads %r" % line)
        when = calendar.timegm(time.strptime(stamp.group(1), "%Y-%m-%dT%H:%M:%SZ"))
        # the daemon runs with TZ 9 hours from UTC: local time would be far off
        check(abs(now - when) < 600, "timestamp %s is not the time in UTC" % stamp.group(1))
    print("# log file: %s" % lines[0], flush=True)
    return text


def in_logfile(suite, path, log):
    tokyo = {"TZ": "Asia/Tokyo"}

    def background():
        logfile = os.path.join(suite.tmp, "bg.log")
        m, url = failed_read(suite, path, ["-o", "logfile=" + logfile], env=tokyo)
        eq(oct(stat.S_IMODE(os.stat(logfile).st_mode)), "0o600", "the log file's mode")
        stamped_lines(logfile, url)
        check(not log.matching(url), "in syslog too: %r" % log.matching(url))

    def foreground():
        logfile = os.path.join(suite.tmp, "fg.log")
        with open(logfile, "w") as f:
            f.write("an earlier line\n")
        m, url = failed_read(suite, path, ["-o", "logfile=" + logfile], foreground=True,
                             env=tokyo)
        text = stamped_lines(logfile, url)
        check(text.startswith("an earlier line\n"), "not appended: %r" % text[:100])
        check(url not in m.err, "on stderr too: %r" % m.err)

    suite.case("-o logfile, background: the line in the file (0600, UTC timestamp), not in "
               "syslog", background)
    suite.case("-o logfile, foreground: appended to the file, not on stderr", foreground)


def terminated(suite):
    """meson's timeout sends SIGTERM: leave, a failure, through the finally that removes
    /dev/log."""
    suite.failed += 1
    print("FAIL %s: SIGTERM" % suite.title, flush=True)
    sys.exit(1)


def main(suite):
    global gen
    gen = harness.load_gen()
    root = os.path.join(suite.tmp, "www")
    os.makedirs(root)
    path = write_model(root)
    if os.path.lexists(DEV_LOG):
        print("# %s exists: syslog read back from the journal or /var/log" % DEV_LOG, flush=True)
        log = SystemSyslog()
    else:
        log = Syslog()
        signal.signal(signal.SIGTERM, lambda *_: terminated(suite))
    try:
        in_syslog(suite, path, log)
        on_stderr(suite, path, log)
        in_logfile(suite, path, log)
    finally:
        log.stop()


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        serve(sys.argv[2])
    else:
        run("integration-messages", main)
