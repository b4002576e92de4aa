#!/usr/bin/python3
"""Integration test that every file of the tree and every line tbmfs prints is valid UTF-8
(contract v2, last row of "Bad input"), whatever the source holds: long multi-byte strings in
every quoted field (name, dtype, a manifest's file), and a bare .tb whose file name is not
UTF-8. Each text file is decoded strictly, and JSON files parsed."""

import json
import os

import harness
import models
from harness import check, eq, read_all, run, run_tbmfs

TEXT = {"index.json", "model.json", "header.json", "selftest", "stats.json", "tensors.json",
        "config.json"}
LONG = "\u00e9" * 1500  # two bytes each: any cut by bytes alone splits one
gen = None


def decode_tree(m):
    """Every text file of the mount, strictly decoded; JSON ones parsed. Returns how many."""
    n = 0
    for root, _, files in os.walk(m.path.encode()):
        for f in files:
            if f.decode() not in TEXT:
                continue
            try:
                data = read_all(os.path.join(root, f))
            except OSError as e:  # a broken tensor's view: EIO, no text
                if e.errno != 5:
                    raise
                continue
            try:
                text = data.decode("utf-8", "strict")
            except UnicodeDecodeError as e:
                raise harness.Failure("%r is not UTF-8: %s" % (os.path.join(root, f), e))
            if f.endswith(b".json") or (f == b"selftest" and root.endswith(b"tensors") is False
                                        and b"/tensors/" in root):
                json.loads(text)
            n += 1
    return n


def check_outputs(path):
    rc, out, err = run_tbmfs(["--check", path])
    for what, text in (("stdout", out), ("stderr", err)):
        check("\ufffd" not in text, "--check %s holds bytes that are not UTF-8: %r" % (
            what, text[:200]))
    return rc, out


def main(suite):
    global gen
    gen = harness.load_gen()
    mk = gen.make_tensor
    ts = [mk(LONG, [4, 8], "fp32", (2, 4), 1),
          mk("dtype", [4, 8], "fp32", (2, 4), 2, index={"dtype": LONG}),
          mk("x" * 700 + LONG, [4], "fp16", (0, 0), 3)]
    src = os.path.join(suite.tmp, "u.tbm")
    models.write_container(gen, src, ts)
    suite.case("container: --check output is UTF-8", lambda: check_outputs(src))
    m = suite.mount(src, name="container: mounts")
    with m:
        suite.case("container: every text file is UTF-8",
                   lambda: check(decode_tree(m) >= 10, "text files found"))

    mdir = os.path.join(suite.tmp, "manifest")
    manifest = gen.write_manifest(mdir, [mk("m", [4], "fp32", (0, 0), 4)])
    obj = json.loads(manifest)
    obj["tensors"].append({"name": "missing", "file": LONG + ".tb"})
    gen.write_file(os.path.join(mdir, "manifest.json"), json.dumps(obj).encode())
    suite.case("manifest: --check output is UTF-8",
               lambda: eq(check_outputs(mdir)[0], 1, "exit (the missing file is a problem)"))
    m2 = suite.mount(mdir, name="manifest: mounts")
    with m2:
        suite.case("manifest: every text file is UTF-8", lambda: decode_tree(m2))

    bad = os.path.join(suite.tmp.encode(), b"bad\xff\xfename.tb")
    gen.write_tb(bad.decode("utf-8", "surrogateescape"), mk("b", [8], "fp32", (2, 4), 5))
    suite.case("bare .tb named in bytes that are not UTF-8: --check output is UTF-8",
               lambda: check_outputs(bad.decode("utf-8", "surrogateescape")))
    m3 = suite.mount(bad.decode("utf-8", "surrogateescape"), name="bare .tb: mounts")
    with m3:
        suite.case("bare .tb: every text file is UTF-8", lambda: decode_tree(m3))


if __name__ == "__main__":
    run("integration-utf8", main)
