#!/usr/bin/python3
"""Integration test of hostile input, one row per kind: SOURCEs that must be refused (exit 1, one
line naming the file, no mount, no daemon), and models that mount with the bad tensor marked
broken (problems in header.json, EIO on its unsafe views, everything else served) or warned;
numbers out of every range, overlapping and overflowing regions, masks past the rules, names
that collide or are huge, 100,000 tensors, hostile manifest files, and a SOURCE replaced,
truncated and extended while mounted. Rows already in test_problems.py are not repeated."""

import errno
import json
import os
import random
import struct

import numpy as np

import harness
from harness import (Mount, Skip, check, ename, eq, errno_of, expect_eio, mounted, pread, read_all,
                     read_json, run)
from tbmref import Expect, dir_names, encode_name, fnv1a64, parse_npy, to_f32_bits

gen = None
DATA_VIEWS = ("raw.tb", "weights.bin", "mask.bin", "dense.f32", "dense.npy")


def unmasked(t):
    return to_f32_bits(t.header["precision"], t.weights).astype("<u4").tobytes()


def vm_kib(pid, field):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise harness.Failure("no %s for pid %d" % (field, pid))


def tensor_dir(m, dirname, *parts):
    return m.p("tensors", dirname, *parts)


def check_broken(m, dirname, eio=(), served=None, fields=None):
    """dirname's header.json lists problems; the eio views fail with EIO; the served views
    read exactly the given bytes; header.json fields hold the given values."""
    hj = read_json(tensor_dir(m, dirname, "header.json"))
    p = hj.get("problems")
    check(isinstance(p, list) and p and all(isinstance(x, str) for x in p),
          "problems: %r" % (p,))
    for k, v in (fields or {}).items():
        eq(hj.get(k, "<missing>"), v, "header.json %s" % k)
    for view in eio:
        expect_eio(tensor_dir(m, dirname, view), view)
    for view, want in (served or {}).items():
        eq(read_all(tensor_dir(m, dirname, view)), want, view)
    return hj


def check_warned(m, dirname, e, fields=None, npy_shape=None):
    """dirname has warnings but no problem and serves every view of Expect e exactly."""
    hj = read_json(tensor_dir(m, dirname, "header.json"))
    eq(hj.get("problems"), [], "problems")
    w = hj.get("warnings")
    check(isinstance(w, list) and w, "warnings: %r" % (w,))
    for k, v in (fields or {}).items():
        eq(hj.get(k, "<missing>"), v, "header.json %s" % k)
    eq(read_all(tensor_dir(m, dirname, "raw.tb")), e.raw, "raw.tb")
    eq(read_all(tensor_dir(m, dirname, "weights.bin")), e.weights, "weights.bin")
    eq(read_all(tensor_dir(m, dirname, "dense.f32")), e.dense, "dense.f32")
    header, _, payload = parse_npy(read_all(tensor_dir(m, dirname, "dense.npy")))
    eq(payload, e.dense, "dense.npy payload")
    if npy_shape is not None:
        eq(header.get("shape"), npy_shape, "dense.npy shape")
    return hj


def still_serving(m, dirname, e):
    check(m.alive(), "daemon gone")
    eq(read_all(tensor_dir(m, dirname, "weights.bin")), e.weights, "sound tensor weights.bin")
    eq(read_all(tensor_dir(m, dirname, "dense.f32")), e.dense, "sound tensor dense.f32")


# ---- refused SOURCEs -------------------------------------------------------------------------

def refused(suite, label, src):
    def go():
        m = Mount(suite, src)
        try:
            rc = m.start()
            eq(rc, 1, "exit code (stderr %r)" % m.err)
            lines = [x for x in m.err.splitlines() if x.strip()]
            eq(len(lines), 1, "stderr lines (%r)" % m.err)
            check(src in lines[0] or os.path.realpath(src) in lines[0],
                  "error does not name %s: %r" % (src, lines[0]))
            check(len(lines[0].split(src, 1)[-1].strip(" :")) > 0, "no reason: %r" % lines[0])
            check(not mounted(m.path), "mount left behind")
            check(m.find_daemon() is None, "daemon left running")
        finally:
            m.stop()

    suite.case("refused: %s" % label, go)


def container_with_index(t, index):
    """The container bytes of tensor t with index (bytes) and its true length word."""
    return gen.container([t], index_bytes=index).data


