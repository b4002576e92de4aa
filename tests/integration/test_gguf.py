#!/usr/bin/python3
"""Integration test of the llama.cpp views (contract v3, "llama.cpp views"): model.gguf and
model.Q8_0.gguf read whole, by random preads and through mmap(MAP_SHARED), byte for byte
against an independent writer (ggufref.py: every key-value, tensor info, offset, the q/k
permutation, Q8_0 blocks with rounding ties, all-zero and NaN/infinity blocks) on fp32, fp16
2:4 and bf16 models, with and without GQA and lm_head, fp64 and 1-D tensors as F32, tensors
already named as GGUF; Q8_0 on every kernel level the CPU has; stat sizes; the models that
must have neither file and model.json's views_missing; EIO once the source changes; both files
of a model served over HTTP by a private nginx, its URL's query string kept out of general.name."""

import mmap
import os
import random
import shutil

import numpy as np

import ggufref
import harness
import httpserve
import models
from harness import check, eq, expect_eio, kernels_supported, pread, read_all, read_json, run

gen = None
GGUF = ("model.gguf", "model.Q8_0.gguf")


def write(suite, name, tensors, config, arch="llama"):
    path = os.path.join(suite.tmp, name)
    cont = gen.container(tensors, arch, config)
    gen.write_file(path, cont.data)
    return path, models.container_expects(cont, tensors)


def special_model():
    """fp32 tensors under GGUF names (not permuted) whose Q8_0 blocks hold rounding ties
    (amax 127, so d = 1), all-zero and -0.0 blocks, NaN and infinity, a tiny amax whose 1/d
    overflows, and a d too large for fp16; an fp16 1-D norm and fp64 matrices as F32, one of
    them with its rows permuted (k)."""
    tensors, config = ggufref.llama_model(
        gen, {"embed": "fp32", "norm": "fp16", "q": "fp32", "k": "fp64", "v": "fp32",
              "o": "fp64", "mlp": "fp32", "head": "fp32"}, layers=1, lm_head=True,
        names={"model.embed_tokens.weight": "token_embd.weight",
               "model.layers.0.self_attn.q_proj.weight": "blk.0.attn_q.weight"})
    emb = tensors[0]
    vals = np.frombuffer(emb.weights, dtype="<f4").copy().reshape(96, 64)
    vals[0, :32] = [127.0] + [k + 0.5 for k in range(-15, 16)]
    vals[0, 32:] = -0.0
    vals[1, :32] = 0.0
    vals[1, 40] = np.nan
    vals[2, 3] = np.inf
    vals[2, 40] = -np.inf
    vals[3, :32] = 1e-37
    vals[3, 32:] = 3e38
    tensors[0] = gen.make_tensor(emb.name, emb.shape, "fp32", (0, 0), 1,
                                 values=vals.reshape(-1).view("<u4"))
    return tensors, config


def model_cases(suite):
    """(title, file name, tensors, config, architecture) of the models that have both files."""
    extra_bad = gen.make_tensor("junk.bad_magic", [8], "fp32", (0, 0), 5,
                                header={"magic": 0x12345678})
    inv = gen.make_tensor("model.layers.0.self_attn.rotary_emb.inv_freq", [8], "fp32", (0, 0), 6)
    beyond = gen.make_tensor("model.layers.7.mlp.up_proj.weight", [4, 4], "fp32", (0, 0), 7)
    fp32 = ggufref.llama_model(gen, dict.fromkeys(
        ["embed", "norm", "q", "k", "v", "o", "mlp", "head"], "fp32"), kv_heads=2)
    fp16 = ggufref.llama_model(gen, dict.fromkeys(
        ["embed", "norm", "q", "k", "v", "o", "mlp", "head"], "fp16"), kv_heads=4,
        lm_head=False, extra=[extra_bad, inv, beyond], seed=1, prune=False)
    bf16 = ggufref.llama_model(gen, dict.fromkeys(
        ["embed", "norm", "q", "k", "v", "o", "mlp", "head"], "bf16"), kv_heads=1,
        lm_head=False, seed=2, prune=False, config_extra={"rope_theta": 500000.0, "norm_eps": 1e-6})
    return [("fp32, GQA, lm_head", "fp32.tbm") + fp32 + ("llama",),
            ("fp16 2:4 (pruned values stored), no GQA, no lm_head, omitted tensors", "fp16.tbm") + fp16 + ("llama",),
            ("bf16, GQA 4:1, no lm_head, Mistral", "bf16.model.tbm") + bf16 + ("Mistral",),
            ("GGUF names, Q8_0 edge blocks, fp64 and fp16 as F32", "special.tbm")
            + special_model() + ("llama",)]


