#!/usr/bin/python3
"""model.gguf and model.Q8_0.gguf (contract v3, "llama.cpp views"), measured side by side in one
run on a llama model of 2 GiB of weights (16 layers, hidden 2048, 16 heads, 8 KV heads, fp32 q
and o, bf16 k, v and lm_head, fp16 embedding and MLP, projections 2:4), medians of RUNS
(default 3):

- first reads (dd bs=1M, each on a fresh mount, 3 GiB of memory written and freed before each
  as in bench_bridges.py), model.gguf and model.safetensors in turns whose order alternates;
- model.Q8_0.gguf's first read against model.gguf's, in GB/s of input weights (the stored
  weight bytes of the tensors in the file), and the kernel alone (build/tests/kernels/bench_q8_0);
- `cp model.Q8_0.gguf` into /dev/shm against a NumPy script that reads dense.npy of every tensor
  through the mount and writes the same file (once: it is slow), byte-identical checked;
- llama.cpp (node-llama-cpp, tests/integration/llama_eval.mjs) load and first evaluation of 8
  tokens, from the mount and from a copy on local disk, cold (a fresh mount and the source's
  pages dropped with POSIX_FADV_DONTNEED; the copy's pages dropped) and warm (again at once);
- the daemon's RSS while model.Q8_0.gguf is read whole, above its RSS idle after the mount.

Usage: scripts/bench_gguf.py [RUNS]."""

import json
import os
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402  (dd, sh, mounts)
from bench_bridges import pretouch  # noqa: E402

LLAMA_DIR = os.environ.get("TBMFS_LLAMA_DIR", "/opt/tbmfs-test/llama")
EVAL = os.path.join(bench.ROOT, "tests", "integration", "llama_eval.mjs")
PRECISION_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "fp64": 8}

# What a user does today to get a Q8_0 GGUF: read the dense tensors and write the file.
USER_SCRIPT = r"""
import json, os, re, struct, sys
import numpy as np
mnt, out = sys.argv[1], sys.argv[2]
model = json.load(open(os.path.join(mnt, "model.json")))
c = model["config"]
tensors = json.load(open(os.path.join(mnt, "tensors.json")))
top = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
       "lm_head.weight": "output.weight"}
layer = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q",
         "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
         "self_attn.o_proj": "attn_output", "post_attention_layernorm": "ffn_norm",
         "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
heads, kv = c["num_heads"], c.get("num_kv_heads", c["num_heads"])

def gguf_name(n):
    if n in top:
        return top[n]
    m = re.fullmatch(r"model\.layers\.(\d+)\.(.*)\.weight", n)
    if m and m.group(2) in layer and int(m.group(1)) < c["num_layers"]:
        return "blk.%s.%s.weight" % (m.group(1), layer[m.group(2)])
    return None

def q8_0(x):
    b = x.reshape(-1, 32)
    bad = ~np.isfinite(b).all(axis=1)
    b = np.where(bad[:, None], np.float32(0), b)
    d = (np.abs(b).max(axis=1) / np.float32(127)).astype(np.float32)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        i = np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
        i = np.where(np.isinf(i), np.float32(0), i)
        p = (b * i[:, None]).astype(np.float64)
        q = (np.sign(p) * np.floor(np.abs(p) + 0.5)).astype(np.int8)
    q[bad] = 0
    o = np.zeros((len(b), 34), np.uint8)
    o[:, :2] = np.where(bad, np.uint16(0x7E00), d.astype(np.float16).view(np.uint16))[:, None].view(np.uint8)
    o[:, 2:] = q.view(np.uint8)
    return o.tobytes()

def s(x):
    x = x.encode()
    return struct.pack("<Q", len(x)) + x

def kv_(k, t, v):
    return s(k) + struct.pack("<I", t) + v

infos, data, omitted = b"", [], []
off = 0
for t in tensors:
    g = gguf_name(t["name"])
    if g is None:
        omitted.append(t["name"])
        continue
    a = np.load(os.path.join(mnt, "tensors", t["dir"], "dense.npy"))
    if g.endswith(("attn_q.weight", "attn_k.weight")):
        h = heads if "attn_q" in g else kv
        a = a.reshape(h, 2, a.shape[0] // h // 2, a.shape[1]).swapaxes(1, 2).reshape(a.shape)
    if a.ndim == 2 and a.shape[1] % 32 == 0:
        blob, typ = q8_0(a), 8
    else:
        blob, typ = a.astype("<f4").tobytes(), 0
    ne = a.shape[::-1]
    infos += s(g) + struct.pack("<I", len(ne)) + struct.pack("<%dQ" % len(ne), *ne) + struct.pack("<IQ", typ, off)
    data.append(blob + bytes(-len(blob) % 32))
    off += len(data[-1])
name = os.path.splitext(os.path.basename(model["source"]))[0]
u = lambda k, v: kv_(k, 4, struct.pack("<I", v))
kvs = [kv_("general.architecture", 8, s("llama")), kv_("general.name", 8, s(name)),
       u("general.alignment", 32), u("general.file_type", 7), u("general.quantization_version", 2),
       u("llama.context_length", c.get("max_seq_len", 2048)), u("llama.embedding_length", c["hidden_size"]),
       u("llama.block_count", c["num_layers"]), u("llama.feed_forward_length", c["intermediate_size"]),
       u("llama.attention.head_count", heads), u("llama.attention.head_count_kv", kv),
       u("llama.rope.dimension_count", c["hidden_size"] // heads), u("llama.vocab_size", c["vocab_size"]),
       kv_("llama.rope.freq_base", 6, struct.pack("<f", c.get("rope_theta", 10000.0))),
       kv_("llama.attention.layer_norm_rms_epsilon", 6, struct.pack("<f", c.get("norm_eps", 1e-5))),
       kv_("tokenizer.ggml.model", 8, s("none")),
       kv_("tbmfs.omitted", 9, struct.pack("<IQ", 8, len(omitted)) + b"".join(s(n) for n in omitted))]
head = b"GGUF" + struct.pack("<IQQ", 3, len(data), len(kvs)) + b"".join(kvs) + infos
with open(out, "wb") as f:
    f.write(head + bytes(-len(head) % 32))
    for blob in data:
        f.write(blob)
"""


