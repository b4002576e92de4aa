#!/usr/bin/python3
"""Integration test of the places where the mount departed from contract v2 (issue 28): blobs
that share weight bytes, a quantized tensor's header.json and self-test line, tensors.json's
nm for every tensor, the errors of a container whose index is unusable (a .tb misnamed, a file
cut short) and config.json's torch_dtype when every tensor is quantized."""

import errno
import json
import os
import resource
import struct

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


def unusable_index(suite, tmp):
    """A container whose index is unusable but that starts with a valid blob header says it
    looks like a .tb; one cut short says where it ends and what runs past."""
    mk = gen.make_tensor
    ts = [mk("c%d" % i, [16, 16], "fp32", (2, 4), 10 + i) for i in range(3)]
    cont = gen.container(ts)
    blobs = cont.data[: cont.index_start]

    def with_index(text):
        return blobs + text + struct.pack("<I", len(text))

    cases = [("t5", with_index(b'{"tensors": 5}'), "is it a bare blob (name it .tb)?"),
             ("array", with_index(b'[1, 2]'), "is it a bare blob (name it .tb)?"),
             ("nokey", with_index(b'{"tensor": []}'), "is it a bare blob (name it .tb)?"),
             ("cut-in-blob", cont.data[: cont.offsets[1] + 100],
              "incomplete file? it ends at byte %d, but the blob at offset %d runs to byte %d"
              % (cont.offsets[1] + 100, cont.offsets[1], cont.offsets[2])),
             ("cut-in-index", cont.data[: cont.index_start + 10],
              "incomplete file? it ends at byte %d, 10 bytes into the index that starts at "
              "byte %d after 3 blobs" % (cont.index_start + 10, cont.index_start))]
    for name, data, want in cases:
        path = os.path.join(tmp, name + ".tbm")
        gen.write_file(path, data)

        def go(path=path, want=want, name=name):
            rc, out, err = run_tbmfs(["--check", path])
            eq(rc, 2, "exit")
            check(want in err, "%s: %r lacks %r" % (name, err, want))
            check("bare blob" not in err or "incomplete" not in err, err)
        suite.case("unusable index: %s" % name, go)


def blank_rows(text, columns=80):
    """Rows of an 80-column terminal that show only spaces, the file printed with cat."""
    rows = 0
    for line in text.split("\n"):
        for k in range(0, len(line), columns):
            rows += line[k: k + columns].strip(" ") == ""
    return rows


def padding(suite, tmp):
    """Documents whose size is fixed at mount carry little padding, none of it as blank rows
    of a terminal: the root selftest's lines have their figures' widths bounded at mount."""
    mk = gen.make_tensor
    ts = [mk("model.layers.%d.mlp.weight" % i, [16, 32], "fp32", (2, 4), 20 + i)
          for i in range(40)]
    ts += [mk("dense.%d" % i, [8], "fp16", (0, 0), 70 + i) for i in range(5)]
    ts += [mk("bad.%d" % i, [4, 8], "fp32", (2, 4), 80 + i, header={"version": 9})
           for i in range(5)]
    path = os.path.join(tmp, "pad.tbm")
    gen.write_file(path, gen.container(ts, "llama", {"hidden_size": 16}).data)
    m = suite.mount(path, name="padding: mounts")
    with m:
        t0 = ts[0].name
        docs = ["selftest", "model.json", "tensors.json", os.path.join("tensors", t0, "selftest"),
                os.path.join("tensors", t0, "header.json"),
                os.path.join("tensors", t0, "stats.json")]
        for doc in docs:
            def none(doc=doc):
                path = m.p(doc)
                text = read_all(path).decode()
                eq(len(text.encode()), os.stat(path).st_size, "size as stat said")
                eq(blank_rows(text), 0, "%s: blank rows on an 80-column terminal" % doc)
            suite.case("padding: %s shows no blank row" % doc, none)

        def report():
            text = read_all(m.p("selftest")).decode()
            lines = text.split("\n")[:-1]
            eq(len(lines), len(ts) + 1, "lines")
            pad = sum(len(x) - len(x.rstrip(" ")) for x in lines)
            check(pad <= 24 * len(lines), "%d spaces of padding in %d lines" % (pad, len(lines)))
            eq(lines[-1].rstrip(), "selftest: 40 passed, 5 failed, 5 skipped", "summary")
        suite.case("padding: the root selftest carries at most 24 spaces a line", report)


def vm_kib(pid, field):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise harness.Failure("no %s for pid %d" % (field, pid))


def held_results(suite, tmp):
    """2,400 descriptors held on the mask.png of 600 tensors, four rounds over them, with a
    results budget (4 MiB) that the first 64 pictures fill: every open after the first of a
    picture reuses the copy that the earlier descriptors hold, so the daemon's memory grows by
    the 600 pictures (38 MiB) once, not by 2,400 renderings."""
    count, rounds = 600, 4
    need = count * rounds + 256
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(need, hard), hard))
    ts = [gen.make_tensor("held.%03d" % i, [256, 256], "fp16", (2, 4), 100 + i)
          for i in range(count)]
    path = os.path.join(tmp, "held.tbm")
    gen.write_file(path, gen.container(ts).data)
    m = suite.mount(path, env={"TBMFS_RESULTS_BUDGET": str(4 << 20)}, name="held: mounts")
    with m:
        def attack():
            if os.environ.get("TBMFS_SANITIZED"):
                raise harness.Skip("sanitized build: resident memory says nothing here")
            idle = vm_kib(m.pid, "VmRSS")
            fds = []
            try:
                for _ in range(rounds):
                    for t in ts:
                        fds.append(os.open(m.p("tensors", t.name, "mask.png"), os.O_RDONLY))
                peak = vm_kib(m.pid, "VmHWM")
                now = vm_kib(m.pid, "VmRSS")
                first = os.pread(fds[0], 8, 0)
            finally:
                for fd in fds:
                    os.close(fd)
            print("# %d descriptors on %d mask.png: VmRSS %d -> %d KiB, VmHWM %d KiB" % (
                len(fds), count, idle, now, peak))
            eq(first, b"\x89PNG\r\n\x1a\n", "a held picture reads")
            check(peak - idle < 64 << 10, "VmHWM %d KiB is %.1f MiB above idle %d KiB" % (
                peak, (peak - idle) / 1024, idle))
        suite.case("held: 2,400 descriptors on 600 mask.png: under 64 MiB above idle", attack,
                   timeout=120)