def check_files(m, expects, config, name):
    for q8, f in enumerate(GGUF):
        want = ggufref.write(expects, config, name, bool(q8))
        check(want is not None, "the reference writes %s" % f)
        got = read_all(m.p(f))
        eq(os.stat(m.p(f)).st_size, len(want), "%s stat size" % f)
        if got != want:
            at = next(i for i in range(min(len(got), len(want))) if got[i] != want[i]) \
                if len(got) == len(want) else min(len(got), len(want))
            check(False, "%s differs from the reference at byte %d of %d" % (f, at, len(want)))


def check_ranges(m, expects, config, name):
    rnd = random.Random(26)
    for q8, f in enumerate(GGUF):
        want = ggufref.write(expects, config, name, bool(q8))
        for _ in range(300):
            off = rnd.randrange(len(want) + 64)
            n = rnd.choice([1, 2, 3, 33, 34, 35, 4095, 4096, 70000, rnd.randrange(1, 300000)])
            eq(pread(m.p(f), off, n), want[off: off + n], "%s pread %d+%d" % (f, off, n))
        # O_DIRECT reaches the daemon at the offset asked: elements and blocks cut anywhere
        fd = os.open(m.p(f), os.O_RDONLY | os.O_DIRECT)
        try:
            buf = mmap.mmap(-1, 1 << 20)
            for _ in range(300):
                off = rnd.randrange(len(want))
                n = os.preadv(fd, [memoryview(buf)[:rnd.randrange(1, 1 << 20)]], off)
                eq(buf[:n], want[off: off + n], "%s O_DIRECT pread at %d" % (f, off))
        finally:
            os.close(fd)
        with open(m.p(f), "rb") as fh:
            with mmap.mmap(fh.fileno(), 0, mmap.MAP_SHARED, mmap.PROT_READ) as mm:
                check(mm[:] == want, "%s through mmap(MAP_SHARED)" % f)


def levels(suite, path, expects, config, name):
    for isa in kernels_supported():
        with harness.Mount(suite, path, env={"TBMFS_KERNELS": isa}) as m:
            eq(m.start(), 0, "mount with TBMFS_KERNELS=%s" % isa)
            want = ggufref.write(expects, config, name, True)
            check(read_all(m.p("model.Q8_0.gguf")) == want,
                  "model.Q8_0.gguf with TBMFS_KERNELS=%s differs from the reference" % isa)


def no_gguf(suite):
    """Models that cannot be a GGUF: neither file, one line in views_missing."""
    dt = dict.fromkeys(["embed", "norm", "q", "k", "v", "o", "mlp", "head"], "fp16")
    base, config = ggufref.llama_model(gen, dt, layers=2, lm_head=False)
    up = "model.layers.1.mlp.up_proj.weight"
    i_up = [t.name for t in base].index(up)
    broken = list(base)
    broken[i_up] = gen.make_tensor(up, [80, 64], "fp16", (2, 4), 9, header={"version": 9})
    shaped = list(base)
    shaped[i_up] = gen.make_tensor(up, [64, 80], "fp16", (2, 4), 9)
    cases = [
        ("a needed tensor missing", [t for t in base if t.name != up], config, "llama",
         "no model.gguf: %s is missing" % up),
        ("a needed tensor with problems", broken, config, "llama",
         "no model.gguf: %s has problems" % up),
        ("a needed tensor of the wrong shape", shaped, config, "llama",
         "no model.gguf: %s does not have the shape [80, 64]" % up),
        ("a needed tensor twice", base + [base[i_up]], config, "llama",
         "no model.gguf: %s is there twice" % up),
        ("a config key missing", base, {k: v for k, v in config.items() if k != "vocab_size"},
         "llama", "no model.gguf: the config has no vocab_size"),
        ("num_heads not dividing hidden_size", base, dict(config, num_heads=5), "llama",
         "no model.gguf: hidden_size 64 is not a multiple of num_heads 5 with an even number "
         "per head"),
        ("num_layers past the tensors", base, dict(config, num_layers=4294967295), "llama",
         "no model.gguf: num_layers 4294967295 needs more tensors than the model's %d"
         % len(base)),
        ("hidden_size past the tensors", base,
         dict(config, hidden_size=4294967294, num_heads=1, num_kv_heads=1), "llama",
         "no model.gguf: model.embed_tokens.weight does not have the shape [96, 4294967294]"),
        ("intermediate_size past the tensors", base, dict(config, intermediate_size=4294967295),
         "llama",
         "no model.gguf: model.layers.0.mlp.gate_proj.weight does not have the shape "
         "[4294967295, 64]"),
        ("vocab_size past the tensors", base, dict(config, vocab_size=4294967295), "llama",
         "no model.gguf: model.embed_tokens.weight does not have the shape [4294967295, 64]"),
        ("num_heads past hidden_size", base, dict(config, num_heads=4294967295), "llama",
         "no model.gguf: hidden_size 64 is not a multiple of num_heads 4294967295 with an even "
         "number per head"),
        ("another architecture", base, config, "gpt2", None),
    ]
    for k, (title, tensors, cfg, arch, line) in enumerate(cases):
        def one(tensors=tensors, cfg=cfg, arch=arch, line=line, k=k):
            path, _ = write(suite, "none%d.tbm" % k, tensors, cfg, arch)
            with harness.Mount(suite, path) as m:
                eq(m.start(), 0, "mount")
                names = set(os.listdir(m.path))
                check(not names & set(GGUF), "GGUF files listed: %s" % sorted(names & set(GGUF)))
                for f in GGUF:
                    check(not os.path.exists(m.p(f)), "%s exists" % f)
                doc = read_json(m.p("model.json"))
                if line is None:
                    check("views_missing" not in doc, "views_missing for %s" % arch)
                else:
                    eq(doc.get("views_missing"), [line], "views_missing")
        suite.case("no GGUF: %s" % title, one)


