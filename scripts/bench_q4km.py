#!/usr/bin/python3
"""model.Q4_K_M.gguf (contract v4, "model.Q4_K_M.gguf [v4]"), measured side by side in one run on
a llama model of 1 GiB of weights (bench_gguf.py's model with 8 layers: hidden 2048, 16 heads, 8
KV heads, fp32 q and o, bf16 k, v and lm_head, fp16 embedding and MLP, projections 2:4), medians
of RUNS (default 3), turns alternating:

- `cp model.Q4_K_M.gguf` from a fresh mount against llama_model_quantize (node-llama-cpp's
  libllama, LLAMA_FTYPE_MOSTLY_Q4_K_M, default parameters, nthread = the CPUs) of a local copy
  of the mount's model.gguf, what a user runs today; both write to /var/tmp, their outputs
  compared byte for byte;
- first reads (dd bs=1M, fresh mount) of model.Q4_K_M.gguf against model.Q8_0.gguf, in GB/s of
  input weights (the stored weight bytes of the model) and of the file's bytes;
- the daemon's RSS while model.Q4_K_M.gguf is read whole, above its RSS idle after the mount;
- llama.cpp (tests/integration/llama_eval.mjs) load plus first evaluation of 8 tokens from the
  mount and from the reference file on local disk, cold (fresh mount, the source's or the copy's
  pages dropped) and warm (again at once);
- the kernels alone per level (build/tests/kernels/bench_quant, llama.cpp's reference functions
  beside them).

The machine's load (uptime) is printed before and after. Usage: scripts/bench_q4km.py [RUNS]."""

import filecmp
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402  (dd, sh, mounts)
from bench_bridges import pretouch  # noqa: E402
from bench_gguf import drop_file, input_bytes, llama_seconds, rss_during_read  # noqa: E402

sys.path.insert(0, os.path.join(bench.ROOT, "tests", "integration"))
import llamaquant  # noqa: E402

F, Q8 = "model.Q4_K_M.gguf", "model.Q8_0.gguf"


def uptime():
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def timed(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def versus_llama(src, local, work, runs):
    """{"cp": [s], "llama": [s]} and whether the outputs were identical."""
    out_cp, out_ll = os.path.join(work, "out-cp.gguf"), os.path.join(work, "out-llama.gguf")
    got = {"cp": [], "llama": []}
    same = True
    for r in range(runs):
        for what in bench.rotated(["cp", "llama"], r):
            pretouch()
            if what == "cp":
                with bench.Mount(src) as m:
                    got["cp"].append(timed(lambda: bench.sh(["cp", m.p(F), out_cp])))
            else:
                drop_file(local)
                got["llama"].append(timed(lambda: llamaquant.quantize(
                    local, out_ll, nthread=os.cpu_count())))
        same = same and filecmp.cmp(out_cp, out_ll, shallow=False)
    os.unlink(out_cp)
    return got, same, out_ll


def first_reads(src, runs):
    got, sizes = {F: [], Q8: []}, {}
    for r in range(runs):
        for f in bench.rotated(list(got), r):
            pretouch()
            with bench.Mount(src) as m:
                secs, sizes[f] = bench.dd(m.p(f))
                got[f].append(secs)
    return got, sizes


def llama_loads(src, ref, runs):
    got = {"mount": [], "local": []}
    for _ in range(runs):
        drop_file(src)
        with bench.Mount(src) as m:
            cold = llama_seconds(m.p(F))
            got["mount"].append((cold, llama_seconds(m.p(F))))
        drop_file(ref)
        cold = llama_seconds(ref)
        got["local"].append((cold, llama_seconds(ref)))
    return got


def runs_of(v):
    return ", ".join("%.2f" % x for x in v)


def main():
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    work = "/var/tmp/tbmfs-bench-q4km"
    os.makedirs(work, exist_ok=True)
    src = os.path.join(work, "llama-1g.tbm")
    if not os.path.exists(src):
        bench.sh([bench.PY, bench.GEN, "llama", src, "--layers", "8", "--hidden", "2048",
                  "--heads", "16", "--kv-heads", "8", "--intermediate", "5632", "--vocab",
                  "32000"])
    if llamaquant.library() is None:
        sys.exit("node-llama-cpp's libllama is not installed (scripts/install-deps.sh)")
    print("load before: %s" % uptime(), flush=True)
    bench.dd(src)  # into the page cache
    local = os.path.join(work, "model.gguf")
    med = statistics.median
    with bench.mount_owner():
        with bench.Mount(src) as m:
            bench.sh(["cp", m.p("model.gguf"), local])
            inputs = input_bytes(m)
        vs, same, ref = versus_llama(src, local, work, runs)
        reads, sizes = first_reads(src, runs)
        rss = []
        for _ in range(runs):
            with bench.Mount(src) as m:
                rss.append(rss_during_read(m, m.p(F)))
        loads = llama_loads(src, ref, runs)
    os.unlink(local)
    os.unlink(ref)
    gib = 1 << 30
    print("model: %s, %.2f GiB of input weights; %s %d bytes (medians of %d)"
          % (src, inputs / gib, F, sizes[F], runs))
    c, ll = med(vs["cp"]), med(vs["llama"])
    print("cp %s from a fresh mount   %6.2fs (runs: %s)" % (F, c, runs_of(vs["cp"])))
    print("llama_model_quantize, %d threads %6.2fs (runs: %s)"
          % (os.cpu_count(), ll, runs_of(vs["llama"])))
    print("  llama_model_quantize / cp: %.2fx; outputs %s"
          % (ll / c, "identical" if same else "DIFFERENT"))
    for f, v in reads.items():
        t = med(v)
        print("first read (dd, fresh mount) %-17s %6.2fs  %.3f GB/s of input  %.3f GB/s of its "
              "bytes  (runs: %s)" % (f, t, inputs / t / 1e9, sizes[f] / t / 1e9, runs_of(v)))
    print("  %s / %s, input bytes per second: %.2fx" % (F, Q8, med(reads[Q8]) / med(reads[F])))
    print("daemon RSS reading %s whole: idle %.1f MiB, peak %.1f MiB, +%.1f MiB (runs: %s)"
          % (F, med([x[0] for x in rss]) / 1024, med([x[1] for x in rss]) / 1024,
             med([x[1] - x[0] for x in rss]) / 1024,
             ", ".join("+%.1f" % ((x[1] - x[0]) / 1024) for x in rss)))
    for where, v in loads.items():
        print("llama.cpp load + first eval of %s from %-5s  cold %.2fs  warm %.2fs"
              % (F, where, med([x[0] for x in v]), med([x[1] for x in v])))
    print("load after: %s" % uptime(), flush=True)
    subprocess.run([os.path.join(bench.ROOT, "build", "tests", "kernels", "bench_quant")])


if __name__ == "__main__":
    main()
