"""A private S3 store for the S3 tests and benchmark: s3server.js (s3rver, checking SigV4, with
unsigned requests refused as by a private bucket) on 127.0.0.1, started and stopped by the
caller, and boto3 clients that upload to it and make presigned URLs."""

import json
import os
import shutil
import subprocess
import tempfile

NODE = shutil.which("node") or "/usr/bin/node"
S3RVER = os.environ.get("TBMFS_S3RVER", "/opt/tbmfs-test/s3rver")
WRAPPER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "s3server.js")


def missing():
    """Why the store cannot run here, or None."""
    if not os.access(NODE, os.X_OK):
        return "node is not installed"
    if not os.path.isdir(os.path.join(S3RVER, "node_modules", "@20minutes", "s3rver")):
        return "s3rver is not installed in %s (scripts/install-deps.sh)" % S3RVER
    try:
        import boto3  # noqa: F401
    except ImportError:
        return "python3-boto3 is not installed"
    return None


class S3Server:
    """The store, its data under tmp; key pairs accepted only once given with key()."""

    def __init__(self, tmp):
        self.dir = tempfile.mkdtemp(dir=tmp, prefix="s3-")
        self.proc = None
        self.port = None

    def start(self):
        self.proc = subprocess.Popen([NODE, WRAPPER, self.dir], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     env=dict(os.environ, TBMFS_S3RVER=S3RVER), text=True)
        line = self.proc.stdout.readline()
        if not line.startswith("port "):
            self.stop()
            raise RuntimeError("s3server.js did not start: %r" % line)
        self.port = int(line.split()[1])
        return self

    @property
    def endpoint(self):
        return "http://127.0.0.1:%d" % self.port

    def _command(self, cmd):
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        return self.proc.stdout.readline().strip()

    def key(self, key_id, secret, token=None):
        """Accepts the key pair (with token, only when the token is signed in)."""
        self._command({"key": key_id, "secret": secret, "token": token})

    def revoke(self, key_id):
        self._command({"revoke": key_id})

    def requests(self):
        """Requests served so far."""
        return int(self._command({"count": True}))

    def client(self, key_id, secret, token=None, region="us-east-1"):
        import boto3
        from botocore.config import Config
        return boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=key_id,
                            aws_secret_access_key=secret, aws_session_token=token,
                            region_name=region,
                            config=Config(signature_version="s3v4",
                                          s3={"addressing_style": "path"}))

    def stop(self):
        if self.proc is None:
            return
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.proc.stdout.close()
        self.proc = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
        return False
