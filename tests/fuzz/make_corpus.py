#!/usr/bin/python3
"""Writes the fuzz harness's seed corpus (tests/fuzz/corpus/): small sound containers of every
precision and several N:M layouts, bare .tb files, manifest inputs, and broken sources of each kind
the contract names. Built with scripts/gen_model.py; deterministic, so rerunning it reproduces the
committed files.

Each seed is a fuzz input: one mode byte (see fuzz_source.c: bit 0 also opens a bare .tb, bit 1
also a manifest directory, bit 2 a framed payload, bit 3 strict, bits 4-5 the kernels), then the
payload. fuzz_views reads the same seeds (bit 0 and bit 3 alone mean something to it).
"""

import json
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
sys.dont_write_bytecode = True

import gen_model as g  # noqa: E402

BLOB, MANIFEST, FRAMED, STRICT = 0x01, 0x02, 0x04, 0x08
SCALAR, AVX2, GROW = 0x10, 0x20, 0x40


def raw(mode, data):
    return bytes([mode]) + data


def framed(mode, c):
    """The framed form of container c: data length, data, then the index without its trailer."""
    data = c.data[: c.index_start]
    return bytes([mode | FRAMED]) + struct.pack("<I", len(data)) + data + c.index_bytes


def index_only(obj_bytes):
    """A container holding no blob: just the index and its length."""
    return obj_bytes + struct.pack("<I", len(obj_bytes))


def t(name, shape, dtype="fp32", nm=(2, 4), seed=0, **kw):
    return g.make_tensor(name, shape, dtype, nm, seed, **kw)


def sound_seeds():
    yield "c-fp32-2of4", raw(0, g.container([t("q.weight", [4, 8])]).data)
    yield "c-fp16-1of2-scalar", raw(SCALAR, g.container([t("w", [6, 10], "fp16", (1, 2), 1)]).data)
    yield "c-bf16-dense-avx2", raw(AVX2, g.container([t("norm", [16], "bf16", (0, 0), 2)]).data)
    yield "c-fp64-2of4-partial-junk", raw(
        0, g.container([t("p", [3, 7], "fp64", (2, 4), 3, junk_bits=True)]).data)
    yield "c-fp16-4of16", raw(0, g.container([t("m16", [2, 40], "fp16", (4, 16), 4)]).data)
    yield "c-fp32-8of32-partial", raw(SCALAR, g.container([t("m32", [70], "fp32", (8, 32), 5)]).data)
    yield "c-bf16-1of1-and-3of3", raw(0, g.container(
        [t("m1", [9], "bf16", (1, 1), 6), t("m3", [2, 5], "fp16", (2, 3), 7)]).data)
    yield "c-warnings-overn-conflicts", raw(0, g.container(
        [t("w", [4, 16], "fp32", (3, 8), 8, over_n=2, conflicts=3)]).data)
    yield "c-specials", raw(0, g.container(
        [g.special_tensor("f32", "fp32", (2, 4)), g.special_tensor("f64", "fp64"),
         g.special_tensor("f16", "fp16", (1, 2))]).data)
    # A llama model that has the GGUF files, rows permuted and masked.
    tensors, config = g.llama_tensors(44, layers=1, hidden=32, heads=2, kv_heads=1,
                                      intermediate=32, vocab=32)
    yield "c-llama-gguf", raw(0, g.container(tensors, "llama", config).data)
    yield "c-shape-mismatch-empty", raw(0, g.container(
        [t("s", [4, 8], index={"shape": [5, 7]}), t("empty", [0], "fp16", (2, 4), 9),
         t("zero-rows", [0, 5], "fp32", (0, 0), 10)]).data)


def grown(name, dtype, nm, num_weights, seed):
    """A bare .tb seed for the harness's grow mode: a header for num_weights elements and 1 KiB of
    pseudo-random bytes, which the harness repeats up to 2 MiB to fill the weights and mask."""
    n, m = nm
    es = g.ELEM_SIZE[g.PRECISIONS[dtype]]
    nmb = g.mask_size(num_weights, m)
    t = t_header(name, dtype, nm, {"num_weights": num_weights, "num_mask_bytes": nmb,
                                   "masks_offset": g.HEADER_SIZE + num_weights * es})
    noise = g.np.random.default_rng([seed, 0x6C]).integers(0, 256, 1024, dtype=g.np.uint8)
    return t.header_bytes() + noise.tobytes()


