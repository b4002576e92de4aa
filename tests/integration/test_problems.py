#!/usr/bin/python3
"""Integration test of bad input: broken tensors (problems in header.json, EIO on the views that
cannot be served, the mount stays up), warnings, refused SOURCEs, refused manifest files,
--check exit codes and lines, -o strict, and a SOURCE truncated while mounted."""

import errno
import json
import os

import harness
import models
from harness import (Mount, check, ename, eq, errno_of, expect_eio, mounted, read_all, read_json,
                     run, run_tbmfs)
from tbmref import ROOT_FILES, dir_names, to_f32_bits

EIO = errno.EIO
gen = None


def build_broken(tmp):
    """A container with one sound tensor and one tensor per kind of problem. Returns the path,
    the tensors and, per problem tensor, (views that must fail with EIO, views whose bytes are
    known, header.json fields that must hold)."""
    mk = gen.make_tensor
    sound = mk("sound.tensor", [4, 8], "fp32", (2, 4), 1)
    t_magic = mk("bad.magic", [4, 8], "fp32", (2, 4), 2, header={"magic": 0xDEADBEEF})
    t_version = mk("bad.version", [4, 8], "fp32", (2, 4), 3, header={"version": 2})
    t_prec = mk("bad.precision", [4, 8], 7, (2, 4), 4, index={"dtype": "fp32"})
    t_m40 = mk("mask.m_over_32", [80], "fp32", (2, 40), 5)
    t_nm = mk("mask.n_over_m", [32], "fp16", (5, 4), 6)
    short = mk("mask.size_short", [32], "fp32", (2, 4), 7, prune=False)
    t_short = mk("mask.size_short", [32], "fp32", (2, 4), 7, prune=False,
                 header={"num_mask_bytes": len(short.mask) - 1},
                 index={"num_mask_bytes": len(short.mask) - 1})
    t_long = mk("mask.size_long", [32], "bf16", (2, 4), 8, prune=False,
                mask_bytes=short.mask + b"\x0f")
    t_mask_eof = mk("mask.past_eof", [4, 8], "fp32", (2, 4), 9, header={"masks_offset": 1 << 40})
    t_over = mk("overflow.weights", [4, 8], "fp32", (2, 4), 10,
                header={"num_weights": (1 << 62) + 8}, index={"num_weights": (1 << 62) + 8})
    t_over_m = mk("overflow.mask", [4, 8], "fp32", (2, 4), 11,
                  header={"num_mask_bytes": (1 << 64) - 16})
    t_eof = mk("offset.past_eof", [4, 8], "fp32", (2, 4), 12, index={"offset": 1 << 33})
    t_into = mk("offset.into_index", [4, 8], "fp32", (2, 4), 13)
    t_weof = mk("weights.past_eof", [16], "fp32", (0, 0), 14,
                header={"num_weights": 1 << 30}, index={"num_weights": 1 << 30})
    tensors = [sound, t_magic, t_version, t_prec, t_m40, t_nm, t_short, t_long, t_mask_eof,
               t_over, t_over_m, t_eof, t_into, t_weof]
    # offset.into_index points 100 bytes before the index; the index holds that offset, so
    # settle it by rebuilding until the index length stops moving.
    at = 0
    for _ in range(5):
        t_into.extra["index_overrides"] = {"offset": at}
        t_into.index["offset"] = at
        cont = gen.container(tensors, config={"hidden_size": 16})
        if at == cont.index_start - 100:
            break
        at = cont.index_start - 100
    check(at == cont.index_start - 100, "could not place offset.into_index")
    path = os.path.join(tmp, "broken.tbm")
    gen.write_file(path, cont.data)
    woff = cont.entries[tensors.index(t_mask_eof)]["offset"] + 4096
    mask_eof_weights = cont.data[woff: woff + len(t_mask_eof.weights)]
    unmasked = {t.name: _unmasked(t) for t in (t_m40, t_nm, t_short, t_long)}
    dense_all = ("raw.tb", "weights.bin", "mask.bin", "dense.f32", "dense.npy")
    cases = [
        (t_magic, ("dense.f32", "dense.npy"), {}, {"magic": "0xdeadbeef", "dtype": "fp32"}),
        (t_version, ("dense.f32", "dense.npy"), {}, {"version": 2, "dtype": "fp32"}),
        (t_prec, ("raw.tb", "weights.bin", "dense.f32", "dense.npy"), {},
         {"precision": 7, "dtype": None}),
        (t_m40, (), {"weights.bin": t_m40.weights, "mask.bin": t_m40.mask,
                     "dense.f32": unmasked[t_m40.name]}, _null_stats()),
        (t_nm, (), {"weights.bin": t_nm.weights, "mask.bin": t_nm.mask,
                    "dense.f32": unmasked[t_nm.name]}, _null_stats()),
        (t_short, (), {"weights.bin": t_short.weights, "mask.bin": t_short.mask[:-1],
                       "dense.f32": unmasked[t_short.name]}, _null_stats()),
        (t_long, (), {"weights.bin": t_long.weights, "mask.bin": t_long.mask,
                      "dense.f32": unmasked[t_long.name]}, _null_stats()),
        (t_mask_eof, ("mask.bin", "raw.tb", "dense.f32", "dense.npy"),
         {"weights.bin": mask_eof_weights}, _null_stats()),
        (t_over, ("raw.tb", "weights.bin", "dense.f32", "dense.npy"), {},
         {"num_weights": (1 << 62) + 8, "magic": "0x31304254"}),
        # the mask fails the usable-mask rule before its region is looked at, so the dense
        # views show the stored weights unmasked
        (t_over_m, ("raw.tb", "mask.bin"), {"weights.bin": t_over_m.weights,
                                            "dense.f32": _unmasked(t_over_m)},
         {"num_mask_bytes": (1 << 64) - 16}),
        (t_eof, dense_all, {}, dict(_null_stats(), magic=None, num_weights=None, nm_m=None)),
        (t_into, ("raw.tb", "dense.f32", "dense.npy"), {}, {}),
        (t_weof, ("raw.tb", "weights.bin", "dense.f32", "dense.npy"), {}, {}),
    ]
    return path, tensors, cases, cont


