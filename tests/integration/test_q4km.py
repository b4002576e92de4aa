#!/usr/bin/python3
"""The Q4_K_M rule against llama.cpp itself (docs/MOUNT_LAYOUT.md, "model.Q4_K_M.gguf [v4]"):
model.gguf files written by the independent writer (ggufref.py) for llama, mistral, qwen2 and
qwen3 models of many shapes, layer counts and precisions are quantized by llama_model_quantize
of node-llama-cpp (llamaquant.py); the type it gave each tensor must be the rule's
(q4kmref.q4km_types), and the whole file must be, byte for byte, the one rebuilt from model.gguf
with tbmfs's kernels (q4kmref.rebuild through quantize_rows; on every level the CPU has, the
best one only for the 80-layer models): the rule's types, the key-values, the tensor order,
offsets and padding. Rows of 256, of 96 (Q5_0, Q8_0, Q5_1), of 48 and 80 (F16, from F32, F16,
BF16 and fp64 sources), of 1 (1-D to llama.cpp), 80 layers with and without GQA (llama.cpp's
70B rule: Q5_K), tied and untied outputs, 1 to 80 layers; and llama.cpp's refusal of a NaN.
Skipped (exit 77) when node-llama-cpp is not installed."""

import os
import sys

import numpy as np

import ggufref
import harness
import llamaquant
import models
from harness import check, eq, kernels_supported, run
from q4kmref import q4km_types, rebuild

QUANTIZE_ROWS = os.environ.get("QUANTIZE_ROWS", "")
gen = None


# --- the cases ---

ALL = ["embed", "norm", "q", "k", "v", "o", "mlp", "head"]


def case(title, arch, dtypes, **kw):
    return (title, arch, dtypes if isinstance(dtypes, dict) else dict.fromkeys(ALL, dtypes), kw)


CASES = [
    case("llama fp32, GQA, lm_head, 8 layers, rows of 256 and 512", "llama", "fp32",
         hidden=256, heads=4, kv_heads=2, layers=8, inter=512, vocab=64),
    case("llama fp16 2:4 stored unpruned, no GQA, tied output (token_embd Q6_K), 3 layers",
         "llama", "fp16", hidden=256, heads=4, kv_heads=4, layers=3, inter=256, vocab=64,
         lm_head=False, prune=False),
    case("mistral bf16, rows of 96 and 160 (Q5_0, Q8_0 fall-backs), GQA 4:1, 5 layers",
         "Mistral", "bf16", hidden=96, heads=4, kv_heads=1, layers=5, inter=160, vocab=64),
    case("llama, rows of 48 and 80 (F16 fall-backs from F32, F16, BF16 and fp64), 2 layers",
         "llama", {"embed": "fp32", "norm": "fp32", "q": "bf16", "k": "fp16", "v": "fp32",
                   "o": "fp64", "mlp": "bf16", "head": "fp16"},
         hidden=48, heads=4, kv_heads=2, layers=2, inter=80, vocab=64),
    case("llama 1 layer, tied, rows of 256", "llama", "fp32", hidden=256, heads=2, kv_heads=1,
         layers=1, inter=256, vocab=32, lm_head=False),
    case("llama 80 layers with GQA (70B: attn_v Q5_K), bf16", "llama", "bf16", hidden=256,
         heads=4, kv_heads=1, layers=80, inter=32, vocab=32),
    case("llama 80 layers with GQA, rows of 96 (Q5_K falls back to Q5_1)", "llama", "fp16",
         hidden=96, heads=4, kv_heads=1, layers=80, inter=64, vocab=32),
    case("llama 80 layers without GQA, rows of 96 (65B: Q5_0)", "llama", "fp16", hidden=96,
         heads=4, kv_heads=4, layers=80, inter=64, vocab=32),
    case("qwen2 4 layers, biases, lm_head, fp32", "qwen2", "fp32", hidden=256, heads=4,
         kv_heads=2, layers=4, inter=256, vocab=64),
    case("qwen2 80 layers without GQA, rows of 96 (70B for any qwen2: Q5_1)", "qwen2", "bf16",
         hidden=96, heads=4, kv_heads=4, layers=80, inter=64, vocab=32),
    case("qwen3 head_dim 64 (q rows of 192, attn_output rows of 256), tied, 16 layers, fp16",
         "qwen3", "fp16", hidden=192, heads=4, kv_heads=2, head_dim=64, layers=16, inter=256,
         vocab=64, lm_head=False),
    case("qwen3 80 layers with GQA (no 70B rule), bf16", "qwen3", "bf16", hidden=256, heads=4,
         kv_heads=1, layers=80, inter=32, vocab=32),
    case("llama, vocab 1 and intermediate 1 (tensors [n, 1] are 1-D to llama.cpp: kept F32), "
         "GGUF-named and omitted tensors", "llama", "fp32", hidden=256, heads=4, kv_heads=2,
         layers=2, inter=1, vocab=1, names={"model.embed_tokens.weight": "token_embd.weight",
                                            "model.layers.1.mlp.down_proj.weight":
                                            "blk.1.ffn_down.weight"},
         extra="omitted"),
]