def refused_sources(suite, tmp):
    t = gen.make_tensor("t", [4, 8], "fp32", (2, 4), 1)
    good = gen.container([t])
    entry = json.dumps(good.entries[0])
    size = len(good.data)
    deep = 10000
    nested_obj = '{"a":' * deep + "1" + "}" * deep
    nested_arr = "[" * deep + "]" * deep
    files = {
        # The length word claims an index that would overlap the length word itself.
        "index length 1 byte into the length word": gen.container([t], index_len=size - 3).data,
        "index length 3 bytes into the length word": gen.container([t], index_len=size - 1).data,
        "index length covering the length word": gen.container([t], index_len=size).data,
        "index length = whole file before the length word": gen.container(
            [t], index_len=size - 4).data,
        "4-byte file, index length 1": struct.pack("<I", 1),
        "4-byte file, index length 4": struct.pack("<I", 4),
        "JSON index is a number": container_with_index(t, b"42"),
        "JSON index is a float in exponent form": container_with_index(t, b"1e3"),
        "JSON index is null": container_with_index(t, b"null"),
        "JSON index is true": container_with_index(t, b"true"),
        "JSON index nested 10,000 objects deep inside config": container_with_index(
            t, ('{"architecture": "x", "config": %s, "tensors": [%s]}' % (
                nested_obj, entry)).encode()),
        "JSON index nested 10,000 arrays deep inside config": container_with_index(
            t, ('{"architecture": "x", "config": %s, "tensors": [%s]}' % (
                nested_arr, entry)).encode()),
        "JSON index with a raw NUL byte in a name": container_with_index(
            t, b'{"tensors": [%s]}' % entry.encode().replace(b'"name": "t"',
                                                             b'"name": "t\x00"')),
        "JSON index with invalid UTF-8 in a name": container_with_index(
            t, b'{"tensors": [%s]}' % entry.encode().replace(b'"name": "t"',
                                                             b'"name": "\xff"')),
    }
    for i, (label, data) in enumerate(files.items()):
        p = os.path.join(tmp, "refused-%02d.tbm" % i)
        gen.write_file(p, data)
        refused(suite, label, p)

    fifo = os.path.join(tmp, "fifo.tbm")
    os.mkfifo(fifo)
    refused(suite, "SOURCE is a FIFO", fifo)
    fifo_tb = os.path.join(tmp, "fifo.tb")
    os.mkfifo(fifo_tb)
    refused(suite, "SOURCE is a FIFO named .tb", fifo_tb)
    refused(suite, "SOURCE is a character device (/dev/null)", "/dev/null")

    manifests = {
        "manifest.json nested 10,000 objects deep inside config":
            ('{"architecture": "x", "config": %s, "tensors": []}' % nested_obj).encode(),
        "manifest.json is a number": b"42",
        "manifest.json is null": b"null",
    }
    for i, (label, data) in enumerate(manifests.items()):
        d = os.path.join(tmp, "refused-manifest-%d" % i)
        gen.write_manifest(d, [t], manifest_bytes=data)
        refused(suite, label, d)
    d = os.path.join(tmp, "refused-manifest-fifo")
    os.mkdir(d)
    os.mkfifo(os.path.join(d, "manifest.json"))
    refused(suite, "manifest.json is a FIFO", d)
    d = os.path.join(tmp, "refused-manifest-dir")
    os.makedirs(os.path.join(d, "manifest.json"))
    refused(suite, "manifest.json is a directory", d)


# ---- numbers out of range in the index -------------------------------------------------------

NUMBERS = [("negative", "-1"), ("fractional", "1.5"), ("exponent form", "1e3"),
           ("2^64", str(1 << 64)), ("2^70", str(1 << 70))]
NUMBER_FIELDS = ("offset", "shape", "num_weights", "nm_n", "nm_m", "num_mask_bytes")


def with_raw_values(tensors, raws, **kw):
    """A container whose index holds raws[k] (JSON text) wherever a tensor's index override
    says "@RAW<k>@"; the blobs are laid out as gen.container lays them."""
    cont = gen.container(tensors, **kw)
    text = cont.index_bytes.decode("utf-8")
    for k, raw in enumerate(raws):
        text = text.replace('"@RAW%d@"' % k, raw)
    return gen.container(tensors, index_bytes=text.encode("utf-8"), **kw)


def numbers(suite, tmp):
    mk = gen.make_tensor
    tensors = [mk("num.sound", [4, 8], "fp32", (2, 4), 1)]
    rows = []
    raws = []
    for field in NUMBER_FIELDS:
        cases = list(NUMBERS)
        if field == "shape":
            cases += [("a string", '"4x8"'), ("product past 2^64", "[4294967296, 4294967296]")]
        for label, raw in cases:
            k = len(raws)
            if field == "shape" and not raw.startswith(("[", '"')):
                raw = "[%s, 8]" % raw
            raws.append(raw)
            name = "num.%s.%s" % (field, label.replace(" ", "_"))
            tensors.append(mk(name, [4, 8], "fp32", (2, 4), 10 + k,
                              index={field: "@RAW%d@" % k}))
            rows.append((field, label, raw, tensors[-1]))
    cont = with_raw_values(tensors, raws)
    path = os.path.join(tmp, "numbers.tbm")
    gen.write_file(path, cont.data)
    expects = {t.name: Expect(t.name, t.name.encode(), t.shape, t.header, cont.data, off,
                              cont.index_start)
               for t, off in zip(tensors, cont.offsets)}
    m = suite.mount(path, name="numbers: mounts")
    with m:
        for field, label, raw, t in rows:
            e = expects[t.name]
            what = "numbers: %s %s (%s)" % (field, label, raw)
            if field == "offset":
                suite.case(what + " -> problem, views EIO", lambda t=t: check_broken(
                    m, t.name, eio=DATA_VIEWS, fields={"magic": None}))
            elif field == "shape":
                suite.case(what + " -> warning, 1-D dense.npy", lambda t=t, e=e: check_warned(
                    m, t.name, e, npy_shape=(t.header["num_weights"],)))
            else:
                hdr = {k: t.header[k] for k in ("num_weights", "nm_n", "nm_m", "num_mask_bytes")}
                suite.case(what + " -> warning, the header wins", lambda t=t, e=e, hdr=hdr:
                           check_warned(m, t.name, e, fields=hdr))
        suite.case("numbers: the sound tensor is still served", lambda: still_serving(
            m, "num.sound", expects["num.sound"]))


# ---- regions and header fields ---------------------------------------------------------------

