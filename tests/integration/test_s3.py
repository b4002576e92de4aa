#!/usr/bin/python3
"""Integration test of s3:// sources against a signing S3 store of the test's own (s3rver,
which checks SigV4 and refuses unsigned requests as a private bucket does): every view's bytes as
for the local file, the endpoint and credentials found where the rules say, session tokens, odd
keys, refusals at mount (wrong secret, none, a missing key), credentials that rotate under the
mount (read again after a refusal, and on SIGHUP), an object replaced under the mount, and no
secret in any message, file of the tree or the command line."""

import errno
import os
import signal
import subprocess
import time

import harness
import s3serve
from harness import Mount, Skip, check, eq, mounted, read_all, run_tbmfs

BUCKET = "models"
KEY = "team/llama v1/\u00e9t\u00e9 model+1.tbm"  # a space, UTF-8, '+' and nested '/'
SECRETS = ["SECRETsecret0001", "SECRETsecret0002", "SECRETsecret0003", "TOKENtoken0001"]


def env_of(extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.pop("TBMFS_KERNELS", None)
    env.update(extra)
    return env


def start(suite, source, env, args=()):
    """A foreground mount (its messages on our pipe), or the failure."""
    m = Mount(suite, source, ["-o", "http_timeout=5"] + list(args), None, foreground=True)
    cmd = [harness.TBMFS] + m.args + ["-f", source, m.path]
    suite.mounts.append(m)
    m.proc = subprocess.Popen(cmd, env=env_of(env), stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    m.pid = m.proc.pid
    deadline = time.monotonic() + harness.CMD_TIMEOUT
    while not mounted(m.path) and m.proc.poll() is None:
        check(time.monotonic() < deadline, "tbmfs -f did not mount")
        time.sleep(0.02)
    if m.proc.poll() is not None:
        raise harness.Failure("tbmfs exited %s: %s" % (
            m.proc.returncode, m.proc.stderr.read().decode("utf-8", "replace")[:300]))
    return m


def finish(m):
    """Unmounts m; its stderr."""
    m.unmount()
    m.wait_exit(20)
    err = m.proc.stderr.read().decode("utf-8", "replace")
    m.stop()
    return err


def tensor_dirs(m):
    return sorted(os.listdir(m.p("tensors")))


def errno_name(path):
    try:
        read_all(path)
        return "0"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))


def no_secret(where, text):
    for s in SECRETS:
        check(s not in text, "a secret in %s" % where)


class Store:
    """The store with the model uploaded, and the local copy to compare with."""

    def __init__(self, suite, server, model):
        self.suite = suite
        self.server = server
        self.model = model
        server.key("AKADMIN", "adminsecret")
        self.admin = server.client("AKADMIN", "adminsecret")
        self.admin.create_bucket(Bucket=BUCKET)
        self.admin.upload_file(model, BUCKET, KEY)
        self.url = "s3://%s/%s" % (BUCKET, KEY)

    def creds(self, key_id, secret, token=None):
        env = {"AWS_ENDPOINT_URL": self.server.endpoint, "AWS_ACCESS_KEY_ID": key_id,
               "AWS_SECRET_ACCESS_KEY": secret, "HOME": self.suite.tmp}
        if token:
            env["AWS_SESSION_TOKEN"] = token
        return env


def same_tree(m, local):
    """Every tensor's raw.tb and dense.f32 and the index as the local mount has them."""
    eq(read_all(m.p("index.json")), read_all(local.p("index.json")), "index.json")
    eq(tensor_dirs(m), tensor_dirs(local), "tensor directories")
    for d in tensor_dirs(local):
        for f in ("raw.tb", "dense.f32"):
            eq(read_all(m.p("tensors", d, f)), read_all(local.p("tensors", d, f)), d + "/" + f)


def signed_reads(suite, store, local):
    env = store.creds("AKREAD", SECRETS[0])
    store.server.key("AKREAD", SECRETS[0])

    def go():
        m = start(suite, store.url, env)
        try:
            same_tree(m, local)
            eq(harness.read_json(m.p("model.json"))["source"], store.url, "model.json's source")
        finally:
            err = finish(m)
        no_secret("stderr", err)

    suite.case("s3: every tensor's bytes, key with spaces, UTF-8 and '/'", go, 120)

    def check_ok():
        rc, out, err = run_tbmfs(["--check", store.url], env=env_of(env))
        eq(rc, 0, "--check exit (%s)" % err.strip()[:200])

    suite.case("s3: --check with the environment's credentials", check_ok, 60)