def _null_stats():
    return {"kept": None, "density": None, "groups_over_n": None, "mask_conflicts": None}


def _unmasked(t):
    return to_f32_bits(t.header["precision"], t.weights).astype("<u4").tobytes()


def broken_container(suite, tmp):
    path, tensors, cases, cont = build_broken(tmp)
    dirs = dict(zip([t.name for t in tensors], dir_names([t.name for t in tensors])))
    m = suite.mount(path, name="broken: mounts despite broken tensors")
    with m:
        for t, eio, served, fields in cases:
            d = m.p("tensors", dirs[t.name])

            def header(t=t, d=d, fields=fields):
                hj = read_json(os.path.join(d, b"header.json"))
                eq(hj.get("name"), t.name, "name")
                p = hj.get("problems")
                check(isinstance(p, list) and p and all(isinstance(x, str) for x in p),
                      "problems: %r" % (p,))
                for k, v in fields.items():
                    got = hj.get(k, "<missing>")
                    if isinstance(v, str) and isinstance(got, str):
                        got, v = got.lower(), v.lower()
                    eq(got, v, k)

            suite.case("broken: %s: header.json lists problems" % t.name, header)
            for view in eio:
                suite.case("broken: %s: %s -> EIO" % (t.name, view),
                           lambda d=d, view=view: expect_eio(os.path.join(d, view.encode()), view))
            for view, want in served.items():
                suite.case("broken: %s: %s served" % (t.name, view),
                           lambda d=d, view=view, want=want: eq(
                               read_all(os.path.join(d, view.encode())), want, view))

        def still_up():
            check(m.alive(), "daemon gone")
            eq(set(os.listdir(m.path)), ROOT_FILES, "root listing")
            eq(read_all(m.p("tensors", "sound.tensor", "weights.bin")), tensors[0].weights,
               "sound tensor weights.bin")

        suite.case("broken: mount still up after the EIOs", still_up)

        def no_null():
            for t in tensors:
                hj = read_json(m.p("tensors", dirs[t.name], "header.json"))
                for s in (hj.get("problems") or []) + (hj.get("warnings") or []):
                    check("(null)" not in s, "%s: %r" % (t.name, s))

        suite.case("broken: no problem or warning names \"(null)\"", no_null)

        def model():
            mj = read_json(m.p("model.json"))
            eq(mj.get("tensors_with_problems"), len(cases), "tensors_with_problems")
            probs = mj.get("problems")
            check(isinstance(probs, list), "problems: %r" % (probs,))
            for t, *_ in cases:
                check(any(t.name in p for p in probs), "no problem names %r" % t.name)
            check(not any("sound.tensor" in p for p in probs), "the sound tensor is named")
            eq(mj.get("tensor_count"), len(tensors), "tensor_count")

        suite.case("broken: model.json counts and names the problems", model)

    def check_cmd():
        rc, out, err = run_tbmfs(["--check", path])
        eq(rc, 1, "exit code")
        lines = [x for x in (out + err).splitlines() if x.strip()]
        for t, *_ in cases:
            d = dirs[t.name].decode()
            check(any(d in x and "problem:" in x for x in lines), "no problem line names %r" % d)
        check(not any("sound.tensor" in x for x in lines), "the sound tensor has a line")

    suite.case("broken: --check exits 1, one line per problem", check_cmd)

    def strict():
        s = Mount(suite, path, ["-o", "strict"])
        try:
            rc = s.start()
            check(rc not in (0, None), "mounted with -o strict, exit %s" % rc)
            check(not mounted(s.path), "mount left behind")
            check(s.err.strip(), "no error message")
        finally:
            s.stop()

    suite.case("broken: -o strict refuses to mount", strict)


