#!/usr/bin/python3
"""Integration test of the files tbmfs reads by name: the credentials file, -o
http_header_file, -o ca_file, AWS_CA_BUNDLE and -o logfile. A FIFO, /dev/zero behind a symlink
and a directory in the place of each make the mount and --check answer at once with one line
naming it; -o logfile takes only a regular file the user owns, never through a symlink, created
0600; a header file others may read is warned of; SIGHUP with a FIFO for the credentials file
keeps the mount serving, and SIGTERM then ends it."""

import os
import signal
import subprocess
import tempfile
import time

import harness
import httpserve
import s3serve
from harness import Skip, check, eq, mounted, read_all
from test_s3 import finish, start

# An answer "at once": the daemon never waits for a writer or reads without end.
AT_ONCE = 5


def bad_files(suite):
    """A FIFO, a symlink to /dev/zero and a directory: (what, path, the reason said)."""
    d = tempfile.mkdtemp(dir=suite.tmp, prefix="bad-")
    fifo, zero, sub = (os.path.join(d, n) for n in ("fifo", "zero", "dir"))
    os.mkfifo(fifo, 0o600)
    os.symlink("/dev/zero", zero)
    os.mkdir(sub)
    return [("a FIFO", fifo, "is a FIFO, not a regular file"),
            ("/dev/zero behind a symlink", zero, "is a character device, not a regular file"),
            ("a directory", sub, "is a directory, not a regular file")]


def answer(args, env, mnt=None):
    """tbmfs run with args (then the mount point, when given) under a timeout: (exit code,
    stderr, seconds); exit code None when it did not end within AT_ONCE * 2 s."""
    cmd = [harness.TBMFS] + args + ([mnt] if mnt else [])
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, capture_output=True, timeout=AT_ONCE * 2, stdin=subprocess.DEVNULL,
                           env=env)
    except subprocess.TimeoutExpired as e:
        return None, (e.stderr or b"").decode("utf-8", "replace"), time.monotonic() - t0
    return p.returncode, p.stderr.decode("utf-8", "replace"), time.monotonic() - t0