def place(tensors, inside=None):
    """Offsets for tensors back to back, except inside: {i: (j, delta)} puts blob i at blob j's
    offset + delta without moving the rest."""
    offsets, at = [], 0
    for i, t in enumerate(tensors):
        if inside and i in inside:
            j, delta = inside[i]
            offsets.append(offsets[j] + delta)
            continue
        offsets.append(at)
        at += len(gen.blob(t))
    return offsets


def set_index_offset(t, off):
    t.index["offset"] = off
    t.extra["index_overrides"]["offset"] = off


def layout(suite, tmp):
    mk = gen.make_tensor
    sound = mk("sound", [8, 8], "fp32", (2, 4), 1)
    outer = mk("overlap.outer", [64, 64], "fp32", (2, 4), 2)
    inner = mk("overlap.inner", [4, 8], "fp32", (2, 4), 3)
    same_a = mk("same_offset.a", [4, 8], "fp16", (2, 4), 4)
    same_b = mk("same_offset.b", [4, 8], "fp16", (2, 4), 5)
    ovf16 = mk("overflow.fp16_2^63", [4, 8], "fp16", (0, 0), 6, header={"num_weights": 1 << 63},
               index={"num_weights": 1 << 63})
    ovf64 = mk("overflow.fp64_2^61", [4, 8], "fp64", (0, 0), 7, header={"num_weights": 1 << 61},
               index={"num_weights": 1 << 61})
    ovf64e = mk("overflow.fp64_2^61-1", [4, 8], "fp64", (0, 0), 8,
                header={"num_weights": (1 << 61) - 1}, index={"num_weights": (1 << 61) - 1})
    ovfwo = mk("overflow.weights_offset", [4, 8], "fp32", (2, 4), 9,
               header={"weights_offset": (1 << 64) - 4096})
    ovfmo = mk("overflow.masks_offset", [4, 8], "fp32", (2, 4), 10,
               header={"masks_offset": (1 << 64) - 1})
    w_hdr = mk("region.weights_in_header", [4, 8], "fp32", (2, 4), 11,
               header={"weights_offset": 100})
    m_w = mk("region.mask_in_weights", [4, 8], "fp32", (2, 4), 12,
             header={"masks_offset": 4096 + 8})
    junk_mask = b"\x05\x0a\xff\x00\x33\xcc\x0f\xf0"
    m0 = mk("mask.m0_with_mask_bytes", [4, 8], "fp32", (0, 0), 13,
            header={"num_mask_bytes": len(junk_mask)}, index={"num_mask_bytes": len(junk_mask)},
            tail=junk_mask)
    m33 = mk("mask.m33", [4, 33], "fp32", (2, 33), 14)
    n33 = mk("mask.n33_m32", [2, 32], "fp16", (33, 32), 15)
    mmax = mk("mask.m_2^32-1", [4, 8], "fp32", (2, 4), 16, prune=False,
              header={"nm_m": 0xFFFFFFFF}, index={"nm_m": 0xFFFFFFFF})
    nmax = mk("mask.n_2^32-1", [4, 8], "bf16", (2, 4), 17, prune=False,
              header={"nm_n": 0xFFFFFFFF}, index={"nm_n": 0xFFFFFFFF})
    p4 = mk("precision.4", [4, 8], 4, (2, 4), 18)
    p255 = mk("precision.255", [4, 8], 255, (2, 4), 19)
    tensors = [sound, outer, inner, same_a, same_b, ovf16, ovf64, ovf64e, ovfwo, ovfmo, w_hdr,
               m_w, m0, m33, n33, mmax, nmax, p4, p255]
    offsets = place(tensors, inside={2: (1, 4096 + 1024)})
    set_index_offset(same_b, offsets[3])
    cont = gen.container(tensors, offsets=offsets)
    path = os.path.join(tmp, "layout.tbm")
    gen.write_file(path, cont.data)
    at = dict(zip([t.name for t in tensors], offsets))

    def blob_bytes(t):
        return cont.data[at[t.name]: at[t.name] + len(gen.blob(t))]

    def masked_views(t):
        """The views of a tensor whose regions are sound but whose mask must not be applied."""
        return {"raw.tb": blob_bytes(t), "weights.bin": t.weights, "mask.bin": t.mask,
                "dense.f32": unmasked(t)}

    e_sound = Expect("sound", b"sound", sound.shape, sound.header, cont.data, 0, cont.index_start)
    m = suite.mount(path, name="layout: mounts")
    with m:
        def overlap(t, other):
            hj = check_broken(m, t.name, eio=DATA_VIEWS)
            check(any(other.name in p for p in hj["problems"]),
                  "no problem names %r: %r" % (other.name, hj["problems"]))

        def inner_sound():
            e = Expect(inner.name, inner.name.encode(), inner.shape, inner.header, cont.data,
                       at[inner.name], cont.index_start)
            eq(read_json(tensor_dir(m, inner.name, "header.json"))["problems"], [], "problems")
            eq(read_all(tensor_dir(m, inner.name, "raw.tb")), blob_bytes(inner), "raw.tb")
            eq(read_all(tensor_dir(m, inner.name, "dense.f32")), e.dense, "dense.f32")

        # [v2] the blob that runs into another's header is the broken one
        suite.case("layout: offset inside another blob: the inner blob stays sound", inner_sound)
        suite.case("layout: offset inside another blob: problem for the outer blob",
                   lambda: overlap(outer, inner))
        suite.case("layout: two entries at one offset: problem for the first",
                   lambda: overlap(same_a, same_b))
        suite.case("layout: two entries at one offset: problem for the second",
                   lambda: overlap(same_b, same_a))
        eio_w = ("raw.tb", "weights.bin", "dense.f32", "dense.npy")
        for t, what in ((ovf16, "fp16 num_weights 2^63: num_weights x 2 overflows 64 bits"),
                        (ovf64, "fp64 num_weights 2^61: num_weights x 8 overflows 64 bits"),
                        (ovf64e, "fp64 num_weights 2^61-1: offset + bytes overflows 64 bits"),
                        (ovfwo, "weights_offset 2^64-4096: offset + bytes overflows 64 bits")):
            suite.case("layout: %s -> problem, EIO" % what, lambda t=t: check_broken(
                m, t.name, eio=eio_w, fields={"num_weights": t.header["num_weights"]}))
        suite.case("layout: masks_offset 2^64-1 -> problem, mask EIO, weights served",
                   lambda: check_broken(m, ovfmo.name, eio=("raw.tb", "mask.bin", "dense.f32",
                                                             "dense.npy"),
                                        served={"weights.bin": ovfmo.weights}))
        suite.case("layout: weights region inside the header -> problem, EIO, mask served",
                   lambda: check_broken(m, w_hdr.name, eio=eio_w,
                                        served={"mask.bin": w_hdr.mask}))
        suite.case("layout: mask region overlapping the weights -> problem, EIO, weights served",
                   lambda: check_broken(m, m_w.name, eio=("raw.tb", "mask.bin", "dense.f32",
                                                           "dense.npy"),
                                        served={"weights.bin": m_w.weights}))

        def m0_row():
            e = Expect(m0.name, m0.name.encode(), m0.shape, m0.header, cont.data, at[m0.name],
                       cont.index_start)
            hj = check_warned(m, m0.name, e, fields={"kept": 32, "num_mask_bytes": 8})
            eq(e.dense, unmasked(m0), "reference: every element kept")
            eq(read_all(tensor_dir(m, m0.name, "mask.bin")), junk_mask, "mask.bin")
            eq(hj.get("mask_applied"), False, "mask_applied")

        suite.case("layout: M = 0 with num_mask_bytes 8 -> warning only, every element kept",
                   m0_row)
        for t, what in ((m33, "M = 33"), (n33, "N = 33 > M = 32"), (mmax, "M = 2^32-1"),
                        (nmax, "N = 2^32-1 > M = 4")):
            suite.case("layout: %s -> problem, stored weights served unmasked" % what,
                       lambda t=t: check_broken(m, t.name, served=masked_views(t),
                                                fields={"nm_m": t.header["nm_m"],
                                                        "nm_n": t.header["nm_n"]}))
        for t in (p4, p255):
            suite.case("layout: unknown precision %d -> problem, every data view EIO"
                       % t.header["precision"], lambda t=t: check_broken(
                           m, t.name, eio=DATA_VIEWS,
                           fields={"precision": t.header["precision"], "dtype": None}))
        suite.case("layout: the sound tensor is still served",
                   lambda: still_serving(m, "sound", e_sound))

        def sound_only():
            mj = read_json(m.p("model.json"))
            eq(mj.get("tensors_with_problems"), len(tensors) - 3, "tensors_with_problems")

        suite.case("layout: model.json counts every row but the sound, inner and M = 0 ones as "
                   "problems", sound_only)
    index_adjacent(suite, tmp)