def overlap(suite, tmp):
    mk = gen.make_tensor
    a = mk("overlap.a", [4, 8], "fp32", (2, 4), 30)
    b = mk("overlap.b", [4, 8], "fp32", (2, 4), 31)
    end_a = len(gen.blob(a))
    cont = gen.container([a, b], offsets=[0, end_a - 16])
    path = os.path.join(tmp, "overlap.tbm")
    gen.write_file(path, cont.data)
    m = suite.mount(path, name="overlap: mounts")
    with m:
        def flagged():
            ps = [read_json(m.p("tensors", n, "header.json")).get("problems")
                  for n in ("overlap.a", "overlap.b")]
            check(all(isinstance(p, list) for p in ps), "problems not arrays: %r" % (ps,))
            check(ps[0] or ps[1], "neither overlapping tensor has a problem")

        suite.case("overlap: blobs overlapping are a problem", flagged)
    suite.case("overlap: --check exits 1", lambda: eq(run_tbmfs(["--check", path])[0], 1, "exit"))


def warnings_only(suite, tmp):
    tensors = models.sound_tensors(gen)[:3] + models.warning_tensors(gen) + [
        models.warning_counts_tensor(gen)]
    path = os.path.join(tmp, "warn.tbm")
    cont, expects = models.write_container(gen, path, tensors)
    warn = [e for e in expects if e.warn]
    eq(len(warn), 6, "warning tensors built")

    def check_cmd():
        rc, out, err = run_tbmfs(["--check", path])
        eq(rc, 0, "exit code")
        lines = [x for x in (out + err).splitlines() if x.strip()]
        for e in warn:
            check(any(e.dir.decode() in x and "warning:" in x for x in lines),
                  "no warning line names %r" % e.name)
        check(not any("problem:" in x for x in lines), "a problem line: %r" % lines)

    suite.case("warnings: --check exits 0 and prints each warning", check_cmd)

    def strict():
        s = Mount(suite, path, ["-o", "strict"])
        try:
            eq(s.start(), 0, "exit code (%s)" % s.err.strip())
            check(mounted(s.path), "not mounted")
            eq(len(os.listdir(s.p("tensors"))), len(tensors), "tensors listed")
        finally:
            s.stop()

    suite.case("warnings: -o strict mounts a model with warnings only", strict)
    sound = os.path.join(tmp, "sound.tbm")
    models.write_container(gen, sound, models.sound_tensors(gen))

    def sound_check():
        rc, out, err = run_tbmfs(["--check", sound])
        eq(rc, 0, "exit code")
        check(not any("problem:" in x or "warning:" in x for x in (out + err).splitlines()),
              "problem or warning printed: %r" % (out + err))

    suite.case("sound: --check exits 0 with no problem or warning", sound_check)


