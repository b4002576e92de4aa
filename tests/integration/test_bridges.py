#!/usr/bin/python3
"""Integration test of the whole-model views (contract v2, "Whole-model views" and "Tree"):
model.safetensors read by a parser written here and checked entry by entry against the stored
weights with the mask applied in their own precision (every precision and N:M, pruned -0.0 and
NaN, problems, duplicate names, shapes that do not describe num_weights, names that need
encoding, an empty model, 100,000 tiny tensors), by np.memmap, random preads and torch;
config.json against the mapping of the index's config, absent for other architectures;
tensors.json's fields; stat sizes equal the bytes of all three."""

import json
import math
import mmap
import os
import random
import struct
import subprocess
import time

import numpy as np

import harness
import models
from harness import (CMD_TIMEOUT, check, direct_read, eq, errno_of, ename, pipes_of, pread, read_all,
                     read_json, run, settled_pipes)
from tbmref import BITS, DTYPE_NAMES, keep_bits, mask_layout

ST_DTYPES = {0: "F32", 1: "F16", 2: "BF16", 3: "F64"}
gen = None


def parse_safetensors(data):
    """(header dict, data start) of a safetensors file, raising Failure unless it is one: an
    8-byte LE length, a JSON header padded with spaces to a multiple of 8, the tensors' data
    back to back from offset 0 to the end in file order."""
    check(len(data) >= 8, "shorter than the length prefix")
    (n,) = struct.unpack("<Q", data[:8])
    check(8 + n <= len(data), "header length %d past the end (%d)" % (n, len(data)))
    eq(n % 8, 0, "header length multiple of 8")
    text = data[8: 8 + n]
    body = text.rstrip(b" ")
    check(body.endswith(b"}"), "header %r not a padded JSON object" % text[-40:])
    head = json.loads(body)
    meta = head.pop("__metadata__", None)
    check(isinstance(meta, dict), "__metadata__ missing")
    check(all(isinstance(v, str) for v in meta.values()), "__metadata__ values not strings")
    pos = 0
    for name, e in head.items():
        eq(sorted(e), ["data_offsets", "dtype", "shape"], "%r: keys" % name)
        a, b = e["data_offsets"]
        eq(a, pos, "%r: data_offsets start (back to back)" % name)
        check(b >= a, "%r: data_offsets %r" % (name, e["data_offsets"]))
        pos = b
    eq(8 + n + pos, len(data), "data ends at the end of the file")
    return meta, head, 8 + n


def native_bytes(e):
    """The stored weights of Expect e with every element its mask prunes set to +0.0 in the
    stored precision."""
    h = e.h
    raw = np.frombuffer(e.weights, dtype=BITS[h["precision"]]).copy()
    if h["nm_m"]:
        raw[~keep_bits(e.mask, h["nm_m"], h["num_weights"], mask_layout(h))] = 0
    return raw.tobytes()


def st_shape(e):
    nw = e.h["num_weights"]
    return list(e.shape) if e.shape is not None and math.prod(e.shape) == nw else [nw]


def expected_entries(expects):
    """(name -> Expect of the tensors that appear, in index order; names omitted)."""
    kept, omitted = {}, []
    for e in expects:
        if e.problem or e.name in kept:
            omitted.append(e.name)
        else:
            kept[e.name] = e
    return kept, omitted


def check_safetensors(m, expects, source, arch):
    path = m.p("model.safetensors")
    data = read_all(path)
    eq(os.stat(path).st_size, len(data), "stat size = bytes read")
    meta, head, start = parse_safetensors(data)
    kept, omitted = expected_entries(expects)
    want_meta = {"format": "pt", "source": os.path.basename(source),
                 "omitted": json.dumps(omitted)}
    if arch is not None:
        want_meta["architecture"] = arch
    eq(dict(meta, omitted=json.loads(meta.get("omitted", "null"))),
       dict(want_meta, omitted=omitted), "__metadata__")
    eq(list(head), list(kept), "names, in index order")
    for name, e in kept.items():
        got = head[name]
        eq(got["dtype"], ST_DTYPES[e.h["precision"]], "%r: dtype" % name)
        eq(got["shape"], st_shape(e), "%r: shape" % name)
        a, b = got["data_offsets"]
        eq(data[start + a: start + b], native_bytes(e), "%r: bytes" % name)
    return data, head, start