def index_adjacent(suite, tmp):
    """Regions that run into the index: the bad tensor is the last blob before it."""
    mk = gen.make_tensor
    sound = mk("sound", [4, 8], "fp16", (2, 4), 20)
    w = mk("region.weights_into_index", [4, 8], "fp32", (0, 0), 21,
           header={"num_weights": 34}, index={"num_weights": 34})
    mt = mk("region.mask_into_index", [4, 8], "fp32", (2, 4), 22)
    for t, what, eio, served in (
            (w, "weights region running 8 bytes into the index",
             ("raw.tb", "weights.bin", "dense.f32", "dense.npy"), {}),
            (mt, "mask region running 8 bytes into the index",
             ("raw.tb", "mask.bin", "dense.f32", "dense.npy"), {"weights.bin": mt.weights})):
        cont = gen.container([sound, t])
        data = bytearray(cont.data)
        if t is mt:
            # Only the header moves the mask: the bytes stay where they are, so the declared
            # region ends 8 bytes past the blob data.
            struct.pack_into("<Q", data, cont.offsets[1] + 40, t.header["masks_offset"] + 8)
        path = os.path.join(tmp, "%s.tbm" % t.name)
        gen.write_file(path, bytes(data))
        e = Expect("sound", b"sound", sound.shape, sound.header, cont.data, 0, cont.index_start)
        m = suite.mount(path, name="index: %s: mounts" % what)
        with m:
            suite.case("index: %s -> problem, EIO" % what, lambda t=t, eio=eio, served=served:
                       check_broken(m, t.name, eio=eio, served=served))
            suite.case("index: %s: index.json and the sound tensor still served" % what,
                       lambda cont=cont, e=e: (
                           eq(read_all(m.p("index.json")), cont.index_bytes, "index.json"),
                           still_serving(m, "sound", e)))


# ---- names -----------------------------------------------------------------------------------