def changed(suite):
    """A source that changes under the mount: reads fail with EIO, as for every view."""
    tensors, config = ggufref.llama_model(gen, dict.fromkeys(
        ["embed", "norm", "q", "k", "v", "o", "mlp", "head"], "fp32"), layers=1)
    path, _ = write(suite, "change.tbm", tensors, config)
    with harness.Mount(suite, path) as m:
        eq(m.start(), 0, "mount")
        read_all(m.p("model.gguf"))
        with open(path, "r+b") as f:
            f.truncate(os.path.getsize(path) // 2)
        expect_eio(m.p("model.Q8_0.gguf"), "model.Q8_0.gguf after the change")


def over_http(suite, path, expects, config):
    """The same bytes from a URL (a private nginx on loopback), named without the query."""
    root = os.path.join(suite.tmp, "www")
    os.makedirs(root, exist_ok=True)
    shutil.copy(path, os.path.join(root, "remote.tbm"))
    with httpserve.Nginx(os.path.join(suite.tmp, "nginx"), root) as nginx:
        with harness.Mount(suite, nginx.url("remote.tbm") + "?X-Amz-Signature=sec.ret") as m:
            eq(m.start(), 0, "mount of the URL")
            for q8, f in enumerate(GGUF):
                want = ggufref.write(expects, config, "remote", bool(q8))
                got = read_all(m.p(f))
                check(b"X-Amz" not in got[:4096], "%s: the query string in the header" % f)
                check(got == want, "%s over HTTP differs from the reference" % f)


def main(suite):
    global gen
    gen = harness.load_gen()
    for title, fname, tensors, config, arch in model_cases(suite):
        path, expects = write(suite, fname, tensors, config, arch)
        name = fname.rsplit(".", 1)[0]
        m = suite.mount(path, name="mount %s" % title)
        suite.case("%s: both files listed, views_missing empty" % title, lambda m=m: (
            check(set(GGUF) <= set(os.listdir(m.path)), "both files listed"),
            eq(read_json(m.p("model.json")).get("views_missing"), [], "views_missing")))
        suite.case("%s: bytes against the reference writer" % title,
                   lambda m=m, e=expects, c=config, n=name: check_files(m, e, c, n), timeout=120)
        suite.case("%s: random preads and mmap" % title,
                   lambda m=m, e=expects, c=config, n=name: check_ranges(m, e, c, n), timeout=120)
        m.stop()
        if fname == "fp16.tbm":
            suite.case("%s: over HTTP" % title,
                       lambda p=path, e=expects, c=config: over_http(suite, p, e, c), timeout=120)
        if fname in ("special.tbm", "fp16.tbm"):
            suite.case("%s: Q8_0 on every kernel level" % title,
                       lambda p=path, e=expects, c=config, n=name: levels(suite, p, e, c, n),
                       timeout=120)
    no_gguf(suite)
    suite.case("a changed source: EIO", lambda: changed(suite))


if __name__ == "__main__":
    run("integration-gguf", main)