def endpoints(suite, store):
    store.server.key("AKREAD", SECRETS[0])
    base = store.creds("AKREAD", SECRETS[0])
    dead = "http://127.0.0.1:9"

    def option_wins():
        env = dict(base, AWS_ENDPOINT_URL_S3=dead, AWS_ENDPOINT_URL=dead)
        rc, out, err = run_tbmfs(["--check", "-o", "s3_endpoint=" + store.server.endpoint + "/",
                                  "-o", "s3_region=eu-west-3", store.url], env=env_of(env))
        eq(rc, 0, "--check exit with -o s3_endpoint (%s)" % err.strip()[:200])

    def s3_variable_first():
        env = dict(base, AWS_ENDPOINT_URL_S3=store.server.endpoint, AWS_ENDPOINT_URL=dead,
                   AWS_REGION="ap-south-1")
        rc, out, err = run_tbmfs(["--check", store.url], env=env_of(env))
        eq(rc, 0, "--check exit with AWS_ENDPOINT_URL_S3 (%s)" % err.strip()[:200])

    def general_variable():
        env = dict(base, AWS_DEFAULT_REGION="us-west-2")
        rc, out, err = run_tbmfs(["--check", store.url], env=env_of(env))
        eq(rc, 0, "--check exit with AWS_ENDPOINT_URL (%s)" % err.strip()[:200])

    def dead_endpoint():
        env = dict(base, AWS_ENDPOINT_URL=dead)
        rc, out, err = run_tbmfs(["--check", "-o", "http_timeout=2", store.url],
                                 env=env_of(env))
        eq(rc, 2, "--check exit against a dead endpoint")
        check(store.url in err, "the line does not name the URL: %r" % err)

    def bad_urls():
        for url in ("s3://models", "s3://models/", "s3://bad bucket/x.tbm"):
            rc, out, err = run_tbmfs(["--check", url], env=env_of(base))
            eq(rc, 2, "--check exit of %s" % url)
            eq(len(err.strip().splitlines()), 1, "lines for %s" % url)

    suite.case("s3: -o s3_endpoint and s3_region before the environment", option_wins, 60)
    suite.case("s3: AWS_ENDPOINT_URL_S3 before AWS_ENDPOINT_URL", s3_variable_first, 60)
    suite.case("s3: AWS_ENDPOINT_URL and AWS_DEFAULT_REGION", general_variable, 60)
    suite.case("s3: a dead endpoint is one line, exit 2", dead_endpoint, 60)
    suite.case("s3: URLs that name no object", bad_urls, 60)


def write_credentials(path, profiles):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".new"
    with open(tmp, "w") as f:
        for name, (key_id, secret, token) in profiles.items():
            f.write("[%s]\naws_access_key_id = %s\naws_secret_access_key=%s\n" % (
                name, key_id, secret))
            if token:
                f.write("aws_session_token = %s\n" % token)
            f.write("\n")
    os.replace(tmp, path)


def credential_files(suite, store):
    server = store.server
    server.key("AKREAD", SECRETS[0])
    home = os.path.join(suite.tmp, "home")
    shared = os.path.join(home, ".aws", "credentials")
    endpoint = {"AWS_ENDPOINT_URL": server.endpoint}

    def home_default():
        write_credentials(shared, {"default": ("AKREAD", SECRETS[0], None),
                                   "other": ("AKNONE", "wrong", None)})
        rc, out, err = run_tbmfs(["--check", store.url], env=env_of(dict(endpoint, HOME=home)))
        eq(rc, 0, "--check exit with ~/.aws/credentials (%s)" % err.strip()[:200])

    def profile():
        write_credentials(shared, {"default": ("AKNONE", "wrong", None),
                                   "reader": ("AKREAD", SECRETS[0], None)})
        env = dict(endpoint, HOME=home)
        rc, out, err = run_tbmfs(["--check", store.url], env=env_of(env))
        eq(rc, 2, "--check exit with the wrong default profile")
        rc, out, err = run_tbmfs(["--check", store.url],
                                 env=env_of(dict(env, AWS_PROFILE="reader")))
        eq(rc, 0, "--check exit with AWS_PROFILE=reader (%s)" % err.strip()[:200])

    def named_file():
        path = os.path.join(suite.tmp, "elsewhere.ini")
        write_credentials(path, {"default": ("AKREAD", SECRETS[0], None)})
        env = dict(endpoint, HOME="/nonexistent", AWS_SHARED_CREDENTIALS_FILE=path)
        rc, out, err = run_tbmfs(["--check", store.url], env=env_of(env))
        eq(rc, 0, "--check exit with AWS_SHARED_CREDENTIALS_FILE (%s)" % err.strip()[:200])

    def environment_first():
        write_credentials(shared, {"default": ("AKNONE", "wrong", None)})
        env = dict(store.creds("AKREAD", SECRETS[0]), HOME=home)
        rc, out, err = run_tbmfs(["--check", store.url], env=env_of(env))
        eq(rc, 0, "--check exit: the environment before the file (%s)" % err.strip()[:200])

    suite.case("s3: the default profile of ~/.aws/credentials", home_default, 60)
    suite.case("s3: AWS_PROFILE picks the profile", profile, 60)
    suite.case("s3: AWS_SHARED_CREDENTIALS_FILE", named_file, 60)
    suite.case("s3: the environment before the file", environment_first, 60)