def timed(args, **kw):
    t0 = time.perf_counter()
    subprocess.run(args, check=True, timeout=3600, **kw)
    return time.perf_counter() - t0


def drop_file(path):
    """Drops path's pages from the page cache (this file's alone, nobody else's)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def llama_seconds(path):
    """llama.cpp's load plus first evaluation of path, as llama_eval.mjs times it."""
    p = subprocess.run(["node", EVAL, LLAMA_DIR, path, "1", "2", "3", "4", "5", "6", "7", "8"],
                       capture_output=True, timeout=600)
    if p.returncode != 0:
        raise RuntimeError("llama.cpp on %s: %s" % (path, p.stderr.decode()[-500:]))
    return float(p.stdout.split(b'"seconds":', 1)[1].split(b",", 1)[0])


def input_bytes(m):
    """Stored weight bytes of the model's tensors, every one of which this model's GGUF files
    hold (none is omitted)."""
    with open(m.p("tensors.json")) as f:
        tensors = json.load(f)
    return sum(t["num_weights"] * PRECISION_BYTES[t["dtype"]] for t in tensors)


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def rss_during_read(m, path):
    """(idle RSS, peak RSS sampled every 10 ms while path is read whole), KiB."""
    idle = rss_kib(m.pid)
    peak = [idle]
    done = threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], rss_kib(m.pid))
            time.sleep(0.01)

    th = threading.Thread(target=sample)
    th.start()
    try:
        bench.dd(path)
    finally:
        done.set()
        th.join()
    return idle, peak[0]


