"""Web servers for the HTTP tests and benchmark, on loopback only: a private nginx (its own
configuration and prefix under a temp dir, never the system service, stopped by its pid) and a
fault-injecting proxy in front of it."""

import http.client
import os
import signal
import socket
import struct
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

NGINX = "/usr/sbin/nginx"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_ca_cert(prefix):
    """A certificate authority (ca.pem) and a certificate for 127.0.0.1 it signed (cert.pem,
    key.pem), in prefix."""
    def openssl(*args):
        subprocess.run(["openssl"] + list(args), check=True, capture_output=True, timeout=60)

    p = prefix + "/"
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
            "/CN=tbmfs test CA", "-keyout", p + "ca.key", "-out", p + "ca.pem")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1", "-keyout",
            p + "key.pem", "-out", p + "cert.csr")
    with open(p + "ext.cnf", "w") as f:
        f.write("subjectAltName=IP:127.0.0.1\n")
    openssl("x509", "-req", "-in", p + "cert.csr", "-CA", p + "ca.pem", "-CAkey", p + "ca.key",
            "-CAcreateserial", "-days", "2", "-extfile", p + "ext.cnf", "-out", p + "cert.pem")


class Hostile:
    """A file server on 127.0.0.1 that answers Range requests over data as a web server does,
    and what a hostile one may do besides: etag, when set, gives each answer's ETag (a str of any
    code points below 256, sent as those bytes); trickle makes the bodies of ranges that start
    before trickle_before come a byte every trickle seconds; /jump/NAME redirects to jump_to +
    NAME; fail, when set, is the status every request gets (a server down for a while). seen
    keeps every request's path and headers."""

    def __init__(self, data):
        self.data = data
        self.etag = None
        self.trickle = None
        self.trickle_before = 0
        self.jump_to = None
        self.fail = None
        self.seen = []
        self.done = threading.Event()  # trickles end when set
        self.server = None

    def start(self):
        host = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                host.seen.append((self.path, dict(self.headers.items())))
                if host.fail:
                    self.send_response(host.fail)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if self.path.startswith("/jump/") and host.jump_to:
                    self.send_response(302)
                    self.send_header("Location", host.jump_to + self.path[len("/jump/"):])
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                size = len(host.data)
                rng = (self.headers.get("Range") or "").replace("bytes=", "")
                first, _, last = rng.partition("-")
                if not rng:
                    a, b = 0, size - 1
                elif first == "":
                    a, b = max(0, size - int(last)), size - 1
                else:
                    a, b = int(first), min(size - 1, int(last) if last else size - 1)
                body = host.data[a:b + 1]
                self.send_response(206 if rng else 200)
                if rng:
                    self.send_header("Content-Range", "bytes %d-%d/%d" % (a, b, size))
                if host.etag is not None:
                    self.send_header("ETag", host.etag)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                try:
                    if host.trickle and a < host.trickle_before:
                        for i in range(len(body)):
                            if host.done.wait(host.trickle):
                                # the body cut short: the client sees it at once
                                self.close_connection = True
                                return
                            self.wfile.write(body[i:i + 1])
                            self.wfile.flush()
                    else:
                        self.wfile.write(body)
                except OSError:
                    self.close_connection = True

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def url(self, name):
        return "http://127.0.0.1:%d/%s" % (self.port, name)

    def stop(self):
        self.done.set()
        if self.server:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
        return False