def fnv_top32_collision(prefix):
    """Two 8-letter suffixes whose names prefix + suffix share the top 32 bits of their FNV-1a
    64 hash (the ~hash of a cut directory name): a birthday search over 2^18 random suffixes."""
    n, size = 1 << 18, 8
    suffix = np.random.default_rng(0x7B).integers(ord("a"), ord("z") + 1, size=(n, size),
                                                  dtype=np.uint8)
    h = np.full(n, fnv1a64(prefix), dtype=np.uint64)
    for k in range(size):
        h ^= suffix[:, k].astype(np.uint64)
        h *= np.uint64(0x100000001B3)
    top = h >> np.uint64(32)
    order = np.argsort(top, kind="stable")
    same = np.flatnonzero((top[order][1:] == top[order][:-1]) &
                          (h[order][1:] != h[order][:-1]))
    check(len(same) > 0, "no FNV-1a collision among %d suffixes" % n)
    a, b = order[same[0]], order[same[0] + 1]
    return bytes(suffix[a]).decode(), bytes(suffix[b]).decode()


def names(suite, tmp):
    mk = gen.make_tensor
    plain = ["a/b", "a%2Fb", "x", "x", "x~2", "a\x00b"]
    tensors = [mk(n, [4, 4], "fp32", (2, 4), 30 + i) for i, n in enumerate(plain)]
    noname = mk("noname", [4, 4], "fp32", (2, 4), 40, index={"name": gen.DELETE})
    tensors.append(noname)
    cont = gen.container(tensors)
    not_objects = [1, None, "x", []]
    index = {"architecture": "x", "config": {}, "tensors": cont.entries + not_objects}
    cont = gen.container(tensors, index_obj=index)
    path = os.path.join(tmp, "names.tbm")
    gen.write_file(path, cont.data)
    true_names = plain + [""] * (1 + len(not_objects))
    dirs = dir_names(true_names)
    m = suite.mount(path, name="names: mounts")
    with m:
        suite.case("names: one directory per entry: a%2Fb, a%252Fb, x, x~2, x~2~2, a%00b, "
                   "%, %~2...", lambda: eq(sorted(os.listdir(m.p("tensors").encode())),
                                           sorted(dirs), "tensors/"))
        for t, d in zip(tensors[:len(plain)], dirs):
            def named(t=t, d=d):
                hj = read_json(tensor_dir(m, d, "header.json"))
                eq(hj.get("name"), t.name, "name")
                eq(hj.get("dir"), d.decode(), "dir")
                eq(hj.get("problems"), [], "problems")
                eq(read_all(tensor_dir(m, d, "weights.bin")), t.weights, "weights.bin")

            suite.case("names: %r -> %s, true name in header.json, its own bytes" % (
                t.name, d.decode()), named)
        nd = dirs[len(plain)]
        suite.case("names: entry without \"name\" -> %s, problem, its blob still served"
                   % nd.decode(), lambda: (
                       eq(check_broken(m, nd, served={"weights.bin": noname.weights})["name"],
                          "", "name")))
        for v, d in zip(not_objects, dirs[len(plain) + 1:]):
            suite.case("names: entry %s (not an object) -> %s, problem, views EIO" % (
                json.dumps(v), d.decode()), lambda d=d: check_broken(m, d, eio=DATA_VIEWS))
        suite.case("names: model.json counts every entry", lambda: eq(
            read_json(m.p("model.json")).get("tensor_count"), len(true_names), "tensor_count"))
    nameless_crowd(suite, tmp)
    bare_dot_tb(suite, tmp)
    collision(suite, tmp)
    huge(suite, tmp)
    nested_entry(suite, tmp)


def nameless_crowd(suite, tmp):
    count = 20000
    t = gen.make_tensor("t", [4], "fp32", (0, 0), 45)
    path = os.path.join(tmp, "crowd.tbm")
    gen.write_file(path, gen.container([t], index_obj={"tensors": [1] * count}).data)
    m = suite.mount(path, name="crowd: 20,000 entries without a name mount")
    with m:
        suite.case("crowd: directories %, %~2 ... %~20000", lambda: eq(
            set(os.listdir(m.p("tensors"))), {"%"} | {"%%~%d" % k for k in range(2, count + 1)},
            "tensors/"))
        suite.case("crowd: %~20000 is the last entry, with a problem", lambda: check_broken(
            m, "%%~%d" % count, eio=DATA_VIEWS))


def bare_dot_tb(suite, tmp):
    t = gen.make_tensor("t", [4, 8], "fp32", (2, 4), 46)
    d = os.path.join(tmp, "dot")
    os.mkdir(d)
    path = os.path.join(d, ".tb")
    gen.write_tb(path, t)
    m = suite.mount(path, name="bare .tb named \".tb\": mounts")
    with m:
        def empty_name():
            eq(os.listdir(m.p("tensors")), ["%"], "tensors/")
            hj = read_json(m.p("tensors", "%", "header.json"))
            eq((hj.get("name"), hj.get("problems")), ("", []), "name, problems")
            eq(read_all(m.p("tensors", "%", "raw.tb")), gen.blob(t), "raw.tb")

        suite.case("bare .tb named \".tb\": the empty name -> %, served", empty_name)


