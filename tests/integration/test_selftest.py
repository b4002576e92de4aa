#!/usr/bin/python3
"""Integration test of the selftest files: each tensor's JSON report, and the root report with
one line per tensor and the closing 'selftest: P passed, F failed, S skipped' whose counts
follow the contract (problem tensors fail, sound dense tensors skip). Also reads them with
cat, cp and dd, since their size is unknown before they are opened."""

import dataclasses
import json
import math
import os
import subprocess
import threading
import time

import harness
import models
from harness import CMD_TIMEOUT, check, eq, read_all, run
from tbmref import dir_names

gen = None


def selftest_tensors():
    """(tensor, expected outcome) with outcome 'pass', 'fail' (a problem) or 'skip' (dense).
    Names are chosen so that none is a substring of another."""
    mk = gen.make_tensor
    return [
        (mk("st_fp32_2of4", [16, 32], "fp32", (2, 4), 1), "pass"),
        (mk("st_fp16_straddle", [12, 10], "fp16", (2, 4), 2), "pass"),
        (mk("st_bf16_m32_partial", [7, 45], "bf16", (9, 32), 3), "pass"),
        (mk("st_fp64_m5", [9, 13], "fp64", (2, 5), 4), "pass"),
        (mk("st_fp16_m16_junk", [8, 48], "fp16", (5, 16), 5, junk_bits=True), "pass"),
        (mk("st_fp32_oned", [100], "fp32", (1, 4), 6), "pass"),
        (mk("st_fp32_shape_lies", [6, 6], "fp32", (2, 4), 7, num_weights=30), "pass"),
        (mk("st_fp32_conflicts", [16, 16], "fp32", (2, 4), 8, conflicts=50), "pass"),
        (mk("st_fp16_over_n", [16, 16], "fp16", (2, 4), 9, over_n=12), "pass"),
        (mk("st_fp32_all_pruned", [8, 8], "fp32", (0, 4), 10), "pass"),
        (mk("st_name/with%escapes", [4, 8], "bf16", (2, 4), 11), "pass"),
        (mk("st_big_fp16", [256, 256], "fp16", (2, 4), 12), "pass"),
        (mk("st_dense_fp32", [8, 8], "fp32", (0, 0), 13), "skip"),
        (mk("st_dense_bf16", [16], "bf16", (0, 0), 14), "skip"),
        (mk("st_bad_magic", [4, 8], "fp32", (2, 4), 15, header={"magic": 0x12345678}), "fail"),
        (mk("st_mask_m40", [4, 80], "fp32", (2, 40), 16), "fail"),
        (mk("st_mask_eof", [4, 8], "fp32", (2, 4), 17, header={"masks_offset": 1 << 40}), "fail"),
        (mk("st_dense_eof", [4, 8], "fp32", (0, 0), 18, header={"num_weights": 1 << 28},
            index={"num_weights": 1 << 28}), "fail"),
    ]


def geometry(t):
    nw = t.header["num_weights"]
    shape = t.index["shape"]
    # a 1-D shape is one row, as is a shape that does not describe num_weights
    if len(shape) < 2 or math.prod(shape) != nw:
        return 1, nw
    return shape[0], nw // shape[0]


def check_tensor(m, d, t, outcome):
    obj = json.loads(read_all(m.p("tensors", d, "selftest")))
    check(isinstance(obj, dict), "not an object")
    eq(obj.get("name"), t.name, "name")
    if outcome == "fail":
        eq(obj.get("pass"), False, "pass")
        check(isinstance(obj.get("error"), str) and obj["error"], "no error: %r" % obj)
        return
    if outcome == "skip":
        return
    rows, cols = geometry(t)
    want = {"rows": rows, "cols": cols, "nm": "%d:%d" % (t.header["nm_n"], t.header["nm_m"]),
            "batch": 8, "pass": True}
    for k, v in want.items():
        eq(obj.get(k, "<missing>"), v, k)
    for k in ("max_abs_err", "tolerance", "sparse_seconds", "dense_seconds", "speedup"):
        check(isinstance(obj.get(k), (int, float)) and not isinstance(obj.get(k), bool),
              "%s not a number: %r" % (k, obj.get(k)))
    check(0 <= obj["max_abs_err"] <= obj["tolerance"], "max_abs_err %r over tolerance %r" % (
        obj["max_abs_err"], obj["tolerance"]))
    check(obj["sparse_seconds"] >= 0 and obj["dense_seconds"] >= 0, "negative times")
    if obj["sparse_seconds"] > 0 and obj["dense_seconds"] > 0:
        ratio = obj["dense_seconds"] / obj["sparse_seconds"]
        check(math.isclose(obj["speedup"], ratio, rel_tol=0.02, abs_tol=1e-3),
              "speedup %r is not dense/sparse %r" % (obj["speedup"], ratio))
    check("error" not in obj, "error in a passing report: %r" % obj.get("error"))