class Nginx:
    """nginx serving root on 127.0.0.1; every request is a line of access.log."""

    def __init__(self, prefix, root, workers=2, tls=False, ca=False, autoindex=False):
        self.prefix = prefix
        self.autoindex = autoindex  # directory listings, which rclone's http backend reads
        self.root = root
        self.workers = workers
        self.tls = tls or ca  # also serve https on tls_port, with a self-signed certificate
        self.ca = ca  # or one signed by a CA of our own, whose certificate is ca_file
        self.ca_file = os.path.join(prefix, "ca.pem") if ca else None
        self.tls_port = None
        self.port = None
        self.proc = None
        self.log = os.path.join(prefix, "access.log")

    def conf(self):
        p = self.prefix
        temps = "\n".join("  %s_temp_path %s/tmp-%s;" % (k, p, k)
                          for k in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
        return """daemon off;
user root;
worker_processes %d;
pid %s/nginx.pid;
error_log %s/error.log warn;
events { worker_connections 512; }
http {
  log_format ranges '$request_method $uri "$http_range" $status $body_bytes_sent "$http_x_tbm_test"';
  access_log %s ranges;
%s
  default_type application/octet-stream;
  sendfile on;
  tcp_nopush on;
  keepalive_requests 1000000;
  keepalive_timeout 120s;
  server {
    listen 127.0.0.1:%d;
    root %s;
    %s
    location /moved/ { rewrite ^/moved/(.*)$ /$1 redirect; }
    # a slow server: a 1 MiB range takes a second (nginx sends the first 512 KiB at once)
    location /slow/ { alias %s/; limit_rate 512k; }
  }
%s
}
""" % (self.workers, p, p, self.log, temps, self.port, self.root,
       "autoindex on;" if self.autoindex else "", self.root, self.tls_server())

    def tls_server(self):
        if not self.tls:
            return ""
        return """  server {
    listen 127.0.0.1:%d ssl;
    ssl_certificate %s/cert.pem;
    ssl_certificate_key %s/key.pem;
    root %s;
  }""" % (self.tls_port, self.prefix, self.prefix, self.root)

    def start(self):
        os.makedirs(self.prefix, exist_ok=True)
        if self.ca:
            make_ca_cert(self.prefix)
        elif self.tls:
            subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days",
                            "2", "-subj", "/CN=127.0.0.1", "-keyout", self.prefix + "/key.pem",
                            "-out", self.prefix + "/cert.pem"], check=True, capture_output=True,
                           timeout=60)
        last = ""
        for _ in range(5):  # a port found free may be taken before nginx binds it
            self.port = free_port()
            self.tls_port = free_port() if self.tls else None
            conf = os.path.join(self.prefix, "nginx.conf")
            with open(conf, "w") as f:
                f.write(self.conf())
            self.proc = subprocess.Popen([NGINX, "-p", self.prefix, "-c", conf],
                                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.PIPE)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and self.proc.poll() is None:
                try:
                    socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                    return self
                except OSError:
                    time.sleep(0.05)
            last = self.proc.stderr.read().decode() if self.proc.poll() is not None else ""
            self.stop()
        raise RuntimeError("nginx did not start: %s" % last.strip())

    def url(self, name):
        return "http://127.0.0.1:%d/%s" % (self.port, name)

    def tls_url(self, name):
        return "https://127.0.0.1:%d/%s" % (self.tls_port, name)

    def requests(self):
        """The access log's lines so far."""
        try:
            with open(self.log) as f:
                return f.read().splitlines()
        except OSError:
            return []

    def stop(self):
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT)  # graceful: workers finish and go
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc.stderr.close()
        self.proc = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
        return False


class Proxy:
    """An HTTP/1.1 proxy on 127.0.0.1 in front of an upstream port. faults is a list of
    (kind, arg) applied one per request, in order, to requests that carry a Range header and
    match the predicate `when` (default: all); kinds: 'reset' (connection reset mid-body),
    'stall' (arg seconds of silence mid-body), 'status' (answer arg, e.g. 503), 'short' (a
    body shorter than its Content-Range), 'norange' (forward without Range: 200, whole
    file). A fault kind of 'always:' + kind applies to every matching request."""

    def __init__(self, upstream_port):
        self.upstream = upstream_port
        self.faults = []
        self.always = None
        self.when = None
        self.served = []  # (range header, what was done)
        self.lock = threading.Lock()
        self.server = None
        self.thread = None

    def set(self, faults=(), always=None, when=None):
        with self.lock:
            self.faults = list(faults)
            self.always = always
            self.when = when

    def _take(self, rng):
        with self.lock:
            if not rng or (self.when and not self.when(rng)):
                return None
            if self.faults:
                return self.faults.pop(0)
            return self.always

    def start(self):
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                rng = self.headers.get("Range")
                fault = proxy._take(rng)
                with proxy.lock:
                    proxy.served.append((rng, fault[0] if fault else "pass"))
                if fault and fault[0] == "status":
                    body = b"fault\n"
                    self.send_response(fault[1])
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                headers = {k: v for k, v in self.headers.items()
                           if k.lower() not in ("host", "connection")}
                if fault and fault[0] == "norange":
                    headers.pop("Range", None)
                conn = http.client.HTTPConnection("127.0.0.1", proxy.upstream, timeout=60)
                try:
                    conn.request("GET", self.path, headers=headers)
                    up = conn.getresponse()
                    body = up.read()
                finally:
                    conn.close()
                self.send_response(up.status)
                for k, v in up.getheaders():
                    if k.lower() in ("connection", "keep-alive", "transfer-encoding",
                                     "content-length"):
                        continue
                    self.send_header(k, v)
                kind = fault[0] if fault else None
                send = body
                if kind in ("reset", "stall", "short"):
                    send = body[:max(1, len(body) // 2)]
                self.send_header("Content-Length",
                                 str(len(send) if kind == "short" else len(body)))
                self.end_headers()
                self.wfile.write(send)
                self.wfile.flush()
                if kind == "stall":
                    time.sleep(fault[1])
                    self.close_connection = True
                elif kind == "reset":
                    # SO_LINGER 0: close() sends RST, the reset a crashed server gives
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                               struct.pack("ii", 1, 0))
                    self.close_connection = True

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        return self

    def url(self, name):
        return "http://127.0.0.1:%d/%s" % (self.port, name)

    def stop(self):
        if self.server:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
        return False