def env_of(extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.pop("TBMFS_KERNELS", None)
    env.update(extra)
    return env


def refused_at_once(suite, what, args, env, path, reason):
    """Mount and --check with args (env): each ends within AT_ONCE s, with one line that says
    path and reason, and nothing mounted."""
    mnt = tempfile.mkdtemp(dir=suite.tmp, prefix="mnt-")
    try:
        for how, cmd, m in (("mount", ["-f"] + args, mnt), ("--check", ["--check"] + args, None)):
            rc, err, secs = answer(cmd, env, m)
            check(rc is not None, "%s, %s: no answer within %d s" % (what, how, AT_ONCE * 2))
            check(rc != 0, "%s, %s: exit 0" % (what, how))
            check(secs < AT_ONCE, "%s, %s: %.1f s to answer" % (what, how, secs))
            lines = err.strip().splitlines()
            eq(len(lines), 1, "%s, %s: lines said (%r)" % (what, how, err[-300:]))
            check(path in lines[0] and reason in lines[0],
                  "%s, %s: the line %r does not say %s: %s" % (what, how, lines[0], path, reason))
            check(not mounted(mnt), "%s, %s: mounted" % (what, how))
    finally:
        if mounted(mnt):
            subprocess.run(["umount", "-l", mnt], capture_output=True, timeout=30)
        os.rmdir(mnt)


def file_options(suite, model_bytes):
    bad = bad_files(suite)
    log_reasons = {"a FIFO": "not a regular file", "/dev/zero behind a symlink": "symbolic link",
                   "a directory": "is a directory, not a regular file"}

    def go():
        with httpserve.Hostile(model_bytes) as server:
            url = server.url("m.tbm")
            s3 = {"AWS_ENDPOINT_URL": "http://127.0.0.1:%d" % server.port, "HOME": suite.tmp}
            for what, path, reason in bad:
                for option in ("http_header_file", "ca_file"):
                    refused_at_once(suite, "-o %s=%s" % (option, what),
                                    ["-o", "%s=%s" % (option, path), url], env_of({}), path, reason)
                refused_at_once(suite, "-o logfile=%s" % what,
                                ["-o", "logfile=" + path, url], env_of({}), path,
                                log_reasons[what])
                refused_at_once(suite, "AWS_SHARED_CREDENTIALS_FILE=%s" % what,
                                ["s3://models/m.tbm"],
                                env_of(dict(s3, AWS_SHARED_CREDENTIALS_FILE=path)), path, reason)
                refused_at_once(suite, "AWS_CA_BUNDLE=%s" % what, ["s3://models/m.tbm"],
                                env_of(dict(s3, AWS_CA_BUNDLE=path, AWS_ACCESS_KEY_ID="AK",
                                            AWS_SECRET_ACCESS_KEY="SK")), path, reason)

    suite.case("a FIFO, /dev/zero and a directory for every file option: one line at once", go,
               180)


def logfile(suite, model_path):
    d = tempfile.mkdtemp(dir=suite.tmp, prefix="log-")

    def go():
        mnt = tempfile.mkdtemp(dir=suite.tmp, prefix="mnt-")
        # a symlink to a file the user could write is refused all the same: it is a symlink
        target = os.path.join(d, "target")
        with open(target, "w"):
            pass
        link = os.path.join(d, "link")
        os.symlink(target, link)
        rc, err, _ = answer(["-o", "logfile=" + link, "--check", model_path], env_of({}))
        eq(rc, 2, "--check exit with a symlink for logfile (%r)" % err[-200:])
        check("symbolic link" in err and link in err, "the reason: %r" % err[-200:])
        eq(os.path.getsize(target), 0, "bytes written through the symlink")
        # a file another user owns
        other = os.path.join(d, "other")
        with open(other, "w"):
            pass
        os.chown(other, 65534, 65534)
        rc, err, _ = answer(["-o", "logfile=" + other, "--check", model_path], env_of({}))
        eq(rc, 2, "--check exit with another user's file for logfile (%r)" % err[-200:])
        check("owned by uid 65534" in err, "the reason: %r" % err[-200:])
        eq(os.path.getsize(other), 0, "bytes written to another user's file")
        # created 0600 whatever the umask, and appended to
        new = os.path.join(d, "new.log")
        old = os.umask(0)
        try:
            rc, err, _ = answer(["-o", "logfile=" + new, "--check", model_path], env_of({}))
        finally:
            os.umask(old)
        eq(rc, 0, "--check exit with a new log file (%r)" % err[-200:])
        eq(oct(os.stat(new).st_mode & 0o777), oct(0o600), "the new log file's mode")
        os.rmdir(mnt)

    suite.case("-o logfile: no symlink, no file of another user, created 0600", go, 60)


def header_mode(suite, model_bytes):
    def go():
        with httpserve.Hostile(model_bytes) as server:
            for mode, warned in ((0o600, None), (0o640, "its group"), (0o644, "every user")):
                path = os.path.join(suite.tmp, "headers-%o" % mode)
                with open(path, "w") as f:
                    f.write("X-Api-Key: k\n")
                os.chmod(path, mode)
                rc, err, _ = answer(["-o", "http_header_file=" + path, "--check",
                                     server.url("m.tbm")], env_of({}))
                eq(rc, 0, "--check with a header file of mode %o (%r)" % (mode, err[-200:]))
                lines = [line for line in err.splitlines() if "readable by" in line]
                if warned is None:
                    eq(lines, [], "warnings for mode %o" % mode)
                else:
                    eq(len(lines), 1, "warnings for mode %o (%r)" % (mode, err[-300:]))
                    check(path in lines[0] and warned in lines[0], "the warning: %r" % lines[0])

    suite.case("-o http_header_file readable by others: one warning", go, 60)


def sighup_fifo(suite, model_path):
    why = s3serve.missing()

    def go():
        if why:
            raise Skip(why)
        with s3serve.S3Server(suite.tmp) as server:
            server.key("AKADMIN", "adminsecret")
            admin = server.client("AKADMIN", "adminsecret")
            admin.create_bucket(Bucket="models")
            admin.upload_file(model_path, "models", "m.tbm")
            server.key("AKREAD", "SKREAD")
            cred = os.path.join(suite.tmp, "credentials")
            with open(cred, "w") as f:
                f.write("[default]\naws_access_key_id = AKREAD\naws_secret_access_key = SKREAD\n")
            env = {"AWS_ENDPOINT_URL": server.endpoint, "AWS_SHARED_CREDENTIALS_FILE": cred,
                   "HOME": suite.tmp}
            m = start(suite, "s3://models/m.tbm", env)
            try:
                names = sorted(os.listdir(m.p("tensors")))
                want = read_all(m.p("tensors", names[0], "raw.tb"))
                # the credentials file becomes a FIFO no one writes to, then SIGHUP
                os.unlink(cred)
                os.mkfifo(cred, 0o600)
                os.kill(m.pid, signal.SIGHUP)
                time.sleep(0.5)
                # transfers go on with the credentials read before
                for d in names[1:]:
                    check(len(read_all(m.p("tensors", d, "raw.tb"))) > 0, d)
                eq(read_all(m.p("tensors", names[0], "raw.tb")), want, "raw.tb after SIGHUP")
                t0 = time.monotonic()
                os.kill(m.pid, signal.SIGTERM)
                rc = m.wait_exit(20)
                took = time.monotonic() - t0
                still = mounted(m.path)
            finally:
                err = finish(m)
            eq(rc, 0, "exit status after SIGTERM (%.1f s; stderr ends %r)" % (took, err[-2000:]))
            check(took < 5, "the daemon took %.1f s to end" % took)
            check(not still, "still mounted after SIGTERM")
            lines = [line for line in err.splitlines() if "credentials not read again" in line]
            eq(len(lines), 1, "lines about the credentials file (%r)" % err[-400:])
            check(cred in lines[0] and "FIFO" in lines[0], "the line: %r" % lines[0])

    suite.case("s3: SIGHUP with a FIFO for the credentials file, then SIGTERM ends it", go, 90)


def main(suite):
    model = os.path.join(suite.tmp, "model.tbm")
    subprocess.run(["/usr/bin/python3", harness.GEN, "llama", model], check=True, timeout=120)
    with open(model, "rb") as f:
        data = f.read()
    file_options(suite, data)
    logfile(suite, model)
    header_mode(suite, data)
    sighup_fifo(suite, model)


if __name__ == "__main__":
    harness.run("integration-named", main)