def collision(suite, tmp):
    prefix = "c" * 300
    s1, s2 = fnv_top32_collision(prefix.encode())
    t1 = gen.make_tensor(prefix + s1, [4, 4], "fp32", (2, 4), 50)
    t2 = gen.make_tensor(prefix + s2, [4, 4], "fp32", (2, 4), 51)
    path = os.path.join(tmp, "collide.tbm")
    gen.write_file(path, gen.container([t1, t2]).data)
    d1 = encode_name(t1.name)
    m = suite.mount(path, name="collision: mounts")
    with m:
        def distinct():
            eq(encode_name(t2.name), d1, "reference: both names cut and hash alike")
            got = os.listdir(m.p("tensors").encode())
            eq(len(got), 2, "directories (%r)" % got)
            check(d1 in got, "the first name's directory %r is missing" % d1[-16:])
            d2 = [d for d in got if d != d1][0]
            check(len(d2) <= 255, "second directory is %d bytes" % len(d2))
            check(d2.endswith(b"~2"), "second directory has no ~2 suffix: %r" % d2[-16:])
            for t, d in ((t1, d1), (t2, d2)):
                hj = read_json(tensor_dir(m, d, "header.json"))
                eq(hj.get("name"), t.name, "name")
                eq(read_all(tensor_dir(m, d, "weights.bin")), t.weights, "weights.bin")

        suite.case("collision: two 308-byte names with the same cut and ~hash (%s, %s) get two "
                   "directories <= 255 bytes" % (s1, s2), distinct)


def huge(suite, tmp):
    mk = gen.make_tensor
    ascii_name = "n" * (1 << 20)
    utf8_name = "\u00e9" * (1 << 19)
    arch = "A" * (1 << 20)
    tensors = [mk(ascii_name, [4, 8], "fp32", (2, 4), 60), mk(utf8_name, [8], "bf16", (2, 4), 61),
               mk("small", [4], "fp32", (0, 0), 62)]
    cont = gen.container(tensors, architecture=arch)
    path = os.path.join(tmp, "huge.tbm")
    gen.write_file(path, cont.data)
    dirs = dir_names([t.name for t in tensors])
    m = suite.mount(path, name="huge strings: mounts")
    with m:
        suite.case("huge strings: tensors/ lists the cut names", lambda: eq(
            sorted(os.listdir(m.p("tensors").encode())), sorted(dirs), "tensors/"))
        for t, d in zip(tensors[:2], dirs):
            def one(t=t, d=d):
                check(len(d) <= 255 and b"~" in d, "reference dir %r" % d[-16:])
                hj = read_json(tensor_dir(m, d, "header.json"))
                eq(hj.get("name"), t.name, "name")
                eq(hj.get("dir"), d.decode(), "dir")
                eq(hj.get("problems"), [], "problems")
                e = Expect(t.name, d, t.shape, t.header, cont.data, cont.offsets[tensors.index(t)],
                           cont.index_start)
                eq(read_all(tensor_dir(m, d, "dense.f32")), e.dense, "dense.f32")

            suite.case("huge strings: 1 MiB %s name -> %s, true name in header.json" % (
                "ASCII" if t is tensors[0] else "UTF-8", d[-9:].decode()), one)
        suite.case("huge strings: 1 MiB architecture in model.json", lambda: eq(
            read_json(m.p("model.json")).get("architecture"), arch, "architecture"))
        suite.case("huge strings: index.json as stored", lambda: eq(
            read_all(m.p("index.json")), cont.index_bytes, "index.json"))

        def bounded():
            # the sanitizers' quarantine holds freed memory on purpose
            if os.environ.get("TBMFS_SANITIZED"):
                raise Skip("sanitized build: resident memory says nothing about leaks here")
            p = tensor_dir(m, dirs[0], "header.json")
            read_all(p)
            before = vm_kib(m.pid, "VmRSS")
            for _ in range(20):
                read_all(p)
            after = vm_kib(m.pid, "VmRSS")
            check(after - before < 8 << 10, "VmRSS grew %d KiB over 20 reads of a 1 MiB "
                  "header.json (%d -> %d KiB)" % (after - before, before, after))

        suite.case("huge strings: 20 reads of the 1 MiB header.json leave VmRSS within 8 MiB",
                   bounded)


def nested_entry(suite, tmp):
    t = gen.make_tensor("nested", [4, 8], "fp32", (2, 4), 70)
    deep = 1
    for _ in range(40):
        deep = [deep]
    t.index["extra"] = deep
    cont = gen.container([t])
    path = os.path.join(tmp, "nested.tbm")
    gen.write_file(path, cont.data)
    m = suite.mount(path, name="nested entry: mounts")
    with m:
        suite.case("nested entry: an entry nested 40 deep (under the index limit) is "
                   "header.json's \"index\"", lambda: eq(
                       read_json(m.p("tensors", "nested", "header.json")).get("index"),
                       cont.entries[0], "index"))


# ---- 100,000 tensors -------------------------------------------------------------------------

def many(suite, tmp):
    count = 100000
    path = os.path.join(tmp, "many.tbm")
    m = Mount(suite, path)
    base = gen.make_tensor("blk", [16], "fp16", (2, 4), 0)
    e = Expect("blk", b"blk", [16], base.header, gen.blob(base), 0, len(gen.blob(base)))
    state = {}

    def mount_many():
        eq(gen.main(["many", path, "--count", str(count)]), 0, "gen_model.py many")
        eq(m.start(), 0, "exit code (%s)" % m.err.strip()[:300])
        check(mounted(m.path), "not mounted")
        state["up"] = True

    suite.case("many: 100,000 tensors mount", mount_many, timeout=120)
    if not state:
        m.stop()
        return
    with m:
        suite.case("many: tensors/ lists 100,000 directories", lambda: eq(
            set(os.listdir(m.p("tensors"))), {"blk.%d.weight" % i for i in range(count)},
            "tensors/"), timeout=60)
        rnd = random.Random(100000)
        for i in (rnd.randrange(count), count - 1):
            def one(i=i):
                d = "blk.%d.weight" % i
                eq(read_json(m.p("tensors", d, "header.json")).get("name"), d, "name")
                eq(read_all(m.p("tensors", d, "dense.f32")), e.dense, "dense.f32")

            suite.case("many: tensor %d's dense.f32" % i, one)
    os.remove(path)