def check_memmap(m, head, start, expects):
    kept, _ = expected_entries(expects)
    np_dtype = {"F32": "<f4", "F16": "<f2", "BF16": "<u2", "F64": "<f8"}
    for name, e in kept.items():
        a, b = head[name]["data_offsets"]
        if a == b:
            continue
        arr = np.memmap(m.p("model.safetensors"), dtype=np_dtype[head[name]["dtype"]], mode="r",
                        offset=start + a, shape=tuple(head[name]["shape"]))
        eq(arr.tobytes(), native_bytes(e), "%r: np.memmap" % name)
        del arr


def check_preads(m, data, head, start):
    """Random preads, most of them across a tensor boundary, equal the whole read."""
    path = m.p("model.safetensors")
    rng = random.Random(13)
    edges = [0, start] + [start + e["data_offsets"][1] for e in head.values()]
    for _ in range(400):
        edge = rng.choice(edges)
        off = max(0, edge - rng.randrange(0, 300))
        size = rng.choice((1, 3, 7, 64, 1000, 5000, 70000))
        eq(pread(path, off, size), data[off: off + size], "pread(%d, %d)" % (off, size))


def check_torch(m, head, start, expects):
    try:
        import torch
    except ImportError:
        raise harness.Skip("torch is not installed (apt-get install python3-torch)")
    kept, _ = expected_entries(expects)
    tdt = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
           "F64": torch.float64}
    with open(m.p("model.safetensors"), "rb") as f:
        data = f.read()
    for name, e in kept.items():
        a, b = head[name]["data_offsets"]
        if a == b:
            continue
        t = torch.frombuffer(bytearray(data[start + a: start + b]), dtype=tdt[head[name]["dtype"]])
        t = t.reshape(head[name]["shape"])
        eq(t.contiguous().view(-1).view(torch.uint8).numpy().tobytes(), native_bytes(e),
           "%r: torch.frombuffer" % name)


def check_tensors_json(m, expects):
    path = m.p("tensors.json")
    data = read_all(path)
    eq(os.stat(path).st_size, len(data), "stat size = bytes read")
    got = json.loads(data)
    eq(len(got), len(expects), "one object per tensor")
    for g, e in zip(got, expects):
        h = e.h
        want = {"name": e.name, "dir": os.fsdecode(e.dir), "shape": e.shape,
                "dtype": DTYPE_NAMES.get(h["precision"]),
                "nm": "%d:%d" % (h["nm_n"], h["nm_m"]), "num_weights": h["num_weights"],
                "density": e.stats[1] if e.stats else None,
                "problems": g["problems"], "warnings": g["warnings"]}
        eq(g, want, "%r" % e.name)
        eq(g["problems"] > 0, e.problem, "%r: problems counted" % e.name)
        if not e.problem:
            eq(g["warnings"] > 0, e.warn, "%r: warnings counted" % e.name)


def pruned_specials(mk):
    """Masks that prune -0.0 and NaN (and keep them elsewhere), every precision."""
    bits = {"fp32": (0x80000000, 0x7FC00001, 0x3F800000),
            "fp16": (0x8000, 0x7E01, 0x3C00),
            "bf16": (0x8000, 0x7FC1, 0x3F80),
            "fp64": (1 << 63, 0x7FF8000000000001, 0x3FF0000000000000)}
    out = []
    for k, (dtype, (negz, nan, one)) in enumerate(bits.items()):
        vals = np.array([negz, nan, one, negz, nan, one, one, one] * 2,
                        dtype=BITS[{"fp32": 0, "fp16": 1, "bf16": 2, "fp64": 3}[dtype]])
        keep = np.array([0, 0, 1, 1, 1, 1, 0, 0] * 2, dtype=bool)
        out.append(mk("pruned.specials.%s" % dtype, [16], dtype, (2, 4), 40 + k, values=vals,
                      mask_bits=keep, prune=False))
    return out