def main():
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    work = "/var/tmp/tbmfs-bench-gguf"
    os.makedirs(work, exist_ok=True)
    src = os.path.join(work, "llama-2g.tbm")
    if not os.path.exists(src):
        bench.sh([bench.PY, bench.GEN, "llama", src, "--layers", "16", "--hidden", "2048",
                  "--heads", "16", "--kv-heads", "8", "--intermediate", "5632", "--vocab",
                  "32000"])
    bench.dd(src)  # into the page cache
    med = statistics.median
    with bench.mount_owner():
        first = {"model.gguf": [], "model.safetensors": [], "model.Q8_0.gguf": []}
        sizes = {}
        for r in range(runs):
            for f in bench.rotated(list(first), r):
                pretouch()
                with bench.Mount(src) as m:
                    secs, sizes[f] = bench.dd(m.p(f))
                    first[f].append(secs)
                    inputs = input_bytes(m)
        out_cp, out_py = "/dev/shm/bench-cp.gguf", "/dev/shm/bench-user.gguf"
        cps = []
        for _ in range(runs):
            with bench.Mount(src) as m:
                cps.append(timed(["cp", m.p("model.Q8_0.gguf"), out_cp]))
        with bench.Mount(src) as m:
            py = timed([bench.PY, "-c", USER_SCRIPT, m.path, out_py])
        same = subprocess.run(["cmp", "-s", out_cp, out_py]).returncode == 0
        os.unlink(out_cp)
        os.unlink(out_py)
        llama = {}
        if os.path.isdir(os.path.join(LLAMA_DIR, "node_modules", "node-llama-cpp")):
            for f in ("model.gguf", "model.Q8_0.gguf"):
                local = os.path.join(work, "local-" + f)
                with bench.Mount(src) as m:
                    subprocess.run(["cp", m.p(f), local], check=True)
                for r in range(runs):
                    drop_file(src)
                    with bench.Mount(src) as m:
                        cold = llama_seconds(m.p(f))
                        warm = llama_seconds(m.p(f))
                    llama.setdefault((f, "mount"), []).append((cold, warm))
                    drop_file(local)
                    cold = llama_seconds(local)
                    llama.setdefault((f, "local"), []).append((cold, llama_seconds(local)))
                os.unlink(local)
        rss = []
        for _ in range(runs):
            with bench.Mount(src) as m:
                rss.append(rss_during_read(m, m.p("model.Q8_0.gguf")))
    gib = 1 << 30
    print("model: %s, %.2f GiB of input weights (medians of %d)" % (src, inputs / gib, runs))
    t = {f: med(v) for f, v in first.items()}
    for f in first:
        print("first read (dd, fresh mount) %-17s %6.2fs  %.2f GiB/s of its bytes (%d)  "
              "%.2f GiB/s of input  (runs: %s)" % (f, t[f], sizes[f] / t[f] / gib, sizes[f],
                                                   inputs / t[f] / gib,
                                                   ", ".join("%.2f" % x for x in first[f])))
    print("  model.gguf / model.safetensors, bytes per second:   %.2fx" %
          ((sizes["model.gguf"] / t["model.gguf"]) /
           (sizes["model.safetensors"] / t["model.safetensors"])))
    print("  model.Q8_0.gguf / model.gguf, input bytes per second: %.2fx" %
          (t["model.gguf"] / t["model.Q8_0.gguf"]))
    print("cp model.Q8_0.gguf -> /dev/shm  %.2fs (runs: %s); user script over dense.npy %.2fs: "
          "%.1fx slower, output %s" % (med(cps), ", ".join("%.2f" % x for x in cps), py,
                                       py / med(cps), "identical" if same else "DIFFERENT"))
    for (f, where), v in sorted(llama.items()):
        print("llama.cpp load + first eval, %-15s from %-5s  cold %.2fs  warm %.2fs" %
              (f, where, med([x[0] for x in v]), med([x[1] for x in v])))
    if not llama:
        print("llama.cpp: node-llama-cpp not installed in %s (scripts/install-deps.sh)" %
              LLAMA_DIR)
    print("daemon RSS reading model.Q8_0.gguf whole: idle %.1f MiB, peak %.1f MiB, "
          "+%.1f MiB (runs: %s)" % (med([x[0] for x in rss]) / 1024,
                                    med([x[1] for x in rss]) / 1024,
                                    med([x[1] - x[0] for x in rss]) / 1024,
                                    ", ".join("+%.1f" % ((x[1] - x[0]) / 1024) for x in rss)))
    subprocess.run([os.path.join(bench.ROOT, "build", "tests", "kernels", "bench_q8_0")])


if __name__ == "__main__":
    main()