def refusals(suite, store):
    server = store.server
    server.key("AKREAD", SECRETS[0])
    server.key("AKTOKEN", SECRETS[1], SECRETS[3])

    def refused(env, status, code, what):
        mnt = os.path.join(suite.tmp, "refused")
        os.makedirs(mnt, exist_ok=True)
        rc, out, err = run_tbmfs(["-o", "http_timeout=5", store.url, mnt], env=env_of(env))
        try:
            eq(rc, 1, "mount exit, %s (%s)" % (what, err.strip()[:200]))
            check(not mounted(mnt), "mounted anyway")
        finally:
            if mounted(mnt):
                subprocess.run(["fusermount3", "-u", mnt], timeout=30)
        lines = err.strip().splitlines()
        eq(len(lines), 1, "lines of the refusal, %s: %r" % (what, err))
        for part in (store.url, str(status), code):
            check(part in lines[0], "%s: %r lacks %r" % (what, lines[0], part))
        no_secret("the refusal", err)
        rc, out, err = run_tbmfs(["--check", store.url], env=env_of(env))
        eq(rc, 2, "--check exit, %s" % what)

    suite.case("s3: a wrong secret: 403 SignatureDoesNotMatch",
               lambda: refused(store.creds("AKREAD", SECRETS[2]), 403, "SignatureDoesNotMatch",
                               "wrong secret"), 60)
    suite.case("s3: no credentials: 403 AccessDenied",
               lambda: refused(env_of({"AWS_ENDPOINT_URL": server.endpoint,
                                       "HOME": "/nonexistent"}), 403, "AccessDenied",
                               "no credentials"), 60)
    def missing_key():
        env = store.creds("AKREAD", SECRETS[0])
        rc, out, err = run_tbmfs(["--check", "s3://%s/nothing/here.tbm" % BUCKET],
                                 env=env_of(env))
        eq(rc, 2, "--check exit of a missing key")
        check("404" in err and "NoSuchKey" in err, "the line: %r" % err)

    suite.case("s3: a missing key: 404 NoSuchKey, exit 2", missing_key, 60)

    def session_token():
        rc, out, err = run_tbmfs(["--check", store.url],
                                 env=env_of(store.creds("AKTOKEN", SECRETS[1], SECRETS[3])))
        eq(rc, 0, "--check exit with the session token (%s)" % err.strip()[:200])

    suite.case("s3: a session token is sent and signed", session_token, 60)
    suite.case("s3: a key that needs a token, without it: 400 InvalidToken",
               lambda: refused(store.creds("AKTOKEN", SECRETS[1]), 400, "InvalidToken",
                               "no token"), 60)