def t_header(name, dtype, nm, header):
    return g.make_tensor(name, [4], dtype, nm, header=header)


def blob_seeds():
    yield "b-grown-fp16-3of7", raw(BLOB | GROW, grown("g", "fp16", (3, 7), 300001, 23))
    yield "b-grown-fp32-5of32-scalar", raw(BLOB | GROW | SCALAR,
                                           grown("g", "fp32", (5, 32), 270001, 24))
    yield "b-fp32-2of4", raw(BLOB, g.blob(t("b", [8, 4], "fp32", (2, 4), 11)))
    yield "b-bf16-4of8-tail-avx2", raw(BLOB | AVX2, g.blob(
        t("b", [40], "bf16", (4, 8), 12, tail=b"trailing bytes")))
    yield "b-bf16-specials-4of4", raw(BLOB | SCALAR, g.blob(g.special_tensor("b", "bf16", (4, 4))))
    yield "b-fp64-bad-magic", raw(BLOB, g.blob(t("b", [4], "fp64", (0, 0), header={"magic": 1})))
    yield "b-fp16-truncated", raw(BLOB, g.blob(t("b", [64], "fp16", (2, 4), 13))[:4096 + 40])


def manifest_seeds():
    pair = [t("a", [2, 8], "fp16", (2, 4), 14, index={"file": "t0.tb"}),
            t("b", [16], "fp32", (0, 0), 15, index={"file": "t1.tb"})]
    yield "m-two-tensors", raw(MANIFEST, g.container(pair).data)
    yield "m-framed-blob-manifest", framed(BLOB | MANIFEST, g.container(pair))
    refused = [t("ok", [8], "fp32", (2, 4), 16, index={"file": "t0.tb"})]
    files = ["../t0.tb", "/etc/hostname", "manifest.json", "t9.tb", "", "t0.tb\u0000x", ".",
             "./t0.tb", "sub/../t0.tb"]
    c = g.container(refused)
    obj = {"architecture": "llama", "config": {},
           "tensors": [c.entries[0]] + [{"name": "r%d" % i, "file": f} for i, f in enumerate(files)]
           + [{"name": "nofile"}, {"name": "intfile", "file": 7}]}
    idx = json.dumps(obj).encode()
    yield "m-refused-files", raw(MANIFEST, c.data[: c.index_start] + index_only(idx))


