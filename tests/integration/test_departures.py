#!/usr/bin/python3
"""Integration test of the places where the mount departed from contract v2 (issue 28): blobs
that share weight bytes, a quantized tensor's header.json and self-test line, tensors.json's
nm for every tensor and config.json's torch_dtype when every tensor is quantized."""

import json
import os

import harness
from harness import check, eq, expect_eio, read_all, read_json, run, run_tbmfs

gen = None
DATA_VIEWS = ("raw.tb", "weights.bin", "dense.f32", "dense.npy")


def shared_weights(suite, tmp):
    """a at 0 with its weights 8192 past it, b at 4096 with its weights 4096 past it: the same
    bytes, neither reaching into the other's header. Both are broken."""
    mk = gen.make_tensor
    a = mk("share.a", [8], "fp32", (0, 0), 1, header={"weights_offset": 8192})
    b = mk("share.b", [8], "fp32", (0, 0), 2)
    cont = gen.container([a, b], offsets=[0, 4096])
    path = os.path.join(tmp, "shared.tbm")
    gen.write_file(path, cont.data)
    m = suite.mount(path, name="shared weights: mounts")
    with m:
        def broken(name, other):
            hj = read_json(m.p("tensors", name, "header.json"))
            check(any("shares bytes" in p and other in p for p in hj["problems"]),
                  "problems of %s: %r" % (name, hj["problems"]))
            for view in DATA_VIEWS:
                expect_eio(m.p("tensors", name, view), "%s/%s" % (name, view))
        suite.case("shared weights: the first is broken", lambda: broken("share.a", "share.b"))
        suite.case("shared weights: the second is broken", lambda: broken("share.b", "share.a"))


def quantized(suite, tmp):
    mk = gen.make_tensor
    ts = [mk("dense.first", [8], "fp32", (0, 0), 3),
          mk("q.int8", [64], "fp32", (2, 4), 4, index={"dtype": "int8"}),
          mk("bad.magic", [4, 8], "fp32", (2, 8), 5, header={"magic": 0xDEADBEEF}),
          mk("noidx.nm", [4, 8], "fp32", (2, 4), 6, header={"magic": 0xDEADBEEF},
             index={"nm_n": gen.DELETE, "nm_m": gen.DELETE}),
          mk("sparse", [4, 8], "fp32", (2, 4), 7)]
    cont = gen.container(ts)
    path = os.path.join(tmp, "quant.tbm")
    gen.write_file(path, cont.data)
    m = suite.mount(path, name="quantized: mounts")
    with m:
        suite.case("quantized: header.json gives the entry's offset", lambda: eq(
            read_json(m.p("tensors", "q.int8", "header.json"))["offset"], cont.entries[1]["offset"],
            "offset"))

        def report():
            lines = [x.rstrip() for x in read_all(m.p("selftest")).decode().splitlines()]
            check(any(x.startswith("FAIL q.int8: ") for x in lines), lines)
            eq(lines[-1], "selftest: 1 passed, 3 failed, 1 skipped", "summary")
        suite.case("quantized: the root selftest counts it as failed", report)
        suite.case("tensors.json: nm for every tensor", lambda: eq(
            [x["nm"] for x in read_json(m.p("tensors.json"))],
            ["0:0", "2:4", "2:8", "0:0", "2:4"], "nm"))
    allq = [mk("model.embed_tokens.weight", [8], "fp32", (0, 0), 8, index={"dtype": "int8"}),
            mk("model.norm.weight", [8], "fp32", (0, 0), 9, index={"dtype": "int4"})]
    path2 = os.path.join(tmp, "allq.tbm")
    gen.write_file(path2, gen.container(allq, "llama", {"hidden_size": 8}).data)
    m2 = suite.mount(path2, name="all quantized: mounts")
    with m2:
        suite.case("all quantized: config.json's torch_dtype is float32", lambda: eq(
            read_json(m2.p("config.json")).get("torch_dtype"), "float32", "torch_dtype"))


def main(suite):
    global gen
    gen = harness.load_gen()
    shared_weights(suite, suite.tmp)
    quantized(suite, suite.tmp)


if __name__ == "__main__":
    run("integration-departures", main)