def rotation(suite, store, local):
    server = store.server
    home = os.path.join(suite.tmp, "rotating")
    shared = os.path.join(home, ".aws", "credentials")
    env = {"AWS_ENDPOINT_URL": server.endpoint, "HOME": home}
    names = tensor_dirs(local)

    def go():
        server.key("AKROT1", SECRETS[0])
        write_credentials(shared, {"default": ("AKROT1", SECRETS[0], None)})
        # no read-ahead: a whole read of one tensor would fetch the next ones' bytes with
        # the key of then, and this case reads each tensor with the key of its own time
        m = start(suite, store.url, env, ["-o", "readahead=0"])
        err = ""
        try:
            want = {d: read_all(local.p("tensors", d, "raw.tb")) for d in names[:5]}
            eq(read_all(m.p("tensors", names[0], "raw.tb")), want[names[0]], "first tensor")
            # the store switches to a new key; the file is still the old one
            server.key("AKROT2", SECRETS[1])
            server.revoke("AKROT1")
            time.sleep(1.1)
            eq(errno_name(m.p("tensors", names[1], "raw.tb")), "EACCES",
               "a read with stale credentials")
            check(m.alive(), "the daemon died")
            # the file is rewritten: a tensor never read reads
            time.sleep(1.1)
            write_credentials(shared, {"default": ("AKROT2", SECRETS[1], None)})
            eq(read_all(m.p("tensors", names[2], "raw.tb")), want[names[2]],
               "a tensor never read, after the file was rewritten")
            eq(read_all(m.p("tensors", names[1], "raw.tb")), want[names[1]],
               "the tensor refused before")
            # rotated again; a refusal reads the file (still stale) and the next second reads
            # it no more: SIGHUP does at once
            server.key("AKROT3", SECRETS[2])
            server.revoke("AKROT2")
            time.sleep(1.1)
            eq(errno_name(m.p("tensors", names[3], "raw.tb")), "EACCES", "refused again")
            write_credentials(shared, {"default": ("AKROT3", SECRETS[2], None)})
            eq(errno_name(m.p("tensors", names[3], "raw.tb")), "EACCES",
               "read again within the second")
            os.kill(m.pid, signal.SIGHUP)
            time.sleep(0.2)
            check(m.alive(), "SIGHUP ended the daemon")
            eq(read_all(m.p("tensors", names[3], "raw.tb")), want[names[3]], "after SIGHUP")
            eq(read_all(m.p("tensors", names[4], "raw.tb")), want[names[4]],
               "another after SIGHUP")
            texts = [read_all(m.p(f)).decode() for f in ("model.json", "tensors.json")]
            texts += [read_all(m.p("tensors", d, "header.json")).decode() for d in names]
            with open("/proc/%d/cmdline" % m.pid, "rb") as f:
                texts.append(f.read().decode("utf-8", "replace"))
            with open("/proc/mounts") as f:
                texts.append(f.read())
            for t in texts:
                no_secret("a file of the tree, the command line or /proc/mounts", t)
        finally:
            err = finish(m)
        no_secret("stderr", err)
        denied = [line for line in err.splitlines() if "access denied by" in line]
        check(denied, "no 'access denied' line: %r" % err[-500:])
        check(all(store.url + " (403): InvalidAccessKeyId" in line for line in denied),
              "the lines: %r" % denied)

    suite.case("s3: credentials that rotate: EACCES, the file read again, SIGHUP", go, 120)


def replaced(suite, store, local):
    def go():
        store.server.key("AKREAD", SECRETS[0])
        env = store.creds("AKREAD", SECRETS[0])
        key = "replaced/model.tbm"
        store.admin.upload_file(store.model, BUCKET, key)
        url = "s3://%s/%s" % (BUCKET, key)
        m = start(suite, url, env)
        try:
            names = tensor_dirs(m)
            eq(read_all(m.p("tensors", names[0], "raw.tb")),
               read_all(local.p("tensors", names[0], "raw.tb")), "before the change")
            with open(store.model, "rb") as f:
                data = bytearray(f.read())
            data[100] ^= 0xFF
            store.admin.put_object(Bucket=BUCKET, Key=key, Body=bytes(data))
            # the largest other tensor: far from the tail that came with the first answer
            big = max(names[1:], key=lambda d: os.stat(m.p("tensors", d, "raw.tb")).st_size)
            eq(errno_name(m.p("tensors", big, "raw.tb")), "EIO", "after the change")
        finally:
            finish(m)

    suite.case("s3: an object replaced under the mount: EIO", go, 60)


def main(suite):
    why = s3serve.missing()
    if why:
        suite.case("s3", lambda: (_ for _ in ()).throw(Skip(why)))
        return
    model = os.path.join(suite.tmp, "model.tbm")
    subprocess.run(["/usr/bin/python3", harness.GEN, "llama", model], check=True, timeout=120)
    local = suite.mount(model, name="s3: the local model to compare with")
    with s3serve.S3Server(suite.tmp) as server:
        store = Store(suite, server, model)
        signed_reads(suite, store, local)
        endpoints(suite, store)
        credential_files(suite, store)
        refusals(suite, store)
        rotation(suite, store, local)
        replaced(suite, store, local)
        for m in list(suite.mounts):
            m.stop()


if __name__ == "__main__":
    harness.run("integration-s3", main)