def problem_tensors(mk):
    return [
        mk("dupbad", [4], "fp32", (0, 0), 50, header={"magic": 1}),
        mk("dupbad", [4], "fp16", (0, 0), 51),
        mk("bad.mask", [8], "fp32", (2, 4), 52, header={"num_mask_bytes": 3}),
        mk("bad.precision", [8], 9, (0, 0), 53),
    ]


def bridge_tensors():
    mk = gen.make_tensor
    return (models.sound_tensors(gen) + models.warning_tensors(gen) + pruned_specials(mk)
            + problem_tensors(mk) + models.name_tensors(gen, models.SHORT_NAMES)
            + models.name_tensors(gen, models.LONG_NAMES[:3]))


HF_KEYS = [("hidden_size", "hidden_size"), ("intermediate_size", "intermediate_size"),
           ("num_attention_heads", "num_heads"), ("num_key_value_heads", "num_kv_heads"),
           ("num_hidden_layers", "num_layers"), ("vocab_size", "vocab_size"),
           ("max_position_embeddings", "max_seq_len"), ("rms_norm_eps", "norm_eps"),
           ("rope_theta", "rope_theta")]


def torch_dtype(expects):
    count = {}
    for e in expects:
        if e.weights is not None and e.h["precision"] in DTYPE_NAMES:
            count[e.h["precision"]] = count.get(e.h["precision"], 0) + e.h["num_weights"]
    best = max(sorted(count), key=lambda p: count[p])
    return {0: "float32", 1: "float16", 2: "bfloat16", 3: "float64"}[best]


def check_config(m, arch, config, expects):
    path = m.p("config.json")
    data = read_all(path)
    eq(os.stat(path).st_size, len(data), "stat size = bytes read")
    want = {"architectures": [{"llama": "LlamaForCausalLM",
                               "mistral": "MistralForCausalLM"}[arch]],
            "model_type": arch, "torch_dtype": torch_dtype(expects)}
    want.update({hf: config[k] for hf, k in HF_KEYS if k in config})
    # [v4] tied unless the model has an output layer of its own
    want["tie_word_embeddings"] = not any(e.name == "lm_head.weight" and not e.problem
                                          for e in expects)
    eq(json.loads(data), want, "config.json")


def absent(m):
    eq(ename(errno_of(os.stat, m.p("config.json"))), "ENOENT", "stat config.json")
    eq(ename(errno_of(os.open, m.p("config.json"), os.O_RDONLY)), "ENOENT", "open config.json")
    names = os.listdir(m.path)
    check("config.json" not in names, "listed: %r" % names)
    check({"tensors.json", "model.safetensors"} <= set(names), "listing %r" % names)
    with os.scandir(m.path) as it:  # readdirplus path: attributes of every entry
        for d in it:
            d.stat()


def many(suite):
    path = os.path.join(suite.tmp, "many.tbm")
    subprocess.run(["/usr/bin/python3", harness.GEN, "many", path, "--count", "100000"],
                   check=True, timeout=300)
    t0 = time.monotonic()
    m = harness.Mount(suite, path)
    with m:
        eq(m.start(), 0, "mount")
        t1 = time.monotonic()
        with open(m.p("model.safetensors"), "rb") as f:
            first = f.read(8)
            t2 = time.monotonic()
            (n,) = struct.unpack("<Q", first)
            f.seek(0)
            data = f.read()
            t3 = time.monotonic()
        meta, head, start = parse_safetensors(data)
        eq(len(head), 100000, "entries")
        eq(meta["omitted"], "[]", "omitted")
        e = models.expects_from_tbm(path, first=1)  # the tensors share one payload
        want = native_bytes(e[0])
        for name in ("blk.0.weight", "blk.54321.weight", "blk.99999.weight"):
            a, b = head[name]["data_offsets"]
            eq(data[start + a: start + b], want, "%s: bytes" % name)
        print("# 100,000 tensors: header %d bytes, mount %.2fs, first byte %.3fs, whole %d "
              "bytes read in %.2fs" % (n, t1 - t0, t2 - t1, len(data), t3 - t1))
        check(t2 - t1 < 5, "first byte after %.2fs" % (t2 - t1))