def refused_sources(suite, tmp):
    t = gen.make_tensor("t", [8], "fp32", (2, 4), 1)
    entry = gen.container([t]).entries[0]
    good = {"architecture": "x", "config": {}, "tensors": [entry]}

    def tbm(index_obj=None, **kw):
        return gen.container([t], index_obj=index_obj or good, **kw).data

    size = len(tbm())
    files = {
        "missing.tbm": None,
        "empty.tbm": b"",
        "three-bytes.tbm": b"\x01\x02\x03",
        "index-len-zero.tbm": tbm(index_len=0),
        "index-len-past-file.tbm": tbm(index_len=size + 1),
        "index-len-huge.tbm": tbm(index_len=0xFFFFFFFF),
        "index-into-length-word.tbm": tbm(index_len=size - 2),
        "json-unparsable.tbm": tbm(index_bytes=b'{"tensors": [}'),
        "json-trailing-garbage.tbm": tbm(index_bytes=json.dumps(good).encode() + b" x"),
        "json-array.tbm": tbm([entry]),
        "json-string.tbm": tbm(index_bytes=b'"tensors"'),
        "no-tensors.tbm": tbm({"architecture": "x", "config": {}}),
        "tensors-object.tbm": tbm({"tensors": {"t": entry}}),
        "tensors-string.tbm": tbm({"tensors": "t"}),
        "tensors-null.tbm": tbm({"tensors": None}),
    }
    sources = []
    for name, data in files.items():
        p = os.path.join(tmp, name)
        if data is not None:
            gen.write_file(p, data)
        sources.append(p)
    for name, manifest in (("dir-without-manifest", None), ("manifest-unparsable", b"{"),
                           ("manifest-array", b"[]"),
                           ("manifest-tensors-object", b'{"tensors": {}}'),
                           ("manifest-no-tensors", b'{"architecture": "x"}')):
        d = os.path.join(tmp, name)
        if manifest is None:
            os.mkdir(d)
        else:
            gen.write_manifest(d, [t], manifest_bytes=manifest)
        sources.append(d)
    for src in sources:
        label = os.path.basename(src)

        def refused(src=src):
            m = Mount(suite, src)
            try:
                rc = m.start()
                eq(rc, 1, "exit code")
                lines = [x for x in m.err.splitlines() if x.strip()]
                eq(len(lines), 1, "stderr lines (%r)" % m.err)
                check(src in lines[0], "error does not name %s: %r" % (src, lines[0]))
                check(not mounted(m.path), "mount left behind")
                check(m.find_daemon() is None, "daemon left running")
            finally:
                m.stop()

        suite.case("refused: %s: exit 1, one line naming it, no mount" % label, refused)
        suite.case("refused: %s: --check exits 2" % label,
                   lambda src=src: eq(run_tbmfs(["--check", src])[0], 2, "exit code"))

    empty = os.path.join(tmp, "no-tensors-at-all.tbm")
    gen.write_file(empty, gen.container([], config={}).data)
    m = suite.mount(empty, name="empty tensors array: mounts")
    with m:
        suite.case("empty tensors array: tensors/ is empty, tensor_count 0", lambda: (
            eq(os.listdir(m.p("tensors")), [], "tensors/"),
            eq(read_json(m.p("model.json")).get("tensor_count"), 0, "tensor_count")))


