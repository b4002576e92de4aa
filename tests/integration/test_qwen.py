#!/usr/bin/python3
"""qwen2 and qwen3 (contract v4, "Architectures [v4]") in a real llama.cpp: the mount's
model.gguf, byte for byte the file ggufref.py (the tests' independent writer) writes, of models
the generator writes (qwen2's q/k/v biases, qwen3's q/k head norms and a head_dim that is not
hidden_size / num_heads, GQA, with and without lm_head, fp32, fp16 and bf16) load in llama.cpp
(node-llama-cpp), whose next-token log-probabilities match ggufref.forward, the NumPy forward
pass of each architecture. Skipped (exit 77) when node-llama-cpp is not installed."""

import os
import sys

import numpy as np

import ggufref
import harness
import models
from harness import check, eq, read_all, run
from test_llama import TOKENS, llama

LLAMA_DIR = os.environ.get("TBMFS_LLAMA_DIR", "/opt/tbmfs-test/llama")
# As in test_llama.py: llama.cpp computes in float32, the reference in float64; F16 weights go
# through ggml's sgemm with float32 activations summed in another order.
TOLERANCE = {"fp32": 1e-4, "bf16": 1e-3, "fp16": 0.05}
gen = None


def compare(suite, arch, kind, tensors, config, name):
    cont = gen.container(tensors, arch, config)
    expects = models.container_expects(cont, tensors)
    path = os.path.join(suite.tmp, name + ".tbm")
    gen.write_file(path, cont.data)
    data = ggufref.write(expects, config, name, False, arch=arch)
    check(data is not None, "ggufref.py finds no GGUF in the model")
    with harness.Mount(suite, path) as m:
        eq(m.start(), 0, "mount")
        check(read_all(m.p("model.gguf")) == data,
              "the mount's model.gguf differs from ggufref.py's")
        got = llama(m.p("model.gguf"))
    weights, types = ggufref.weights_of(expects, config, False, arch)
    want = ggufref.forward(weights, config, TOKENS, types, arch)
    check(got.shape == want.shape, "llama.cpp gave %s log-probabilities, want %s"
          % (got.shape, want.shape))
    err = np.abs(got - want)
    worst = np.unravel_index(np.argmax(err), err.shape)
    check(err.max() <= TOLERANCE[kind], "log-probability off by %.3g at position %d, token %d "
          "(tolerance %g; per position %s)" % (err.max(), worst[0], worst[1], TOLERANCE[kind],
                                               np.round(err.max(axis=1), 4).tolist()))
    print("#   %s: largest difference %.2g" % (name, err.max()), flush=True)


def main(suite):
    global gen
    gen = harness.load_gen()
    dt = ["embed", "norm", "q", "k", "v", "o", "mlp", "head"]
    cases = [
        ("qwen2", "fp32", "GQA 2:1, lm_head", dict(kv_heads=2)),
        ("qwen2", "bf16", "GQA 4:1, no lm_head", dict(kv_heads=1, lm_head=False, seed=1)),
        ("qwen3", "fp32", "head_dim 24 (hidden 64 / 4 heads is 16), GQA 2:1, lm_head",
         dict(kv_heads=2, hd=24, seed=2)),
        ("qwen3", "fp16", "head_dim 16 given by hidden / heads, no GQA, no lm_head",
         dict(kv_heads=4, lm_head=False, seed=3, prune=False)),
        ("qwen3", "bf16", "head_dim 8, GQA 4:1, no lm_head", dict(kv_heads=1, hd=8, seed=4,
                                                               lm_head=False)),
    ]
    for arch, kind, what, kw in cases:
        tensors, config = ggufref.qwen_model(gen, arch, dict.fromkeys(dt, kind), scale=0.15, **kw)
        name = "%s-%s-%s" % (arch, kind, kw.get("seed", 0))
        suite.case("llama.cpp runs the mount's %s (%s, %s)" % (arch, kind, what),
                   lambda a=arch, k=kind, t=tensors, c=config, n=name: compare(suite, a, k, t, c,
                                                                               n),
                   timeout=120)


if __name__ == "__main__":
    if os.environ.get("TBMFS_SANITIZED"):
        print("SKIP integration-qwen: its time goes to llama.cpp; integration-vocab_mount "
              "reads the same files from the sanitized tbmfs", flush=True)
        sys.exit(77)
    if not os.path.isdir(os.path.join(LLAMA_DIR, "node_modules", "node-llama-cpp")):
        print("SKIP integration-qwen: node-llama-cpp is not installed in %s "
              "(scripts/install-deps.sh installs it)" % LLAMA_DIR, flush=True)
        sys.exit(77)
    run("integration-qwen", main)
