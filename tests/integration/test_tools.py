#!/usr/bin/python3
"""Integration test of files as the Tensorbit tools write them (contract v2, "Sources written by
the Tensorbit tools"): the four real samples in samples/ and generated files with each
convention in every precision it applies to. Every view is checked against a reference that
this file computes from the stored bytes and the contract's rules, never from tbmfs."""

import hashlib
import json
import os
import struct

import harness
import models
from harness import check, eq, expect_eio, read_all, read_json, run, run_tbmfs
from tbmref import Expect, dir_names, parse_npy

SAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "samples")
MAGIC, VERSION, HEADER = 0x31304254, 1, 4096
ELEM = {0: 4, 1: 2, 2: 2, 3: 8}
gen = None


def read_container(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack_from("<I", data, len(data) - 4)
    start = len(data) - 4 - n
    return data, start, json.loads(data[start: len(data) - 4])


def valid_at(data, off, limit):
    if off + HEADER > limit:
        return None
    h = models.header_of(data, off)
    return h if h["magic"] == MAGIC and h["version"] == VERSION else None


def blob_end(h, off):
    wend = h["weights_offset"] + h["num_weights"] * ELEM.get(h["precision"], 4)
    mend = h["masks_offset"] + h["num_mask_bytes"]
    return off + max(HEADER, wend if h["num_weights"] else 0, mend if h["num_mask_bytes"] else 0)


def found_offsets(data, limit, entries):
    """Where each blob is, by the contract's rule for misplaced blobs: at its index offset when
    that holds a valid header; else at the end of the previous tensor's blob (as found) when a
    valid header there agrees with the entry on num_weights, nm_n and nm_m; else None."""
    found = []
    for i, e in enumerate(entries):
        off = e["offset"]
        if valid_at(data, off, limit):
            found.append(off)
            continue
        prev = found[i - 1] if i > 0 else None
        ph = valid_at(data, prev, limit) if prev is not None else None
        cand = blob_end(ph, prev) if ph else None
        h = valid_at(data, cand, limit) if cand is not None else None
        ok = h and all(e.get(k) == h[k] for k in ("num_weights", "nm_n", "nm_m"))
        found.append(cand if ok else None)
    return found


def shape_of(e):
    s = e.get("shape")
    return s[:1] if isinstance(s, list) and len(s) == 2 and s[1] == 0 else s


def expects_of(path):
    data, start, index = read_container(path)
    entries = index["tensors"]
    dirs = dir_names([e["name"] for e in entries])
    out = []
    for e, d, off in zip(entries, dirs, found_offsets(data, start, entries)):
        if off is None:
            out.append(None)
            continue
        out.append(Expect(e["name"], d, shape_of(e), models.header_of(data, off), data, off,
                          start, e))
    return out, entries, dirs


def check_tensor(m, e, entry, where):
    d = m.p(b"tensors", e.dir)
    hj = read_json(os.path.join(d, b"header.json"))
    eq(hj["problems"], [], "%s: problems" % where)
    eq(hj["offset"], e.off, "%s: header.json offset (where the blob was found)" % where)
    eq(hj["index"], entry, "%s: header.json index (the stored entry)" % where)
    eq(hj["shape"], e.shape, "%s: header.json shape" % where)
    eq(read_all(os.path.join(d, b"raw.tb")), e.raw, "%s: raw.tb" % where)
    eq(read_all(os.path.join(d, b"weights.bin")), e.weights, "%s: weights.bin" % where)
    eq(read_all(os.path.join(d, b"mask.bin")), e.mask, "%s: mask.bin" % where)
    eq(read_all(os.path.join(d, b"dense.f32")), e.dense, "%s: dense.f32" % where)
    header, _, payload = parse_npy(read_all(os.path.join(d, b"dense.npy")))
    eq(payload, e.dense, "%s: dense.npy payload" % where)
    eq(tuple(header["shape"]), e.npy_shape(), "%s: dense.npy shape" % where)
    if e.stats is not None:
        eq(hj["kept"], e.stats[0], "%s: kept" % where)
        eq(hj["groups_over_n"], e.stats[2], "%s: groups_over_n" % where)
        eq(hj["mask_conflicts"], e.stats[3], "%s: mask_conflicts" % where)
    if hj["nm_m"]:
        st = read_json(os.path.join(d, b"selftest"))
        eq(st.get("pass"), True, "%s: selftest pass (%r)" % (where, st.get("error")))
        check(isinstance(st.get("tolerance"), float), "%s: tolerance %r" % (where,
                                                                          st.get("tolerance")))


def check_lines(path):
    rc, out, _ = run_tbmfs(["--check", path])
    return rc, out.splitlines()


def sample(suite, name, sha256, must_warn):
    path = os.path.join(SAMPLES, name)
    with open(path, "rb") as f:
        eq(hashlib.sha256(f.read()).hexdigest(), sha256, "%s: sha256" % name)
    rc, lines = check_lines(path)
    suite.case("%s: --check exits 0 with no problem" % name, lambda: (
        eq(rc, 0, "exit code"),
        eq([x for x in lines if ": problem: " in x], [], "problem lines")))
    warnings = [x for x in lines if ": warning: " in x]
    for what in must_warn:
        suite.case("%s: --check warns: %s" % (name, what), lambda what=what: check(
            any(what in x for x in warnings), "no warning says %r: %r" % (what, warnings[:5])))
    m = suite.mount(path, args=["-o", "strict"], name="%s: mounts with -o strict" % name)
    with m:
        if name.endswith(".tb"):
            data = open(path, "rb").read()
            stem = name[:-3]
            h = models.header_of(data, 0)
            expects = [Expect(stem, dir_names([stem])[0], [h["num_weights"]], h, data, 0,
                              len(data))]
            entries = [json.loads(read_all(m.p("index.json")))["tensors"][0]]
        else:
            expects, entries, _ = expects_of(path)
        for e, entry in zip(expects, entries):
            suite.case("%s: %s: every view against the reference" % (name, entry["name"]),
                       lambda e=e, entry=entry: check(e is not None, "no blob found by the rules")
                       or check_tensor(m, e, entry, entry["name"]))

        def counts():
            mj = read_json(m.p("model.json"))
            eq(mj["tensors_with_problems"], 0, "tensors_with_problems")
            eq(mj["problems"], [], "problems")
            eq(mj["warnings"], len(warnings), "warnings (as --check counts them)")
            eq(mj["tensors_with_warnings"], len({x.split(": warning: ")[0] for x in warnings}),
               "tensors_with_warnings")

        suite.case("%s: model.json counts" % name, counts)


def generated_tools(suite, tmp):
    """Each convention on purpose, in every precision it applies to."""
    mk = gen.make_tensor
    ts = []
    for i, dtype in enumerate(("fp32", "fp16", "bf16", "fp64")):
        for m in (8, 9, 16, 24, 32):
            n = min(4, m)
            ts.append(mk("bytes.%s.m%d" % (dtype, m), [3, 2 * m], dtype, (n, m), 10 * i + m,
                         tools_mask=True))
            # a partial last group, one group short, in the tools' layout
            ts.append(mk("bytes_short.%s.m%d" % (dtype, m), [2 * m + 3], dtype, (n, m),
                         100 + 10 * i + m, tools_mask=True, short_mask=True))
        ts.append(mk("words_short.%s" % dtype, [3, 7], dtype, (2, 4), 300 + i, short_mask=True))
    ts.append(mk("shape_n0", [24], "fp32", (2, 4), 400, index={"shape": [24, 0]}))
    path = os.path.join(tmp, "tools.tbm")
    cont = gen.container(ts)
    gen.write_file(path, cont.data)
    rc, lines = check_lines(path)
    suite.case("generated layouts: --check exits 0, no problem", lambda: (
        eq(rc, 0, "exit"), eq([x for x in lines if ": problem: " in x], [], "problems")))
    for t in ts:
        name = t.name
        want = []
        if ".m" in name and int(name.rsplit("m", 1)[1]) >= 9:
            want.append("one byte per group of")
        if "short" in name:
            want.append("one short")
        got = [x for x in lines if ("tensor %s: warning" % name) in x]
        suite.case("generated layouts: %s warns %s" % (name, want or "nothing"),
                   lambda want=want, got=got: eq([w for w in want if not any(w in g for g in got)],
                                                 [], "missing warnings (%r)" % got)
                   if want else eq(got, [], "warnings"))
    expects, entries, _ = expects_of(path)
    m = suite.mount(path, name="generated layouts: mounts")
    with m:
        for e, entry in zip(expects, entries):
            suite.case("generated layouts: %s: every view" % entry["name"],
                       lambda e=e, entry=entry: check_tensor(m, e, entry, entry["name"]))


def merged(suite, tmp):
    """The merge script's offsets: a chain of misplaced blobs after the first non-fp32 one."""
    mk = gen.make_tensor
    ts = [mk("a.fp32", [4, 8], "fp32", (2, 4), 1), mk("b.fp64", [4, 8], "fp64", (2, 4), 2),
          mk("c.fp32", [4, 8], "fp32", (2, 4), 3), mk("d.fp16", [5, 16], "fp16", (4, 16), 4,
                                                      tools_mask=True),
          mk("e.bf16", [8], "bf16", (0, 0), 5), mk("f.fp32", [16], "fp32", (1, 2), 6)]
    cont = gen.merged_container(ts)
    path = os.path.join(tmp, "merged.tbm")
    gen.write_file(path, cont.data)
    moved = [e["offset"] != p for e, p in zip(cont.entries, cont.offsets)]
    eq(moved, [False, False, True, True, True, True], "generator: which blobs are misplaced")
    rc, lines = check_lines(path)
    suite.case("merged: --check exits 0, no problem", lambda: (
        eq(rc, 0, "exit"), eq([x for x in lines if ": problem: " in x], [], "problems")))
    for t, e, placed, mv in zip(ts, cont.entries, cont.offsets, moved):
        if not mv:
            continue
        text = "blob found at offset %d, where the previous tensor's blob ends, not at the " \
               "index's offset %d" % (placed, e["offset"])
        suite.case("merged: %s: the warning names both offsets" % t.name, lambda text=text: check(
            any(text in x for x in lines), "no warning %r in %r" % (text, lines)))
    expects, entries, _ = expects_of(path)
    eq([e.off for e in expects], cont.offsets, "reference: found where they are")
    m = suite.mount(path, args=["-o", "strict"], name="merged: mounts with -o strict")
    with m:
        for e, entry in zip(expects, entries):
            suite.case("merged: %s: every view" % entry["name"],
                       lambda e=e, entry=entry: check_tensor(m, e, entry, entry["name"]))


def not_misplaced(suite, tmp):
    """The edges of the rule where it must not apply, and the other [v2] rows."""
    mk = gen.make_tensor
    first = [mk("first.moved", [4, 8], "fp64", (2, 4), 1), mk("second", [4, 8], "fp32", (2, 4), 2)]
    c1 = gen.container(first)
    # the first tensor has no previous blob: a wrong offset stays a problem
    e1 = [dict(c1.entries[0], offset=8), c1.entries[1]]
    disagree = [mk("p", [4, 8], "fp64", (2, 4), 3), mk("q.fp32", [4, 8], "fp32", (2, 4), 4),
                mk("r.nm_differs", [4, 8], "fp32", (2, 4), 5)]
    c2 = gen.merged_container(disagree)
    e2 = [dict(x) for x in c2.entries]
    e2[2]["nm_m"] = 8  # a header there, but it disagrees with the entry
    quant = [mk("int8.weight", [64], "fp32", (0, 0), 6, index={"dtype": "int8"}),
             mk("after.int8", [4, 8], "fp32", (2, 4), 7)]
    # tensorbit-run's writer: an int8 tensor labelled fp32 with four times its size runs into
    # the next blob's header; the overreaching blob is broken, the next one stays sound
    over = [mk("over.int8_as_fp32", [16], "fp32", (0, 0), 8),
            mk("victim", [4, 8], "fp32", (2, 4), 9)]
    c4 = gen.container(over)
    big = dict(over[0].header, num_weights=over[0].header["num_weights"] * 4)
    data4 = bytearray(c4.data)
    data4[c4.offsets[0] + 16: c4.offsets[0] + 24] = struct.pack("<Q", big["num_weights"])
    cases = {
        "first.tbm": gen.container(first, index_obj={"tensors": e1}).data,
        "disagree.tbm": gen.container(disagree, index_obj={"tensors": e2}).data[:0] or
        c2.data[: c2.index_start] + _index(e2),
        "quant.tbm": gen.container(quant).data,
        "over.tbm": bytes(data4),
    }
    for name, data in cases.items():
        gen.write_file(os.path.join(tmp, name), data)
    p1 = os.path.join(tmp, "first.tbm")
    rc, lines = check_lines(p1)
    suite.case("misplaced first blob: stays a problem", lambda: (
        eq(rc, 1, "exit"), check(any("first.moved: problem: " in x for x in lines), lines)))
    rc2, lines2 = check_lines(os.path.join(tmp, "disagree.tbm"))
    suite.case("misplaced blob whose header disagrees with the entry: stays a problem", lambda: (
        eq(rc2, 1, "exit"), check(any("r.nm_differs: problem: " in x for x in lines2), lines2),
        check(any("q.fp32: warning: blob found at offset" in x for x in lines2), lines2)))
    rc3, lines3 = check_lines(os.path.join(tmp, "quant.tbm"))
    suite.case("quantized dtype: one problem naming it, nothing else for it, neighbour sound",
               lambda: (eq(rc3, 1, "exit"),
                        eq([x.split(": ", 2)[2] for x in lines3 if "int8.weight" in x],
                           ["problem: quantized dtype int8 is not supported (a tensorbit-run "
                            "extension that the format does not define): no view of it is "
                            "served"], "lines of the quantized tensor"),
                        eq([x for x in lines3 if "after.int8" in x], [], "neighbour lines")))
    m = suite.mount(os.path.join(tmp, "quant.tbm"), name="quantized: mounts")
    with m:
        def quant_views():
            for view in ("raw.tb", "weights.bin", "mask.bin", "dense.f32", "dense.npy"):
                expect_eio(m.p("tensors", "int8.weight", view), view)
        suite.case("quantized: its views are EIO", quant_views)
    rc4, lines4 = check_lines(os.path.join(tmp, "over.tbm"))
    suite.case("overreach: the blob that runs into the next header is the broken one", lambda: (
        eq(rc4, 1, "exit"),
        check(any("over.int8_as_fp32: problem: blob" in x and "runs into the header of tensor "
                  "victim" in x for x in lines4), lines4),
        eq([x for x in lines4 if "tensor victim:" in x], [], "victim lines")))


def _index(entries):
    b = json.dumps({"tensors": entries}).encode()
    return b + struct.pack("<I", len(b))


def other_rows(suite, tmp):
    """A directory without manifest.json, a .tb with bytes after its blob, a misnamed bare
    blob, duplicate names, JSON errors with their place."""
    d = os.path.join(tmp, "prune-out")
    os.makedirs(d)
    gen.write_file(os.path.join(d, "model.tbm"), b"")
    gen.write_file(os.path.join(d, "a.tb"), b"")
    d2 = os.path.join(tmp, "tb-only")
    os.makedirs(d2)
    for k in range(3):
        gen.write_file(os.path.join(d2, "t%d.tb" % k), b"")
    t = gen.make_tensor("x", [8], "fp32", (2, 4), 1)
    gen.write_file(os.path.join(tmp, "extra.tb"), gen.blob(t) + b"abcdefg")
    gen.write_file(os.path.join(tmp, "bare.tbm"), gen.blob(t))
    bad = b'{"tensors": [\n  {"name": "a"},\n  {"name": "b",}\n]}'
    gen.write_file(os.path.join(tmp, "badjson.tbm"), bad + struct.pack("<I", len(bad)))
    want = {
        d: "no manifest.json: the directory holds model.tbm: mount that file",
        d2: "no manifest.json: the directory holds 3 .tb files but no manifest.json",
        os.path.join(tmp, "bare.tbm"): "but the file starts with a valid blob header: is it a "
                                       "bare blob (name it .tb)?",
        os.path.join(tmp, "badjson.tbm"): "index is not valid JSON: unexpected character at "
                                          "byte 46 (line 3, column 16)",
    }
    for path, text in want.items():
        rc, _, err = run_tbmfs(["--check", path])
        suite.case("refused with its reason: %s" % os.path.basename(path),
                   lambda rc=rc, err=err, text=text: (
                       eq(rc, 2, "exit"), check(text in err, "%r lacks %r" % (err, text))))
    rc, lines = check_lines(os.path.join(tmp, "extra.tb"))
    suite.case(".tb with bytes after its blob: warns", lambda: (eq(rc, 0, "exit"), check(
        any("7 bytes after the blob: is this a .tbm container?" in x for x in lines), lines)))
    dups = [gen.make_tensor("same", [4], "fp32", (0, 0), i) for i in range(3)]
    path = os.path.join(tmp, "dups.tbm")
    gen.write_file(path, gen.container(dups).data)
    rc, lines = check_lines(path)
    suite.case("duplicate names: each warns naming the others", lambda: eq(
        [x.split(": ", 1)[1] for x in lines if ": warning: " in x],
        ["tensor same: warning: 2 other tensors have the same name: same~2, same~3; their "
         "directory names tell them apart",
         "tensor same~2: warning: 2 other tensors have the same name: same, same~3; their "
         "directory names tell them apart",
         "tensor same~3: warning: 2 other tensors have the same name: same, same~2; their "
         "directory names tell them apart"], "warning lines"))


def main(suite):
    global gen
    gen = harness.load_gen()
    sample(suite, "tb-prune-8of16.tbm",
           "f3bcc86c84fd46b753c4a2724b4c4ddd06e4c3c254ad0ee5fec720c7be5a761c",
           ["one byte per group of 16"])
    sample(suite, "merge-fp32-fp64.tbm",
           "ba2d3b2b36f93467ee9cf4b56d138cab5ec2e202704a156368943cd534d5cf01",
           ["blob found at offset", "one byte per group of"])
    sample(suite, "tb-run-mock.tbm",
           "f3bc92ee9e4a1b69e75cdc03635c37dda444653bf76d36bb3d42b03b6f96ea0a",
           ["pruned elements have a non-zero stored weight"])
    sample(suite, "create-test-ragged-2of4.tb",
           "06c3259db4694c4e2ba1ccc4cbd635374fb9194056cfc1882f238046a6b0943f",
           ["one short"])
    generated_tools(suite, suite.tmp)
    merged(suite, suite.tmp)
    not_misplaced(suite, suite.tmp)
    other_rows(suite, suite.tmp)


if __name__ == "__main__":
    run("integration-tools", main)