def manifest_files(suite, tmp):
    kinds = ["regular", "absolute", "dotdot", "dotdot_out", "symlink_out", "symlink_in", "fifo",
             "dir", "missing"]
    tensors = [gen.make_tensor("file.%s" % k, [4, 8], "fp32", (2, 4), 40 + i)
               for i, k in enumerate(kinds)]
    d = os.path.join(tmp, "refusals")
    gen.write_manifest(d, tensors, special=dict(enumerate(kinds)))
    ok = {"regular", "symlink_in"}
    m = suite.mount(d, name="manifest files: mounts despite refused files")
    with m:
        for k, t in zip(kinds, tensors):
            td = m.p("tensors", t.name)
            if k in ok:
                suite.case("manifest files: %s is served" % k, lambda td=td, t=t: (
                    eq(read_json(os.path.join(td, "header.json")).get("problems"), [], "problems"),
                    eq(read_all(os.path.join(td, "raw.tb")), gen.blob(t), "raw.tb")))
                continue

            def refused(td=td):
                hj = read_json(os.path.join(td, "header.json"))
                check(hj.get("problems"), "no problem listed")
                eq(hj.get("magic", "<missing>"), None, "magic of an unread header")
                for view in ("raw.tb", "weights.bin", "dense.f32"):
                    expect_eio(os.path.join(td, view), view)

            suite.case("manifest files: %s is refused, views EIO" % k, refused)
        suite.case("manifest files: mount still up", lambda: eq(
            set(os.listdir(m.path)), ROOT_FILES, "root listing"))

    def check_cmd():
        rc, out, err = run_tbmfs(["--check", d])
        eq(rc, 1, "exit code")
        for k, t in zip(kinds, tensors):
            named = any(t.name in x and "problem:" in x for x in (out + err).splitlines())
            check(named == (k not in ok), "%s: problem line %s" % (k, "missing" if not named
                                                                  else "for a good file"))

    suite.case("manifest files: --check exits 1 and names each refused file", check_cmd)


def truncated(suite, tmp):
    tensors = [gen.make_tensor("first", [64, 64], "fp32", (2, 4), 50),
               gen.make_tensor("second", [64, 64], "fp32", (2, 4), 51)]
    path = os.path.join(tmp, "shrinking.tbm")
    cont, expects = models.write_container(gen, path, tensors)
    m = suite.mount(path, name="truncated: mounts")
    with m:
        header_before = read_all(m.p("tensors", "second", "header.json"))
        os.truncate(path, expects[1].off + 100)
        suite.case("truncated: lost range -> EIO", lambda: expect_eio(
            m.p("tensors", "second", "weights.bin"), "weights.bin"))
        # [v2] a source truncated is a source changed in place: nothing read from it is served
        suite.case("truncated: the rest -> EIO too", lambda: expect_eio(
            m.p("tensors", "first", "weights.bin"), "weights.bin"))
        suite.case("truncated: index.json, model.json, header.json keep reading", lambda: (
            eq(read_all(m.p("index.json")), cont.index_bytes, "index.json"),
            read_json(m.p("model.json")),
            eq(read_all(m.p("tensors", "second", "header.json")), header_before, "header.json")))
        suite.case("truncated: daemon still running", lambda: check(m.alive(), "daemon gone"))


def main(suite):
    global gen
    gen = harness.load_gen()
    broken_container(suite, suite.tmp)
    overlap(suite, suite.tmp)
    warnings_only(suite, suite.tmp)
    refused_sources(suite, suite.tmp)
    manifest_files(suite, suite.tmp)
    truncated(suite, suite.tmp)


if __name__ == "__main__":
    run("integration-problems", main)