def spliced_when_stored(suite):
    """A range of a masked tensor is computed on its first read, which records whether
    masking left it as stored (pruned weights stored as zero, as the tools write them); such a
    range is spliced from the source on every later read. Where masking changes a byte (pruned
    weights stored non-zero, -0.0) the range is computed on every read, and never spliced."""
    with open("/proc/sys/fs/pipe-max-size") as f:
        spliced = 524288 + 4 * 4096 <= int(f.read())
    mk = gen.make_tensor
    cases = {
        "clean": [mk("clean", [1024, 1024], "bf16", (2, 4), 60),
                  mk("clean.fp32", [512, 1024], "fp32", (1, 4), 61)],
        # 4096 conflicts among 512 Ki pruned elements: every 64 KiB granule has some
        "dirty": [mk("dirty", [1024, 1024], "bf16", (2, 4), 62, conflicts=4096)],
    }
    for key, tensors in cases.items():
        src = os.path.join(suite.tmp, "splice-%s.tbm" % key)
        cont = gen.container(tensors, "llama")
        gen.write_file(src, cont.data)
        expects = models.container_expects(cont, tensors)
        m = harness.Mount(suite, src)
        with m:
            eq(m.start(), 0, "%s: mount" % key)
            path = m.p("model.safetensors")
            eq(settled_pipes(m.pid), 0, "%s: pipes before any read" % key)
            for k in range(3):
                data = direct_read(path)
                _, head, start = parse_safetensors(data)
                for e in expects:
                    a, b = head[e.name]["data_offsets"]
                    eq(data[start + a:start + b], native_bytes(e),
                       "%s: read %d: %s bytes" % (key, k + 1, e.name))
                eq(pipes_of(m.pid) > 0, spliced and key == "clean" and k > 0,
                   "%s: read %d spliced" % (key, k + 1))