def model_gguf(suite, n, arch, dtypes, kw, nan=False):
    if kw.get("extra") == "omitted":
        kw = dict(kw, extra=[
            gen.make_tensor("model.layers.0.self_attn.rotary_emb.inv_freq", [8], "fp32", (0, 0), 6),
            gen.make_tensor("junk.weight", [4, 256], "fp32", (0, 0), 9)])
    tensors, config = ggufref.llama_model(gen, dtypes, arch=arch, seed=n, **kw)
    if nan:
        t = tensors[3]
        v = np.frombuffer(t.weights, dtype="<f4").copy()
        v[5] = np.nan
        tensors[3] = gen.make_tensor(t.name, t.shape, "fp32", (0, 0), 1, values=v.view("<u4"))
    cont = gen.container(tensors, arch, config)
    expects = models.container_expects(cont, tensors)
    data = ggufref.write(expects, config, "m%d" % n, False, arch)
    check(data is not None, "the reference writes model.gguf")
    path = os.path.join(suite.tmp, "model-%d.gguf" % n)
    with open(path, "wb") as f:
        f.write(data)
    return path


def check_case(suite, n, arch, dtypes, kw):
    if kw["layers"] == 80 and os.environ.get("TBMFS_SANITIZED"):
        # what 80 layers add is the rule's layer counts (llama.cpp and q4kmref, no tbmfs
        # code); every type's kernel on every level runs sanitized in test_quant and
        # test_quant_oracle (Q5_K and Q5_1 too, which only these models use here)
        raise harness.Skip("the rule's 80 layers: not tbmfs code, not in the sanitized build")
    src = model_gguf(suite, n, arch, dtypes, kw)
    dst = src.replace(".gguf", ".Q4_K_M.gguf")
    llamaquant.quantize(src, dst)
    with open(src, "rb") as f:
        g = llamaquant.read_gguf(f.read())
    with open(dst, "rb") as f:
        want = f.read()
    got_types = {t["name"]: t["type"] for t in llamaquant.read_gguf(want).tensors}
    types = q4km_types(g)
    name = llamaquant.GGML_TYPES
    wrong = ["%s: %s, the rule %s" % (k, name[got_types[k]][0], name[types[k]][0])
             for k in types if k in got_types and got_types[k] != types[k]]
    eq(sorted(got_types), sorted(types), "llama.cpp's tensors")
    check(not wrong, "%d tensors of another type than the rule's: %s" % (len(wrong), wrong[:6]))
    counts = {}
    for t in types.values():
        counts[llamaquant.GGML_TYPES[t][0]] = counts.get(llamaquant.GGML_TYPES[t][0], 0) + 1
    # every level on the small models; the 80-layer ones on the best (the kernel tests hold
    # every level to the portable one)
    levels = kernels_supported() if len(types) < 200 else kernels_supported()[-1:]
    for level in levels:
        got = rebuild(g, types, QUANTIZE_ROWS, level)
        eq(len(got), len(want), "size of the rebuilt file (%s)" % level)
        eq(got, want, "the rebuilt file (%s)" % level)
    print("#   %d tensors %s, %d bytes: identical on %s" % (
        len(types), sorted(counts.items()), len(want), ", ".join(levels)),
        flush=True)


def check_refusal(suite):
    """The one departure of the contract: llama.cpp writes no file from a tensor with a NaN."""
    title, arch, dtypes, kw = CASES[0]
    src = model_gguf(suite, len(CASES), arch, dtypes, dict(kw, layers=1), nan=True)
    try:
        llamaquant.quantize(src, src + ".out")
    except llamaquant.QuantizeError as e:
        check("invalid data" in str(e), "llama.cpp refuses for another reason: %s" % e)
        return
    check(False, "llama.cpp quantized a tensor holding a NaN")


def main(suite):
    global gen
    gen = harness.load_gen()
    suite.case("llama.cpp refuses a model.gguf with a NaN", lambda: check_refusal(suite),
               timeout=120)
    for n, (title, arch, dtypes, kw) in enumerate(CASES):
        suite.case("Q4_K_M of %s" % title,
                   lambda n=n, a=arch, d=dtypes, k=kw: check_case(suite, n, a, d, k),
                   timeout=240)


if __name__ == "__main__":
    if llamaquant.library() is None:
        print("SKIP integration-q4km: node-llama-cpp is not installed in %s "
              "(scripts/install-deps.sh installs it)" % llamaquant.LLAMA_DIR, flush=True)
        sys.exit(77)
    if not os.access(QUANTIZE_ROWS, os.X_OK):
        print("FAIL integration-q4km: QUANTIZE_ROWS (%r) is not the quantize_rows program"
              % QUANTIZE_ROWS, flush=True)
        sys.exit(1)
    run("integration-q4km", main)