# ---- manifest files --------------------------------------------------------------------------

def manifest_files(suite, tmp):
    """Manifest entries test_problems.py does not cover: each kind with its expected outcome
    (True: served as a sound tensor)."""
    kinds = [("regular", True), ("symlink_dangling", False), ("symlink_loop", False),
             ("symlink_to_dev_null", False), ("symlink_to_inner_dir", False),
             ("symlink_absolute_inside", True), ("file_dot", False), ("file_empty", False),
             ("file_number", False), ("file_with_nul", False), ("file_manifest_json", False),
             ("file_trailing_slash", False)]
    tensors = [gen.make_tensor("f.%s" % k, [4, 8], "fp32", (2, 4), 80 + i)
               for i, (k, _) in enumerate(kinds)]
    d = os.path.join(tmp, "hostile-manifest")
    gen.write_manifest(d, tensors)
    os.mkdir(os.path.join(d, "real"))
    mpath = os.path.join(d, "manifest.json")
    man = json.loads(read_all(mpath))
    for i, (k, _) in enumerate(kinds):
        f = os.path.join(d, "t%d.tb" % i)
        inside = os.path.join(d, "real", "t%d.tb" % i)
        links = {"symlink_dangling": "nowhere.tb", "symlink_loop": "t%d.tb" % i,
                 "symlink_to_dev_null": "/dev/null", "symlink_to_inner_dir": "real",
                 "symlink_absolute_inside": inside}
        files = {"file_dot": ".", "file_empty": "", "file_number": 7,
                 "file_with_nul": "t%d.tb\u0000x" % i, "file_manifest_json": "manifest.json",
                 "file_trailing_slash": "t%d.tb/" % i}
        if k == "symlink_absolute_inside":
            os.rename(f, inside)
        elif k in links:
            os.remove(f)
        if k in links:
            os.symlink(links[k], f)
        man["tensors"][i]["file"] = files.get(k, man["tensors"][i]["file"])
    gen.write_file(mpath, json.dumps(man).encode())
    m = suite.mount(d, name="manifest: mounts despite hostile files")
    with m:
        for (k, ok), t in zip(kinds, tensors):
            if ok:
                suite.case("manifest: %s -> served" % k, lambda t=t: (
                    eq(read_json(m.p("tensors", t.name, "header.json")).get("problems"), [],
                       "problems"),
                    eq(read_all(m.p("tensors", t.name, "raw.tb")), gen.blob(t), "raw.tb")))
            else:
                suite.case("manifest: %s -> problem, views EIO" % k, lambda t=t: check_broken(
                    m, t.name, eio=DATA_VIEWS))
        suite.case("manifest: index.json is manifest.json as stored", lambda: eq(
            read_all(m.p("index.json")), read_all(mpath), "index.json"))


# ---- SOURCE changed while mounted ------------------------------------------------------------

def container_pair(seeds, arch):
    mk = gen.make_tensor
    ts = [mk("first", [16, 16], "fp32", (2, 4), seeds[0]),
          mk("second", [64, 64], "fp32", (2, 4), seeds[1])]
    cont = gen.container(ts, architecture=arch)
    return ts, cont


def check_views(m, e):
    for view, want in (("raw.tb", e.raw), ("weights.bin", e.weights), ("mask.bin", e.mask),
                       ("dense.f32", e.dense)):
        eq(read_all(tensor_dir(m, e.dir, view)), want, "%s %s" % (e.name, view))


def replaced(suite, tmp):
    ts, old = container_pair((90, 91), "old")
    _, new = container_pair((92, 93), "new")
    eq(len(new.data), len(old.data), "reference: same layout")
    path = os.path.join(tmp, "swap.tbm")
    gen.write_file(path, old.data)
    old_e = [Expect(t.name, t.name.encode(), t.shape, t.header, old.data, off, old.index_start)
             for t, off in zip(ts, old.offsets)]
    m = suite.mount(path, name="rename: container mounts")
    with m:
        gen.write_file(path + ".new", new.data)
        os.replace(path + ".new", path)

        def container():
            eq(read_all(path), new.data, "reference: the new file is in place")
            eq(read_all(m.p("index.json")), old.index_bytes, "index.json")
            eq(read_json(m.p("model.json")).get("architecture"), "old", "architecture")
            for e in old_e:
                check_views(m, e)

        suite.case("rename: container replaced by rename -> the old bytes are served",
                   container)

    t_old = gen.make_tensor("bare", [8, 8], "fp16", (2, 4), 94)
    t_new = gen.make_tensor("bare", [8, 8], "fp16", (2, 4), 95)
    path = os.path.join(tmp, "bare.tb")
    gen.write_tb(path, t_old)
    e = Expect("bare", b"bare", [64], t_old.header, gen.blob(t_old), 0, len(gen.blob(t_old)))
    m = suite.mount(path, name="rename: bare .tb mounts")
    with m:
        gen.write_tb(path + ".new", t_new)
        os.replace(path + ".new", path)
        suite.case("rename: bare .tb replaced by rename -> the old bytes are served",
                   lambda: check_views(m, e))

    d = os.path.join(tmp, "swapdir")
    man_old = gen.write_manifest(d, ts, architecture="old")
    t0_new = gen.make_tensor("first", [16, 16], "fp32", (2, 4), 96)
    blobs = [gen.blob(t) for t in ts]
    es = [Expect(t.name, t.name.encode(), t.shape, t.header, b, 0, len(b))
          for t, b in zip(ts, blobs)]
    m = suite.mount(d, name="rename: manifest directory mounts")
    with m:
        gen.write_tb(os.path.join(d, "new.tb"), t0_new)
        os.replace(os.path.join(d, "new.tb"), os.path.join(d, "t0.tb"))
        gen.write_file(os.path.join(d, "manifest.new"), man_old.replace(b'"old"', b'"new"'))
        os.replace(os.path.join(d, "manifest.new"), os.path.join(d, "manifest.json"))

        def manifest():
            eq(read_all(os.path.join(d, "t0.tb")), gen.blob(t0_new), "reference: new t0.tb")
            eq(read_all(m.p("index.json")), man_old, "index.json")
            for e in es:
                check_views(m, e)

        suite.case("rename: manifest .tb file and manifest.json replaced by rename -> the old "
                   "bytes are served", manifest)