def partial_dirty_granule(suite):
    """A 64 KiB granule whose bytes masking changes is never spliced, however it was read
    before: a first read that covers it only partly (from past its changed element) leaves
    it unknown, so reads from its start, then from inside it running on into granules known
    to need no masking, are computed; so is a read from inside it after a whole read of the
    file found it changed."""
    granule = 65536
    mk = gen.make_tensor
    tensors = [mk("one.dirty", [1024, 1024], "bf16", (2, 4), 63)]
    cont = gen.container(tensors, "llama")
    ex = models.container_expects(cont, tensors)[0]
    src = os.path.join(suite.tmp, "partial.tbm")
    gen.write_file(src, cont.data)
    m = harness.Mount(suite, src)
    with m:
        eq(m.start(), 0, "mount")
        _, head, start = parse_safetensors(read_all(m.p("model.safetensors")))
    start += head["one.dirty"]["data_offsets"][0]
    keep = keep_bits(ex.mask, ex.h["nm_m"], ex.h["num_weights"], mask_layout(ex.h))
    g = (start // granule + 2) * granule
    # a pruned element in the first 4 KiB of granule g, stored as bf16 1.0
    i = next(k for k in range((g + 1024 - start) // 2, ex.h["num_weights"]) if not keep[k])
    check(2 * i + start < g + 4096, "the changed element is in the granule's first 4 KiB")
    data = bytearray(cont.data)
    woff = bytes(data).find(ex.weights)
    check(woff > 0, "weights found in the source")
    struct.pack_into("<H", data, woff + 2 * i, 0x3F80)
    gen.write_file(src, bytes(data))
    want = native_bytes(ex)

    def read_at(path, off, n=192 << 10):
        fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
        try:
            buf = mmap.mmap(-1, n)
            got = os.preadv(fd, [buf], off)
        finally:
            os.close(fd)
        eq(got, n, "bytes read at %d" % off)
        eq(buf[:got], want[off - start:off - start + got], "the read at %d" % off)

    m = harness.Mount(suite, src)
    with m:
        eq(m.start(), 0, "mount")
        path = m.p("model.safetensors")
        read_at(path, g + 4096)  # granule g partly: its changed element not covered
        read_at(path, g)
        read_at(path, g)
        read_at(path, g + 2048)
    m = harness.Mount(suite, src)
    with m:
        eq(m.start(), 0, "mount")
        path = m.p("model.safetensors")
        direct_read(path)
        read_at(path, g + 2048)
        read_at(path, g)


def main(suite):
    global gen
    gen = harness.load_gen()
    src = os.path.join(suite.tmp, "bridges.tbm")
    tensors = bridge_tensors()
    config = {"hidden_size": 16, "num_heads": 2, "num_layers": 1, "rope_theta": 500000.0,
              "norm_eps": 1e-5, "unrelated": True}
    cont = gen.container(tensors, "llama", config)
    gen.write_file(src, cont.data)
    expects = models.container_expects(cont, tensors)
    m = suite.mount(src, name="bridges: mount")
    with m:
        got = {}

        def whole():
            got["st"] = check_safetensors(m, expects, src, "llama")
        suite.case("model.safetensors: every entry against the reference", whole, timeout=120)
        if "st" in got:
            data, head, start = got["st"]
            suite.case("model.safetensors: np.memmap of each tensor",
                       lambda: check_memmap(m, head, start, expects))
            suite.case("model.safetensors: random preads across tensors",
                       lambda: check_preads(m, data, head, start), timeout=120)
            suite.case("model.safetensors: torch.frombuffer of each tensor",
                       lambda: check_torch(m, head, start, expects))
        suite.case("tensors.json: every tensor's fields", lambda: check_tensors_json(m, expects))
        suite.case("config.json: llama mapping, keys the index lacks left out",
                   lambda: check_config(m, "llama", config, expects))
    for arch in ("mistral", "custom"):
        src = os.path.join(suite.tmp, "%s.tbm" % arch)
        small = models.sound_tensors(gen)[:4]
        cont = gen.container(small, arch, {"vocab_size": 32, "max_seq_len": 64})
        gen.write_file(src, cont.data)
        ex = models.container_expects(cont, small)
        m = suite.mount(src, name="%s: mount" % arch)
        with m:
            if arch == "mistral":
                suite.case("config.json: mistral", lambda: check_config(
                    m, "mistral", {"vocab_size": 32, "max_seq_len": 64}, ex))
            else:
                suite.case("config.json: absent for another architecture", lambda: absent(m))
            suite.case("model.safetensors: %s" % arch,
                       lambda: check_safetensors(m, ex, src, arch))
    src = os.path.join(suite.tmp, "empty.tbm")
    cont = gen.container([], "custom")
    gen.write_file(src, cont.data)
    m = suite.mount(src, name="empty: mount")
    with m:
        def empty():
            _, head, start = check_safetensors(m, [], src, "custom")
            eq(head, {}, "no entries")
            eq(read_json(m.p("tensors.json")), [], "tensors.json")
        suite.case("empty model: a header alone, an empty tensors.json", empty)
    suite.case("model.safetensors: ranges masking leaves as stored are spliced, others computed",
               lambda: spliced_when_stored(suite), timeout=120)
    suite.case("model.safetensors: a granule masking changes is never spliced, however read before",
               lambda: partial_dirty_granule(suite), timeout=120)
    suite.case("100,000 tiny tensors: header and time to first byte", lambda: many(suite),
               timeout=600)


if __name__ == "__main__":
    run("integration-bridges", main)