def broken_seeds():
    yield "c-bad-header-fields", raw(0, g.container(
        [t("prec", [8], header={"precision": 7}), t("ver", [8], header={"version": 2})]).data)
    yield "c-regions-out", raw(0, g.container(
        [t("past", [8], header={"num_weights": 1 << 20}),
         t("overflow", [8], "fp64", (0, 0), header={"num_weights": 1 << 62})]).data)
    yield "c-regions-overlap", raw(0, g.container(
        [t("mask-on-weights", [8], header={"masks_offset": 4096}),
         t("weights-in-header", [8], header={"weights_offset": 100})]).data)
    yield "c-mask-rules", raw(0, g.container(
        [t("m33", [66], nm=(2, 33), prune=False), t("n5m4", [8], nm=(5, 4), prune=False),
         t("nbytes", [8], header={"num_mask_bytes": 3})]).data)
    yield "c-blobs-overlap", raw(0, g.container(
        [t("x", [8], seed=17), t("y", [8], seed=18)], offsets=[0, 4096 + 16]).data)
    base = g.container([t("w", [8], seed=19)])
    odd = {"architecture": 5, "config": {"deep": [[[{"a": 1e300}]]], "eps": 1e-6},
           "tensors": [dict(base.entries[0]), 5, None, "s", [], {},
                       {"name": "neg", "offset": -1}, {"name": "float", "offset": 0.5},
                       {"name": "huge", "offset": 18446744073709551615},
                       {"name": "big", "offset": 18446744073709551616},
                       {"name": "shape", "offset": 0, "shape": [-1, 2.5, "x"]},
                       {"name": "shape-object", "offset": 0, "shape": {}},
                       {"name": "shape-overflow", "offset": 0, "shape": [1 << 32, 1 << 32, 2]},
                       {"name": "dtype-int", "offset": 0, "dtype": 3},
                       {"name": "dtype", "offset": 0, "dtype": "fp8", "num_weights": 9,
                        "nm_n": "2", "nm_m": None, "num_mask_bytes": 1}]}
    yield "c-index-entries-odd", raw(0, base.data[: base.index_start]
                                     + index_only(json.dumps(odd).encode()))
    # Long names whose cut at 246 bytes falls inside a UTF-8 character and
    # inside a %XX escape.
    names = ["", ".", "..", "a/b", "%", "\u0001\u007f", "x" * 300, "a" + "\u00e9" * 130,
             "x" + "%" * 100, "w", "w", "w~2", "w\u0000nul"]
    obj = {"tensors": [dict(base.entries[0], name=n) for n in names]}
    yield "c-names", raw(0, base.data[: base.index_start]
                         + index_only(json.dumps(obj, ensure_ascii=False).encode()))
    yield "c-index-truncated-json", raw(0, index_only(b'{"tensors": [{"name": "a", "offs'))
    yield "c-index-no-tensors", raw(0, index_only(b'{"architecture": "x", "tensors": {}}'))
    yield "c-index-length-bad", raw(0, b"{}" + struct.pack("<I", 0xFFFFFFF0))
    yield "c-strict-problem", raw(STRICT, g.container(
        [t("ok", [8], seed=20), t("bad", [8], seed=21, header={"version": 9})]).data)
    yield "c-strict-sound-all-modes", framed(STRICT | BLOB | MANIFEST, g.container(
        [t("s", [4, 4], "fp16", (2, 4), 22, index={"file": "t0.tb"})]))


def tools_seeds():
    """[v2] Each convention of the Tensorbit tools: masks of one byte per group, masks one group
    short, the merge script's offsets (a chain of misplaced blobs), [n, 0] shapes, quantized
    dtypes, a blob that runs into the next one's header, duplicate names."""
    yield "t-bytes-per-group", framed(0, g.container(
        [t("b9", [2, 18], "fp32", (4, 9), 30, tools_mask=True),
         t("b16", [3, 16], "fp16", (8, 16), 31, tools_mask=True),
         t("b32", [2, 32], "bf16", (8, 32), 32, tools_mask=True)]))
    yield "t-short-masks", framed(BLOB, g.container(
        [t("s4", [3, 7], "fp32", (2, 4), 33, short_mask=True),
         t("s16", [35], "fp64", (4, 16), 34, tools_mask=True, short_mask=True)]))
    yield "t-merged-chain", raw(0, g.merged_container(
        [t("a", [4, 8], "fp64", (2, 4), 35), t("b", [4, 8], "fp32", (2, 4), 36),
         t("c", [4, 8], "fp16", (2, 4), 37), t("d", [16], "bf16", (0, 0), 38)]).data)
    yield "t-shape-n0-quantized-dups", raw(0, g.container(
        [t("n0", [8], "fp32", (2, 4), 39, index={"shape": [8, 0]}),
         t("q", [8], "fp32", (0, 0), 40, index={"dtype": "int8"}),
         t("n0", [8], "fp32", (2, 4), 41)]).data)
    over = g.container([t("over", [16], "fp32", (0, 0), 42), t("next", [8], "fp32", (2, 4), 43)])
    data = bytearray(over.data)
    data[16:24] = struct.pack("<Q", 64)
    yield "t-overreach", raw(0, bytes(data))


def main():
    out = os.path.join(HERE, "corpus")
    os.makedirs(out, exist_ok=True)
    for old in os.listdir(out):
        os.unlink(os.path.join(out, old))
    count = 0
    for seeds in (sound_seeds, blob_seeds, manifest_seeds, broken_seeds, tools_seeds):
        for name, data in seeds():
            with open(os.path.join(out, name), "wb") as f:
                f.write(data)
            count += 1
    print("wrote %d seeds to %s" % (count, out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