def truncated_extended(suite, tmp):
    ts, cont = container_pair((97, 98), "llama")
    path = os.path.join(tmp, "shrink.tbm")
    gen.write_file(path, cont.data)
    first, second = (Expect(t.name, t.name.encode(), t.shape, t.header, cont.data, off,
                            cont.index_start) for t, off in zip(ts, cont.offsets))
    w0 = second.off + 4096
    cut = w0 + 10000  # inside second's weights (16 KiB), past two whole pages
    m = suite.mount(path, name="truncate: mounts")
    with m:
        jsons = {p: read_all(m.p(*p.split("/"))) for p in (
            "index.json", "model.json", "tensors/first/header.json",
            "tensors/second/header.json")}

        def keep_reading():
            check(m.alive(), "daemon gone")
            for p, want in jsons.items():
                eq(read_all(m.p(*p.split("/"))), want, p)

        os.truncate(path, cut)
        wpath = m.p("tensors", "second", "weights.bin")
        # [v2] a truncated source is a changed one: not even the pages it still has
        suite.case("truncate: whole pages below the new end -> EIO too", lambda: eq(
            ename(errno_of(pread, wpath, 0, 8192)), "EIO", "pread errno"))
        suite.case("truncate: pread beyond the new end -> EIO", lambda: eq(
            ename(errno_of(pread, wpath, cut - w0 + 100, 16)), "EIO", "pread errno"))
        for view in ("weights.bin", "mask.bin", "raw.tb", "dense.f32", "dense.npy"):
            suite.case("truncate: second/%s -> EIO" % view, lambda view=view: expect_eio(
                m.p("tensors", "second", view), view))

        def selftest():
            st = read_json(m.p("tensors", "second", "selftest"))
            eq(st.get("pass"), False, "pass")
            check(st.get("error"), "no error in %r" % st)
            report = read_all(m.p("selftest")).decode().splitlines()
            check(any(x.startswith("FAIL second") for x in report), "report: %r" % report)
            check(report and report[-1].startswith("selftest: "), "report: %r" % report)

        suite.case("truncate: the self-tests report the lost bytes as a failure", selftest)
        def first_eio():
            for view in ("weights.bin", "mask.bin", "raw.tb", "dense.f32", "dense.npy"):
                expect_eio(m.p("tensors", "first", view), view)

        suite.case("truncate: first's views -> EIO too", first_eio)
        suite.case("truncate: index.json, model.json, header.json keep reading", keep_reading)

        new_tail = bytes(b ^ 0xA5 for b in cont.data[cut:])
        with open(path, "r+b") as f:
            f.seek(cut)
            f.write(new_tail)

        def extended():
            eq(ename(errno_of(pread, wpath, cut - w0 + 100, 64)), "EIO",
               "weights.bin past the old cut")
            for view in ("weights.bin", "raw.tb", "dense.f32"):
                expect_eio(m.p("tensors", "second", view), view)

        # [v2] once changed, never served again: the new bytes are a new model, remount
        suite.case("extend: still EIO, the new bytes are not served", extended)
        suite.case("extend: first still EIO", first_eio)
        suite.case("extend: index.json, model.json, header.json as at mount", keep_reading)


def odd_source_path(suite, tmp):
    t = gen.make_tensor("t", [4, 8], "fp32", (2, 4), 99)
    d = os.path.join(tmp, "odd, path\\ with space")
    os.mkdir(d)
    path = os.path.join(d, "m,o\\del.tbm")
    cont = gen.container([t])
    gen.write_file(path, cont.data)
    m = suite.mount(path, name="odd path: SOURCE with ',', '\\' and ' ' mounts")
    with m:
        suite.case("odd path: index.json served", lambda: eq(
            read_all(m.p("index.json")), cont.index_bytes, "index.json"))


def main(suite):
    global gen
    gen = harness.load_gen()
    refused_sources(suite, suite.tmp)
    numbers(suite, suite.tmp)
    layout(suite, suite.tmp)
    names(suite, suite.tmp)
    manifest_files(suite, suite.tmp)
    replaced(suite, suite.tmp)
    truncated_extended(suite, suite.tmp)
    odd_source_path(suite, suite.tmp)
    many(suite, suite.tmp)


if __name__ == "__main__":
    run("integration-hostile", main)