def st_header(path):
    """The JSON header of a safetensors file, refusing a key given twice."""
    def pairs(items):
        keys = [k for k, _ in items]
        check(len(keys) == len(set(keys)), "a key twice in the header: %r" % keys)
        return dict(items)
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(n), object_pairs_hook=pairs)


def safetensors_limits(suite, tmp):
    """A tensor named __metadata__ is left out of model.safetensors (the key is safetensors'
    own), and model.json says so; a header over 100,000,000 bytes means no model.safetensors,
    and model.json says why."""
    mk = gen.make_tensor
    ts = [mk("a", [8], "fp32", (0, 0), 1), mk("__metadata__", [8], "fp32", (0, 0), 2),
          mk("b", [4, 8], "fp32", (2, 4), 3)]
    path = os.path.join(tmp, "meta.tbm")
    gen.write_file(path, gen.container(ts).data)
    m = suite.mount(path, name="__metadata__ tensor: mounts")
    with m:
        def left_out():
            h = st_header(m.p("model.safetensors"))
            eq(sorted(k for k in h if k != "__metadata__"), ["a", "b"], "tensors")
            check(all(isinstance(x, str) for x in h["__metadata__"].values()), h["__metadata__"])
            eq(json.loads(h["__metadata__"]["omitted"]), ["__metadata__"], "omitted")
            notes = read_json(m.p("model.json")).get("views_notes", [])
            check(any("__metadata__ left out" in x for x in notes), notes)
        suite.case("__metadata__ tensor: left out of model.safetensors, model.json says so",
                   left_out)
    name = "n" * 65536
    big = [mk(name + "%04d" % i, [1], "fp32", (0, 0), 4) for i in range(1530)]
    path2 = os.path.join(tmp, "bighead.tbm")
    gen.write_file(path2, gen.container(big).data)
    m2 = suite.mount(path2, name="100 MB header: mounts")
    with m2:
        def none():
            missing = read_json(m2.p("model.json")).get("views_missing", [])
            check(any(x.startswith("no model.safetensors: its header would be ") and
                      "over the 100000000 that safetensors loaders accept" in x
                      for x in missing), missing)
            err = harness.errno_of(os.stat, m2.p("model.safetensors"))
            check(err in (errno.ENOENT, errno.EIO), "stat: %s" % harness.ename(err))
        suite.case("header over 100,000,000 bytes: no model.safetensors, model.json says why",
                   none, timeout=60)


def ctime_compared(suite, tmp):
    """A file rewritten in place with its mtime put back is still a change (contract v2 names
    ctime); a file replaced by a rename (its old inode's ctime bumped by the unlink) is served
    as it was."""
    mk = gen.make_tensor
    ts = [mk("w%d" % i, [16, 16], "fp32", (2, 4), 30 + i) for i in range(3)]
    other = [mk("w%d" % i, [16, 16], "fp32", (2, 4), 60 + i) for i in range(3)]
    old, new = gen.container(ts).data, gen.container(other).data
    eq(len(old), len(new), "same size")
    path = os.path.join(tmp, "ctime.tbm")
    gen.write_file(path, old)
    m = suite.mount(path, name="ctime: mounts")
    with m:
        def rewrite():
            eq(read_all(m.p("tensors", "w0", "weights.bin")), ts[0].weights, "before")
            st = os.stat(path)
            with open(path, "r+b") as f:
                f.write(new)
            os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
            eq(os.stat(path).st_mtime_ns, st.st_mtime_ns, "mtime put back")
            expect_eio(m.p("tensors", "w1", "weights.bin"), "w1/weights.bin after the rewrite")
        suite.case("ctime: a rewrite with its mtime put back is EIO", rewrite)
    path2 = os.path.join(tmp, "renamed.tbm")
    gen.write_file(path2, old)
    m2 = suite.mount(path2, name="ctime: rename: mounts")
    with m2:
        def renamed():
            gen.write_file(path2 + ".new", new)
            os.rename(path2 + ".new", path2)
            eq(read_all(m2.p("tensors", "w1", "weights.bin")), ts[1].weights, "old bytes")
        suite.case("ctime: a source replaced by a rename is served as it was", renamed)


def main(suite):
    global gen
    gen = harness.load_gen()
    shared_weights(suite, suite.tmp)
    quantized(suite, suite.tmp)
    unusable_index(suite, suite.tmp)
    padding(suite, suite.tmp)
    held_results(suite, suite.tmp)
    safetensors_limits(suite, suite.tmp)
    ctime_compared(suite, suite.tmp)


if __name__ == "__main__":
    run("integration-departures", main)
