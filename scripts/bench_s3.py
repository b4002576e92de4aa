#!/usr/bin/python3
"""Benchmark of remote sources against their peers, beside bench_http.py: a cold dd bs=1M of one
256 MiB raw.tb through an http:// mount of a private nginx (autoindex on), against the same bytes
through `rclone mount :http: --http-url URL --read-only` of the same nginx and curl -r (the
bound); the same read through an s3:// mount of the object on a signing S3 store (s3rver, as the
tests run it), against an http:// mount of a presigned URL of that object on that store (what
signing costs); and the mount of a 1,000-tensor model over s3:// with the requests it made.
Medians of RUNS rounds, each round measuring every figure once, in rotating order. Usage:
scripts/bench_s3.py [RUNS]."""

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import bench_http  # noqa: E402
import httpserve  # noqa: E402
import s3serve  # noqa: E402
from bench_http import Mounted, timed  # noqa: E402

TBMFS = bench_http.TBMFS
RCLONE = shutil.which("rclone") or "/usr/bin/rclone"


def sh(args, env=None):
    return subprocess.run(args, check=True, capture_output=True, timeout=300, env=env)


def dd(path, count=None):
    args = ["dd", "if=" + path, "of=/dev/null", "bs=1M"]
    if count:
        args += ["iflag=count_bytes", "count=%d" % count]
    return timed(args)


def rclone_dd(base_url, mnt, name, count):
    """A cold dd of the first count bytes of name through a fresh rclone mount."""
    os.makedirs(mnt, exist_ok=True)
    proc = subprocess.Popen([RCLONE, "mount", ":http:", mnt, "--http-url", base_url,
                             "--read-only", "--config", "/dev/null"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while not os.path.ismount(mnt):
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError("rclone did not mount")
            time.sleep(0.05)
        return dd(os.path.join(mnt, name), count)
    finally:
        subprocess.run(["fusermount3", "-u", mnt], timeout=60)
        proc.wait(timeout=30)


def main():
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    why = s3serve.missing()
    if why:
        sys.exit("bench_s3: %s" % why)
    tmp = tempfile.mkdtemp(prefix="tbmfs-bench-s3-")
    www = os.path.join(tmp, "www")
    os.makedirs(www)
    rawlen = bench_http.write_big(os.path.join(www, "big.tbm"))
    bench_http.write_many(os.path.join(www, "many.tbm"))
    mnt = os.path.join(tmp, "mnt")
    fig = {k: [] for k in ("http", "rclone", "curl", "s3", "presigned", "mount_many",
                           "req_many")}
    raw = os.path.join(mnt, "tensors", "big", "raw.tb")
    try:
        with httpserve.Nginx(os.path.join(tmp, "nginx"), www, autoindex=True) as nginx, \
                s3serve.S3Server(tmp) as store:
            store.key("AKBENCH", "benchsecret")
            client = store.client("AKBENCH", "benchsecret")
            client.create_bucket(Bucket="models")
            for name in ("big.tbm", "many.tbm"):
                client.upload_file(os.path.join(www, name), "models", name)
            presigned = client.generate_presigned_url(
                "get_object", Params={"Bucket": "models", "Key": "big.tbm"}, ExpiresIn=86400)
            env = dict(os.environ, AWS_ENDPOINT_URL=store.endpoint, AWS_ACCESS_KEY_ID="AKBENCH",
                       AWS_SECRET_ACCESS_KEY="benchsecret")
            cache = ["-o", "cache_size=64M"]

            def http():
                with Mounted(nginx.url("big.tbm"), mnt, cache):
                    fig["http"].append(dd(raw))

            def rclone():
                fig["rclone"].append(rclone_dd(nginx.url(""), mnt, "big.tbm", rawlen))

            def curl():
                fig["curl"].append(timed(["curl", "-sSf", "-r", "0-%d" % (rawlen - 1),
                                          nginx.url("big.tbm"), "-o", "/dev/null"]))

            def s3():
                os.makedirs(mnt, exist_ok=True)
                sh(["timeout", "120", TBMFS] + cache + ["s3://models/big.tbm", mnt], env=env)
                try:
                    fig["s3"].append(dd(raw))
                finally:
                    subprocess.run(["fusermount3", "-u", mnt], timeout=60)

            def signed_url():
                with Mounted(presigned, mnt, cache):
                    fig["presigned"].append(dd(raw))

            order = [http, rclone, curl, s3, signed_url]
            for r in range(runs):
                for f in order[r % len(order):] + order[:r % len(order)]:
                    f()
                n0 = store.requests()
                os.makedirs(mnt, exist_ok=True)
                t = time.perf_counter()
                sh(["timeout", "120", TBMFS, "s3://models/many.tbm", mnt], env=env)
                fig["mount_many"].append(time.perf_counter() - t)
                fig["req_many"].append(store.requests() - n0)
                subprocess.run(["fusermount3", "-u", mnt], timeout=60)
    finally:
        if os.path.ismount(mnt):
            subprocess.run(["fusermount3", "-u", mnt], timeout=60)
        shutil.rmtree(tmp, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in fig.items()}
    gb = rawlen / 1e9
    print("Remote sources on 127.0.0.1, medians of %d rounds" % runs)
    print("  cold dd bs=1M of a 256 MiB raw.tb, http:// mount of nginx  %6.2f GB/s" %
          (gb / med["http"]))
    print("  the same bytes, rclone mount :http: of that nginx          %6.2f GB/s" %
          (gb / med["rclone"]))
    print("  ratio tbmfs / rclone                                       %6.2fx  (goal >= 1.5x)"
          % (med["rclone"] / med["http"]))
    print("  curl -r of the same bytes (the bound)                      %6.2f GB/s, tbmfs "
          "%.2fx of it" % (gb / med["curl"], med["curl"] / med["http"]))
    print("  s3:// mount of the object on s3rver, signed                %6.2f GB/s" %
          (gb / med["s3"]))
    print("  http:// mount of a presigned URL of it, same store         %6.2f GB/s" %
          (gb / med["presigned"]))
    print("  ratio s3:// / presigned                                    %6.2fx  (goal >= 0.9x)"
          % (med["presigned"] / med["s3"]))
    print("  mount of 1,000 2:4 tensors over s3://                      %6.3f s  (goal < 1 s), "
          "%d requests" % (med["mount_many"], med["req_many"]))


if __name__ == "__main__":
    main()