def check_root(text, dirs, outcomes):
    lines = [x for x in text.splitlines() if x.strip()]
    eq(len(lines), len(dirs) + 1, "lines (one per tensor, then the summary)")
    want = {o: outcomes.count(o) for o in ("pass", "fail", "skip")}
    eq(lines[-1].strip(), "selftest: %d passed, %d failed, %d skipped" % (
        want["pass"], want["fail"], want["skip"]), "summary line")
    for d in dirs:
        named = [x for x in lines[:-1] if d in x]
        eq(len(named), 1, "lines naming %r" % d)


def workers_stay_free(suite):
    """Self-tests are answered by a thread of their own: with two FUSE workers and three
    self-tests asked for at once, index.json is read in a fraction of one self-test's time,
    and an opener killed while its self-test waits in the queue is let go at once. Each
    self-test runs once per mount [v2], so every measurement takes tensors not tested yet."""
    src = os.path.join(suite.tmp, "slow.tbm")
    # Eight tensors of one payload under eight names: each self-test is still its own (one per
    # tensor and mount), and one 16 Mi-element tensor is generated instead of eight. Written
    # without the reference views (models.write_container's Expect), which these cases never read.
    base = gen.make_tensor("slow", [4096, 4096], "fp16", (2, 4), 21)
    slow = [dataclasses.replace(base, name="slow%d" % k, index=dict(base.index, name="slow%d" % k))
            for k in range(8)]
    gen.write_file(src, gen.container(slow, config={"hidden_size": 16, "num_layers": 1}).data)
    m = suite.mount(src, args=["-o", "max_threads=2"], name="slow self-tests: mount")
    fresh = iter(m.p("tensors", t.name, "selftest") for t in slow)
    with m:
        def solo():
            path = next(fresh)
            start = time.monotonic()
            eq(json.loads(read_all(path)).get("pass"), True, "self-test passed")
            took = time.monotonic() - start
            start = time.monotonic()
            read_all(path)
            again = time.monotonic() - start
            check(again < took / 4, "a second open took %.2f s, the first %.2f s: not shared"
                  % (again, took))
            return took

        def free():
            alone = solo()
            done = []

            def one(path):
                rep = json.loads(read_all(path))
                done.append((time.monotonic(), rep.get("pass")))

            threads = [threading.Thread(target=one, args=(next(fresh),)) for _ in range(3)]
            for t in threads:
                t.start()
            time.sleep(alone / 5)
            start = time.monotonic()
            read_all(m.p("index.json"))
            took = time.monotonic() - start
            for t in threads:
                t.join(CMD_TIMEOUT)
            eq([ok for _, ok in done], [True] * 3, "self-tests passed")
            check(took < alone / 2, "index.json took %.2f s while self-tests ran (one alone: "
                  "%.2f s): the self-tests held the workers" % (took, alone))

        suite.case("slow self-tests leave the FUSE workers free", free, timeout=120)

        def killed():
            alone = solo()

            def cat():
                return subprocess.Popen(["timeout", str(CMD_TIMEOUT), "cat", next(fresh)],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

            cats = [cat(), cat()]
            time.sleep(alone / 5)  # one self-test under way, one queued
            cats.append(cat())
            time.sleep(alone / 10)  # the third queued behind them
            start = time.monotonic()
            # kill that third cat; its timeout(1) then exits
            subprocess.run(["pkill", "-KILL", "-P", str(cats[2].pid)], timeout=CMD_TIMEOUT)
            cats[2].wait(CMD_TIMEOUT)
            took = time.monotonic() - start
            for c in cats[:2]:
                eq(c.wait(CMD_TIMEOUT), 0, "the other self-tests' cat exit")
            check(took < alone / 2, "a killed opener waited %.2f s (one self-test alone: %.2f s)"
                  % (took, alone))

        suite.case("an opener killed in the self-test queue is let go at once", killed,
                   timeout=120)


def main(suite):
    global gen
    gen = harness.load_gen()
    pairs = selftest_tensors()
    tensors = [t for t, _ in pairs]
    outcomes = [o for _, o in pairs]
    dirs = [d.decode() for d in dir_names([t.name for t in tensors])]
    src = os.path.join(suite.tmp, "selftest.tbm")
    models.write_container(gen, src, tensors)
    m = suite.mount(src)
    with m:
        for t, d, o in zip(tensors, dirs, outcomes):
            suite.case("tensor %s: selftest (%s)" % (d, o),
                       lambda t=t, d=d, o=o: check_tensor(m, d, t, o), timeout=60)
        root = m.p("selftest")
        suite.case("root: report lines and counts",
                   lambda: check_root(read_all(root).decode(), dirs, outcomes), timeout=120)

        def with_cat():
            p = subprocess.run(["timeout", str(CMD_TIMEOUT), "cat", root], capture_output=True,
                               timeout=CMD_TIMEOUT + 5)
            eq(p.returncode, 0, "cat exit")
            check_root(p.stdout.decode(), dirs, outcomes)

        suite.case("root: cat reads it whole", with_cat, timeout=120)

        def with_dd():
            p = subprocess.run(["timeout", str(CMD_TIMEOUT), "dd", "if=" + root, "bs=7",
                                "status=none"], capture_output=True, timeout=CMD_TIMEOUT + 5)
            eq(p.returncode, 0, "dd exit")
            check_root(p.stdout.decode(), dirs, outcomes)

        suite.case("root: dd bs=7 reads it whole", with_dd, timeout=120)

        def with_cp():
            out = os.path.join(suite.tmp, "copy.json")
            src_file = m.p("tensors", dirs[0], "selftest")
            p = subprocess.run(["timeout", str(CMD_TIMEOUT), "cp", src_file, out],
                               capture_output=True, timeout=CMD_TIMEOUT + 5)
            eq(p.returncode, 0, "cp exit (%s)" % p.stderr.decode().strip())
            with open(out, "rb") as f:
                eq(json.loads(f.read()).get("pass"), True, "copied report pass")

        suite.case("tensor: cp copies a selftest file whole", with_cp, timeout=60)

    sparse = [(t, d) for t, d, o in zip(tensors, dirs, outcomes) if o == "pass"]
    m = suite.mount(src, args=["-o", "selftest_batch=1"], name="selftest_batch=1: mount")
    with m:
        def batch_one():
            for t, d in sparse:
                rep = json.loads(read_all(m.p("tensors", d, "selftest")))
                eq((rep.get("batch"), rep.get("blas"), rep.get("pass")), (1, "sgemv", True),
                   "%s: batch, blas, pass" % d)

        suite.case("selftest_batch=1: every sparse tensor passes against sgemv", batch_one,
                   timeout=120)

    def batch_refused():
        code, out, err = harness.run_tbmfs(["-o", "selftest_batch=1025", src,
                                            os.path.join(suite.tmp, "never")])
        eq(code, 2, "exit")
        check("selftest_batch=1025" in err, "error names the option: %r" % err)

    suite.case("selftest_batch=1025 is refused", batch_refused)

    workers_stay_free(suite)

    llama = models.cli_llama(suite.tmp)
    expects = models.expects_from_tbm(llama)
    m = suite.mount(llama, name="llama (CLI): mount")
    with m:
        outcomes = ["skip" if e.h["nm_m"] == 0 else "pass" for e in expects]
        ldirs = [e.dir.decode() for e in expects]
        suite.case("llama (CLI): root report", lambda: check_root(
            read_all(m.p("selftest")).decode(), ldirs, outcomes), timeout=120)


if __name__ == "__main__":
    run("integration-selftest", main)
